"""The worker's HTTP pages (Faust's web server, bound to 127.0.0.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from faust.web import Request, Response, View

from rflow.codecs import json

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp


def attach(app: RflowApp) -> None:
    """Add rflow's pages to ``app``'s web server."""

    @app.page("/rflow/ready/")
    async def ready(self: View, request: Request) -> Response:
        """200 once the worker has its partitions and has recovered its tables, else 503."""
        recovered = app.tables.recovery.completed.is_set()
        ready = recovered and not app.rebalancing and not app.in_recovery
        body = {"ready": ready, "app_id": app.conf.id, "recovered": recovered}
        return self.json(body, status=200 if ready else 503)

    @app.page("/rflow/triggers/{key}/")
    class TriggerView(View):
        """One accepted trigger firing (``key`` is ``<workflow>:<trigger key>``), as this
        worker's table holds it."""

        async def get(self, request: Request, key: str) -> Response:
            record = app.rflow.tables.triggers.get(key)
            if record is None:
                return self.json({"error": f"no trigger {key!r} on this worker"}, status=404)
            # Our codec, not Faust's: payloads carry integers beyond 64 bits.
            return self.bytes(json.dumps(record), content_type="application/json")
