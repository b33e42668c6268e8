"""Agents: thin Faust consumers that decode, decide (through the engine) and act."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rflow.agents import dead_letters, expiry, projector, relayer, runner, timers

if TYPE_CHECKING:
    from rflow.deployment import Deployment
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)


def attach(app: RflowApp) -> None:
    """Declare every agent on ``app``."""
    run = runner.attach(app)
    timers.attach(app, run.effects, run)
    app.rflow.sweeper = expiry.attach(app, run)
    projector.attach(app)
    project = app.rflow.project
    if project is None or project.relayers:
        # Only a project that declares relayers can send: without, no worker subscribes
        # to the sends topic (fewer partitions to assign on every rebalance). A worker
        # started without a project runs whatever is deployed, so it can send.
        relayer.attach(app)
    else:
        app.rflow.on_deployment.append(_cannot_send)
    dead_letters.attach(app)
    app.rflow.runner = run


def _cannot_send(deployment: Deployment) -> None:
    if deployment.project is not None and deployment.project.relayers:
        log.error(
            "%s declares relayers, but this worker started with a project without any and "
            "runs no relayer agent: restart it to take sends (they wait in rflow.sends for "
            "a worker that does)",
            deployment.label,
        )
