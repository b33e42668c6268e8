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
    relayer.attach(app)
    dead_letters.attach(app)
    app.rflow.runner = run
