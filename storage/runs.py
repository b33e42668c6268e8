"""The read model of runs: what the CLI and the API show, projected from run journals."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from rflow.engine.effects import Journal, Settle
from rflow.storage.errors import translated

_RUN_STARTED = """
INSERT INTO runs (run_id, workflow, version, trigger_key, matrix, group_key, status, trigger, created_at, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, 'running', %s, %s, %s)
ON CONFLICT (run_id) DO NOTHING
"""

_RUN_SETTLED = """
UPDATE runs SET status = %s, error_kind = %s, error_message = %s, settled_at = %s, updated_at = %s
WHERE run_id = %s
"""

_STEP_STARTED = """
INSERT INTO step_logs (run_id, path, visit, kind, status, attempt, started_at)
VALUES (%s, %s, %s, %s, 'running', 1, %s)
ON CONFLICT (run_id, path, visit) DO NOTHING
"""

_STEP_RETRYING = """
UPDATE step_logs SET status = 'retrying', attempt = %s, error_kind = %s, error_message = %s
WHERE run_id = %s AND path = %s AND visit = %s AND settled_at IS NULL
"""

_STEP_SETTLED = """
INSERT INTO step_logs (run_id, path, visit, status, attempt, input, output, error_kind, error_message, started_at, settled_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (run_id, path, visit) DO UPDATE SET
    status = EXCLUDED.status, attempt = EXCLUDED.attempt, input = EXCLUDED.input,
    output = EXCLUDED.output, error_kind = EXCLUDED.error_kind,
    error_message = EXCLUDED.error_message, settled_at = EXCLUDED.settled_at
"""

_DEAD = """
INSERT INTO dead_runs (run_id, workflow, error_kind, error_message, journal, dead_at)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (run_id) DO NOTHING
"""

_LIST = """
SELECT run_id, workflow, version, status, error_kind, error_message, trigger_key, group_key,
       created_at, updated_at, settled_at
FROM runs
WHERE (%(workflow)s::text IS NULL OR workflow = %(workflow)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY created_at DESC
LIMIT %(limit)s
"""

_GET = "SELECT * FROM runs WHERE run_id = %s"
_STEPS = "SELECT * FROM step_logs WHERE run_id = %s ORDER BY seq"
_GET_DEAD = "SELECT * FROM dead_runs WHERE run_id = %s"
_PURGE = """
WITH gone AS (
    DELETE FROM runs WHERE workflow = %s AND created_at < %s AND settled_at IS NOT NULL
    RETURNING run_id
)
DELETE FROM step_logs WHERE run_id IN (SELECT run_id FROM gone)
"""
_PURGED = (
    "SELECT count(*) FROM runs WHERE workflow = %s AND created_at < %s AND settled_at IS NOT NULL"
)


def _error(data: dict[str, Any]) -> tuple[str | None, str | None]:
    error = data.get("error") or {}
    return error.get("kind"), error.get("message")


async def project(conn: psycopg.AsyncConnection, entries: Iterable[Journal | Settle]) -> int:
    """Apply journal entries in order, in one transaction; returns how many were applied.

    Every statement is idempotent, so a batch replayed after a crash changes nothing.
    """
    count = 0
    with translated():
        async with conn.transaction(), conn.pipeline():
            for entry in entries:
                count += 1
                if isinstance(entry, Settle):
                    if entry.on_failure == "dead_letter":
                        kind = entry.error.kind if entry.error else None
                        message = entry.error.message if entry.error else None
                        dead_at = entry.journal.get("updated_at")
                        await conn.execute(
                            _DEAD,
                            (
                                entry.run_id,
                                entry.workflow,
                                kind,
                                message,
                                Jsonb(entry.journal),
                                dead_at,
                            ),
                        )
                    continue
                await _apply(conn, entry)
    return count


async def _apply(conn: psycopg.AsyncConnection, entry: Journal) -> None:
    data = entry.data
    if entry.event == "run_started":
        await conn.execute(
            _RUN_STARTED,
            (
                entry.run_id,
                entry.workflow,
                data.get("version", ""),
                data.get("trigger_key", ""),
                Jsonb(data.get("matrix")),
                data.get("group"),
                Jsonb(data.get("trigger")),
                entry.at,
                entry.at,
            ),
        )
    elif entry.event == "run_settled":
        kind, message = _error(data)
        await conn.execute(
            _RUN_SETTLED, (entry.status, kind, message, entry.at, entry.at, entry.run_id)
        )
    elif entry.event == "step_started":
        await conn.execute(
            _STEP_STARTED,
            (entry.run_id, entry.path, data.get("visit", 1), data.get("kind"), entry.at),
        )
    elif entry.event == "step_retrying":
        kind, message = _error(data)
        await conn.execute(
            _STEP_RETRYING,
            (data.get("attempt", 1), kind, message, entry.run_id, entry.path, data.get("visit", 1)),
        )
    elif entry.event == "step_settled":
        kind, message = _error(data)
        await conn.execute(
            _STEP_SETTLED,
            (
                entry.run_id,
                entry.path,
                data.get("visit", 1),
                entry.status,
                data.get("attempt", 1),
                Jsonb(data.get("input")),
                Jsonb(data.get("output")),
                kind,
                message,
                entry.at,
                entry.at,
            ),
        )


async def list_runs(
    conn: psycopg.AsyncConnection,
    *,
    workflow: str | None = None,
    status: str | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """The newest runs, optionally of one workflow or status."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_LIST, {"workflow": workflow, "status": status, "limit": limit})
            return list(await cur.fetchall())


async def get_run(conn: psycopg.AsyncConnection, run_id: str) -> dict[str, Any] | None:
    """One run with its step logs (``steps``) and, when dead-lettered, its journal (``dead``)."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_GET, (run_id,))
            run = await cur.fetchone()
            if run is None:
                return None
            await cur.execute(_STEPS, (run_id,))
            run["steps"] = list(await cur.fetchall())
            await cur.execute(_GET_DEAD, (run_id,))
            run["dead"] = await cur.fetchone()
            return run


async def purge(conn: psycopg.AsyncConnection, workflow: str, before: datetime) -> int:
    """Delete settled runs of ``workflow`` created before ``before`` (retention)."""
    with translated():
        async with conn.transaction():
            cur = await conn.execute(_PURGED, (workflow, before))
            (count,) = await cur.fetchone()
            await conn.execute(_PURGE, (workflow, before))
        return count
