"""Parked waits: one row per waiting step, resolved exactly once."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from rflow.storage.errors import translated

# Registering a wait again changes nothing, but an escalation's later deadline: a
# deadline only ever moves later, so registrations arriving out of order agree.
_PARK = """
INSERT INTO waits (wait_id, run_id, workflow, path, partition_key, kind, spec, timeout_at,
                   escalated_at, token_hash)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (wait_id) DO UPDATE SET
    timeout_at = CASE WHEN EXCLUDED.escalated_at IS NOT NULL
                      THEN GREATEST(waits.timeout_at, EXCLUDED.timeout_at)
                      ELSE waits.timeout_at END,
    escalated_at = COALESCE(waits.escalated_at, EXCLUDED.escalated_at),
    token_hash = COALESCE(waits.token_hash, EXCLUDED.token_hash)
WHERE waits.resolved_at IS NULL
  AND (EXCLUDED.escalated_at IS NOT NULL
       OR (waits.token_hash IS NULL AND EXCLUDED.token_hash IS NOT NULL))
"""

# One resolver wins: the row is answered only while it has no answer.
_RESOLVE = """
UPDATE waits SET resolved_at = %s, resolution = %s
WHERE wait_id = %s AND resolved_at IS NULL
RETURNING wait_id, run_id, workflow, path, partition_key
"""

_FIND = """
SELECT wait_id, run_id, workflow, path, partition_key, kind, spec, timeout_at, created_at,
       resolved_at, resolution, escalated_at
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
    escalated_at: datetime | None = None,
    token_hash: bytes | None = None,
) -> None:
    """Store a wait once (idempotent by its id); ``escalated_at`` moves an open wait's
    deadline to ``timeout_at`` when that is later. ``token_hash`` (a webhook wait's) is
    kept once given (a wait parked before waits had tokens takes one when re-parked)."""
    with translated():
        await conn.execute(
            _PARK,
            (
                wait_id,
                run_id,
                workflow,
                path,
                partition_key,
                kind,
                Jsonb(spec),
                timeout_at,
                escalated_at,
                token_hash,
            ),
        )


async def resolve(
    conn: psycopg.AsyncConnection, wait_id: str, resolution: Any, at: datetime
) -> dict[str, Any] | None:
    """Answer a wait; ``None`` when it is gone or already answered (the first answer wins)."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_RESOLVE, (at, Jsonb(resolution), wait_id))
            return await cur.fetchone()


async def resolve_many(
    conn: psycopg.AsyncConnection, answers: list[tuple[str, Any]], at: datetime
) -> list[dict[str, Any]]:
    """Answer each wait of ``answers`` (``(wait_id, resolution)``) that has no answer yet,
    in one transaction; the rows answered now."""
    found = []
    with translated():
        async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            for wait_id, resolution in answers:
                await cur.execute(_RESOLVE, (at, Jsonb(resolution), wait_id))
                row = await cur.fetchone()
                if row is not None:
                    found.append({**row, "resolution": resolution})
    return found


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


_SIGNAL_WAITS = """
SELECT wait_id, run_id, workflow, path, partition_key, spec, created_at
FROM waits
WHERE kind = 'signal' AND resolved_at IS NULL AND run_id = %s
  AND spec -> 'signal' ->> 'name' = %s
ORDER BY created_at, path
"""


async def signal_waits(
    conn: psycopg.AsyncConnection, run_id: str, name: str
) -> list[dict[str, Any]]:
    """The unanswered waits of run ``run_id`` for signal ``name``, oldest first."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_SIGNAL_WAITS, (run_id, name))
            return list(await cur.fetchall())


_WEBHOOK_WAITS = """
SELECT wait_id, run_id, workflow, path, partition_key, spec
FROM waits
WHERE kind = 'webhook' AND resolved_at IS NULL AND spec -> 'webhook' ->> 'path' = %s
ORDER BY created_at
"""


async def webhook_waits(conn: psycopg.AsyncConnection, url_path: str) -> list[dict[str, Any]]:
    """The unanswered waits whose webhook path is ``url_path`` (without a token)."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_WEBHOOK_WAITS, (url_path,))
            return list(await cur.fetchall())


_WEBHOOK_WAIT_BY_TOKEN = """
SELECT wait_id, run_id, workflow, path, partition_key, spec
FROM waits
WHERE kind = 'webhook' AND resolved_at IS NULL AND token_hash = %s
"""


async def webhook_wait_by_token(
    conn: psycopg.AsyncConnection, token_hash: bytes
) -> dict[str, Any] | None:
    """The unanswered webhook wait whose token hashes to ``token_hash``."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_WEBHOOK_WAIT_BY_TOKEN, (token_hash,))
            return await cur.fetchone()


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


# The inbox: most urgent first, then the nearest deadline, then the longest waiting.
_PENDING_APPROVALS = """
SELECT wait_id, run_id, workflow, path, spec, timeout_at, created_at, escalated_at
FROM waits
WHERE kind = 'approval' AND resolved_at IS NULL
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s)
  AND (%(run_id)s::text IS NULL OR run_id = %(run_id)s)
  AND (%(approver)s::text IS NULL
       OR jsonb_array_length(COALESCE(spec -> 'approval' -> 'approvers', '[]')) = 0
       OR spec -> 'approval' -> 'approvers' ? %(approver)s)
ORDER BY CASE spec -> 'approval' ->> 'priority'
             WHEN 'urgent' THEN 0 WHEN 'high' THEN 1 WHEN 'normal' THEN 2 WHEN 'low' THEN 3
             ELSE 2 END,
         timeout_at NULLS LAST, created_at, run_id, path
LIMIT %(limit)s
"""


async def pending_approvals(
    conn: psycopg.AsyncConnection,
    *,
    workflow: str | None = None,
    run_id: str | None = None,
    approver: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """Unanswered approvals (of one workflow, one run, or that ``approver`` may answer),
    ordered by priority (urgent, high, normal, low), then deadline, then age."""
    params = {"workflow": workflow, "run_id": run_id, "approver": approver, "limit": limit}
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_PENDING_APPROVALS, params)
            return list(await cur.fetchall())


_PENDING_COUNTS = """
SELECT workflow, COALESCE(spec -> 'approval' ->> 'priority', 'normal'), count(*)
FROM waits WHERE kind = 'approval' AND resolved_at IS NULL
GROUP BY 1, 2
"""


async def pending_approval_counts(conn: psycopg.AsyncConnection) -> dict[tuple[str, str], int]:
    """How many approvals wait, by workflow and priority."""
    with translated():
        cur = await conn.execute(_PENDING_COUNTS)
        return {(workflow, priority): count for workflow, priority, count in await cur.fetchall()}
