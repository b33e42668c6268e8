"""Circuit breaker state in Postgres: each change is a read-modify-write under a row lock."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import psycopg

from rflow.breaker import Circuit
from rflow.storage.errors import translated

T = TypeVar("T")

_ENSURE = "INSERT INTO circuit_state (workflow, state) VALUES (%s, 'closed') ON CONFLICT DO NOTHING"
_LOCK = "SELECT state, failures, probe_run_id FROM circuit_state WHERE workflow = %s FOR UPDATE"
_WRITE = """
UPDATE circuit_state SET state = %s, failures = %s, probe_run_id = %s, updated_at = now()
WHERE workflow = %s
"""
_ALL = "SELECT workflow, state, failures, probe_run_id FROM circuit_state"
_CLOSE = """
UPDATE circuit_state SET state = 'closed', failures = '{}', probe_run_id = NULL, updated_at = now()
WHERE workflow = %s AND state <> 'closed'
"""


def _circuit(state: str, failures: list, probe: str | None) -> Circuit:
    return Circuit(state, tuple(failures), probe)  # type: ignore[arg-type]


async def change(
    conn: psycopg.AsyncConnection,
    workflow: str,
    step: Callable[[Circuit], tuple[Circuit, T]],
) -> tuple[Circuit, Circuit, T]:
    """Apply ``step`` to ``workflow``'s circuit atomically: (before, after, what step said)."""
    with translated():
        async with conn.transaction():
            await conn.execute(_ENSURE, (workflow,))
            cur = await conn.execute(_LOCK, (workflow,))
            before = _circuit(*await cur.fetchone())
            after, said = step(before)
            if after != before:
                await conn.execute(
                    _WRITE, (after.state, list(after.failures), after.probe, workflow)
                )
    return before, after, said


async def circuits(conn: psycopg.AsyncConnection) -> dict[str, Circuit]:
    """Every workflow's circuit."""
    with translated():
        cur = await conn.execute(_ALL)
        return {row[0]: _circuit(*row[1:]) for row in await cur.fetchall()}


async def close(conn: psycopg.AsyncConnection, workflow: str) -> bool:
    """Close ``workflow``'s circuit and forget its failures (an operator let its runs go
    again); False when it was closed already."""
    with translated():
        cur = await conn.execute(_CLOSE, (workflow,))
        return cur.rowcount > 0
