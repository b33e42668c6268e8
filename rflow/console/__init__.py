"""The operator's console: server-rendered pages on the worker's web server under
``/console/``, behind a sign-in with the API's tokens.

Runs, approvals, workflows, budgets, sends and dead letters, with the operator actions
the HTTP API and the CLI carry out (:class:`~rflow.streams.control.Control`). The pages
work without JavaScript; the pinned htmx and uPlot add live refresh and charts.
"""

from rflow.console.auth import PREFIX
from rflow.console.web import Console, attach, owns

__all__ = ["PREFIX", "Console", "attach", "owns"]
