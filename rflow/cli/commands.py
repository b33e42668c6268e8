"""Attaches every command module to the ``rflow`` group."""

from __future__ import annotations

from rflow.cli import (  # noqa: F401  (each module registers its commands on import)
    approvals,
    audit,
    backtest,
    budgets,
    dead_letters,
    deploy,
    dev,
    doctor,
    keys,
    ops,
    run,
    runs,
    schedules,
    sends,
    state,
    trigger,
    validate,
    workers,
    workflows,
)
