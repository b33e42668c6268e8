"""Agents: thin Faust consumers that decode, decide (through the engine) and act."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rflow.agents import dead_letters, intake

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp


def attach(app: RflowApp) -> None:
    """Declare every agent on ``app``."""
    intake.attach(app)
    dead_letters.attach(app)
