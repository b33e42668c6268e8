"""Backtests: replay a window's real firings through a candidate version of a project,
beside the deployed version, in a sandbox, and report what the candidate would do
differently (``rflow backtest``, ``rflow deploy --backtest``, the console's Backtests).

A backtest is a sandbox: it drives the workers' own pure engine (admission and
:func:`~rflow.engine.advance`) and answers every effect itself (:mod:`.sandbox`,
:mod:`.simulate`); nothing it does reaches a live topic, table, budget or nonce. The only
thing it writes is its report, to a table of its own (``backtests``).
"""

from __future__ import annotations

RUN_ACTION = "backtests.run"
"""The authorization action of running a backtest (``rflow backtest``; see
:data:`rflow.authz.ACTIONS`)."""
READ_ACTION = "backtests.read"
"""The authorization action of reading stored backtest reports (the console's pages)."""
__all__ = ["READ_ACTION", "RUN_ACTION"]
