"""Parked waits: one row per waiting step, resolved exactly once."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from rflow.storage.errors import translated

_PARK = """
INSERT INTO waits (wait_id, run_id, workflow, path, partition_key, kind, spec, timeout_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (wait_id) DO NOTHING
"""

# One resolver wins: the row is answered only while it has no answer.
_RESOLVE = """
UPDATE waits SET resolved_at = %s, resolution = %s
WHERE wait_id = %s AND resolved_at IS NULL
RETURNING wait_id, run_id, workflow, path, partition_key
"""

_FIND = """
SELECT wait_id, run_id, workflow, path, partition_key, kind, spec, timeout_at, created_at,
       resolved_at, resolution
FROM waits
WHERE run_id = %s AND (%s::text IS NULL OR path = %s) AND resolved_at IS NULL
ORDER BY created_at
"""

_RESOLVED = """
SELECT wait_id, run_id, path, partition_key, resolution
FROM waits WHERE resolved_at IS NOT NULL AND resolved_at < %s
ORDER BY resolved_at LIMIT %s
"""

_DELETE = "DELETE FROM waits WHERE wait_id = %s"


async def park(
    conn: psycopg.AsyncConnection,
    *,
    wait_id: str,
    run_id: str,
    workflow: str,
    path: str,
    partition_key: str,
    kind: str,
    spec: Any,
    timeout_at: datetime | None,
) -> None:
    """Store a wait once (idempotent by its id)."""
    with translated():
        await conn.execute(
            _PARK, (wait_id, run_id, workflow, path, partition_key, kind, Jsonb(spec), timeout_at)
        )


async def resolve(
    conn: psycopg.AsyncConnection, wait_id: str, resolution: Any, at: datetime
) -> dict[str, Any] | None:
    """Answer a wait; ``None`` when it is gone or already answered (the first answer wins)."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_RESOLVE, (at, Jsonb(resolution), wait_id))
            return await cur.fetchone()


async def open_waits(
    conn: psycopg.AsyncConnection, run_id: str, path: str | None = None
) -> list[dict[str, Any]]:
    """The unanswered waits of a run (of one step when ``path`` is given)."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_FIND, (run_id, path, path))
            return list(await cur.fetchall())


async def answered_before(
    conn: psycopg.AsyncConnection, before: datetime, limit: int = 100
) -> list[dict[str, Any]]:
    """Waits answered before ``before`` whose run has not taken the answer yet."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_RESOLVED, (before, limit))
            return list(await cur.fetchall())


async def delete(conn: psycopg.AsyncConnection, wait_id: str) -> None:
    """The run has taken the answer (or the wait timed out): forget the wait."""
    with translated():
        await conn.execute(_DELETE, (wait_id,))


_WEBHOOK_WAITS = """
SELECT wait_id, run_id, workflow, path, partition_key, spec
FROM waits
WHERE kind = 'webhook' AND resolved_at IS NULL AND spec -> 'webhook' ->> 'path' = %s
ORDER BY created_at
"""


async def webhook_waits(conn: psycopg.AsyncConnection, url_path: str) -> list[dict[str, Any]]:
    """The unanswered waits for a webhook request at ``url_path``."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_WEBHOOK_WAITS, (url_path,))
            return list(await cur.fetchall())


_EVENT_WAITS = """
SELECT wait_id, run_id, workflow, path, partition_key, spec
FROM waits
WHERE kind = 'event' AND resolved_at IS NULL AND workflow = %s
  AND (path = %s OR starts_with(path, %s))
ORDER BY created_at
"""


async def event_waits(
    conn: psycopg.AsyncConnection, workflow: str, step: str
) -> list[dict[str, Any]]:
    """The unanswered waits of ``workflow``'s ``wait_for: { event }`` step ``step``
    (its foreach iterations included)."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_EVENT_WAITS, (workflow, step, f"{step}["))
            return list(await cur.fetchall())
