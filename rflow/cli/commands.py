"""Attaches every command module to the ``rflow`` group."""

from __future__ import annotations

from rflow.cli import (  # noqa: F401  (each module registers its commands on import)
    approvals,
    backtest,
    budgets,
    dead_letters,
    deploy,
    doctor,
    keys,
    ops,
    run,
    runs,
    schedules,
    sends,
    trigger,
    validate,
    workflows,
)
