"""Workflow controls: pauses by an operator, by `on_failure: halt`, or by a circuit breaker."""

from __future__ import annotations

import psycopg

from rflow.storage import circuits
from rflow.storage.errors import translated

_PAUSE = """
INSERT INTO workflow_controls (workflow, paused, paused_by, reason, updated_at)
VALUES (%s, true, %s, %s, now())
ON CONFLICT (workflow) DO UPDATE SET paused = true, paused_by = EXCLUDED.paused_by,
    reason = EXCLUDED.reason, updated_at = now()
"""
_RESUME = "UPDATE workflow_controls SET paused = false, paused_by = NULL, reason = NULL, updated_at = now() WHERE workflow = %s"
_RESUME_BY = """
UPDATE workflow_controls SET paused = false, paused_by = NULL, reason = NULL, updated_at = now()
WHERE workflow = %s AND paused AND paused_by = %s
"""
_PAUSED = "SELECT workflow, paused_by, reason FROM workflow_controls WHERE paused"


async def pause(conn: psycopg.AsyncConnection, workflow: str, *, by: str, reason: str) -> None:
    """Pause ``workflow``: it starts no runs until resumed."""
    with translated():
        await conn.execute(_PAUSE, (workflow, by, reason))


async def resume(conn: psycopg.AsyncConnection, workflow: str) -> bool:
    """An operator lifts any pause of ``workflow``; False when it was not paused.

    Its circuit breaker closes in the same transaction: the runs it admits from now on
    are not a half-open circuit's probe, and ``circuit_state`` (and the metric read
    from it) must not say open while they run.
    """
    with translated():
        async with conn.transaction():
            cur = await conn.execute(_RESUME + " AND paused", (workflow,))
            if cur.rowcount == 0:
                return False
            await circuits.close(conn, workflow)
            return True


async def resume_paused_by(conn: psycopg.AsyncConnection, workflow: str, by: str) -> bool:
    """Lift ``workflow``'s pause only if ``by`` placed it (another's pause survives)."""
    with translated():
        cur = await conn.execute(_RESUME_BY, (workflow, by))
        return cur.rowcount > 0


async def paused(conn: psycopg.AsyncConnection) -> dict[str, tuple[str, str]]:
    """Paused workflows: name -> (who paused it, why)."""
    with translated():
        cur = await conn.execute(_PAUSED)
        return {workflow: (by, reason) for workflow, by, reason in await cur.fetchall()}
