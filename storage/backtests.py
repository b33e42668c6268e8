"""Backtests: what a replay reads of the read model and the spend ledger (reads only),
and the reports it keeps for the console (``backtests``, the one table it writes)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from rflow.storage.errors import translated

_RUNS_OF_FIRINGS = """
SELECT run_id, workflow, version, status, trigger_key, matrix, group_key, source, trigger,
       error_kind, error_message, created_at, started_at, settled_at
FROM runs
WHERE retry_of IS NULL
  AND (workflow, trigger_key) IN (SELECT * FROM unnest(%s::text[], %s::text[]))
ORDER BY created_at, run_id
"""

_RUNS_IN_WINDOW = """
SELECT run_id, workflow, version, status, trigger_key, matrix, group_key, source, trigger,
       error_kind, error_message, created_at, started_at, settled_at
FROM runs
WHERE retry_of IS NULL AND created_at >= %(start)s AND created_at < %(end)s
  AND (%(workflows)s::text[] IS NULL OR workflow = ANY(%(workflows)s::text[]))
ORDER BY created_at, run_id
"""

_STEPS = """
SELECT run_id, path, visit, kind, status, attempt, input, output, error_kind, error_message,
       started_at, settled_at
FROM step_logs WHERE run_id = ANY(%s)
ORDER BY run_id, seq, path, visit
"""

_SENDS = """
SELECT run_id, send_key, reply ->> 'path' AS path, network, relayer, address, to_address,
       value, status, block_number, gas_used, effective_gas_price, tx_hash
FROM sends WHERE run_id = ANY(%s) AND purpose = 'step'
ORDER BY created_at, send_key
"""

_CHARGES = """
SELECT run_id, budget, asset, amount, status, send_key FROM budget_reservations
WHERE run_id = ANY(%s)
ORDER BY created_at, send_key, budget, asset
"""

# The live system's charges the replay keeps as they are: those of runs it does not
# replay (other workflows sharing a budget, runs before the window or past its limit,
# retries), over the span any cap can look back on.
_OTHER_CHARGES = """
SELECT created_at, budget, asset, amount FROM budget_reservations
WHERE status <> 'released' AND created_at > %(since)s
  AND (run_id IS NULL OR NOT run_id = ANY(%(replayed)s))
ORDER BY created_at
"""

_OTHER_GAS = """
SELECT n.recorded_at, n.network, n.relayer, n.gas_cost
FROM native_spend n LEFT JOIN sends s ON s.send_key = n.send_key
WHERE n.recorded_at > %(since)s
  AND (s.run_id IS NULL OR NOT s.run_id = ANY(%(replayed)s))
ORDER BY n.recorded_at
"""

_STORE = """
INSERT INTO backtests (started_at, finished_at, candidate, digest, deployment, window_from,
                       window_to, workflows, outcome, firings, differing, money_moves, reason,
                       report)
VALUES (%(started_at)s, %(finished_at)s, %(candidate)s, %(digest)s, %(deployment)s,
        %(window_from)s, %(window_to)s, %(workflows)s, %(outcome)s, %(firings)s,
        %(differing)s, %(money_moves)s, %(reason)s, %(report)s)
RETURNING id
"""

_RECENT = """
SELECT id, started_at, finished_at, candidate, digest, deployment, window_from, window_to,
       workflows, outcome, firings, differing, money_moves, reason
FROM backtests ORDER BY id DESC LIMIT %s
"""

_GET = "SELECT id, finished_at, report FROM backtests WHERE id = %s"


async def runs_of_firings(
    conn: psycopg.AsyncConnection, gates: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The read model's rows of the runs of the firings ``(workflow, trigger key)`` (not
    their retries)."""
    if not gates:
        return []
    workflows = [workflow for workflow, _ in gates]
    keys = [key for _, key in gates]
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_RUNS_OF_FIRINGS, (workflows, keys))
            return list(await cur.fetchall())


async def runs_in_window(
    conn: psycopg.AsyncConnection,
    start: datetime,
    end: datetime,
    workflows: Sequence[str] | None,
) -> list[dict[str, Any]]:
    """The read model's rows of the runs admitted in ``[start, end)`` (not retries)."""
    params = {"start": start, "end": end, "workflows": list(workflows) if workflows else None}
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_RUNS_IN_WINDOW, params)
            return list(await cur.fetchall())


async def steps_of(conn: psycopg.AsyncConnection, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The step logs of ``run_ids``, each run's in journal order."""
    return await _rows(conn, _STEPS, run_ids)


async def sends_of(conn: psycopg.AsyncConnection, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The sends of ``run_ids``: where each went, what it moved, how it ended, its gas."""
    rows = await _rows(conn, _SENDS, run_ids)
    for row in rows:
        for name in ("value", "block_number", "gas_used", "effective_gas_price"):
            if row[name] is not None:
                row[name] = int(row[name])
    return rows


async def charges_of(conn: psycopg.AsyncConnection, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The budget reservations of ``run_ids``."""
    rows = await _rows(conn, _CHARGES, run_ids)
    for row in rows:
        row["amount"] = int(row["amount"])
    return rows


async def other_spend(
    conn: psycopg.AsyncConnection, since: datetime, replayed: Sequence[str]
) -> tuple[list[tuple[datetime, str, str, int]], list[tuple[datetime, str, str, int]]]:
    """The charges (``at, budget, asset, amount``) and gas (``at, network, relayer,
    cost``) recorded after ``since`` by every run not in ``replayed``."""
    params = {"since": since, "replayed": list(replayed)}
    with translated():
        cur = await conn.execute(_OTHER_CHARGES, params)
        charges = [(at, b, a, int(amount)) for at, b, a, amount in await cur.fetchall()]
        cur = await conn.execute(_OTHER_GAS, params)
        gas = [(at, n, r, int(cost)) for at, n, r, cost in await cur.fetchall()]
    return charges, gas


async def store(conn: psycopg.AsyncConnection, row: dict[str, Any]) -> int:
    """Keep one backtest's report; returns its id."""
    params = {**row, "report": Jsonb(row["report"])}
    with translated():
        cur = await conn.execute(_STORE, params)
        (found,) = await cur.fetchone()
        return found


async def recent(conn: psycopg.AsyncConnection, limit: int = 20) -> list[dict[str, Any]]:
    """The newest backtests, newest first, without their reports."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_RECENT, (limit,))
            return list(await cur.fetchall())


async def get(conn: psycopg.AsyncConnection, backtest_id: int) -> dict[str, Any] | None:
    """One backtest: its id, when it finished and its report (JSON)."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_GET, (backtest_id,))
            return await cur.fetchone()


async def _rows(
    conn: psycopg.AsyncConnection, query: str, run_ids: Sequence[str]
) -> list[dict[str, Any]]:
    if not run_ids:
        return []
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query, (list(run_ids),))
            return list(await cur.fetchall())
