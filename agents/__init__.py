"""Agents: thin Faust consumers that decode, decide (through the engine) and act."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rflow.agents import dead_letters, projector, relayer, runner, timers

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp


def attach(app: RflowApp) -> None:
    """Declare every agent on ``app``."""
    run = runner.attach(app)
    timers.attach(app, run.effects, run)
    projector.attach(app)
    project = app.rflow.project
    if project is not None and project.relayers:
        # Only a project that declares relayers can send: without, no worker subscribes
        # to the sends topic (fewer partitions to assign on every rebalance).
        relayer.attach(app)
    dead_letters.attach(app)
    app.rflow.runner = run
