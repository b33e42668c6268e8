"""The read model of runs: what the CLI and the API show, projected from run journals."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from rflow.storage.columns import unique
from rflow.storage.errors import InvalidValue, storable, translated

if TYPE_CHECKING:
    from rflow.engine.effects import Journal, Settle

# Each statement takes a whole batch as one JSON document, an array of rows (each an
# array of its columns, read as r->>i for a value, r->i for a JSON column), so a batch
# is one statement per kind and one document to encode.
_ROWS = "FROM jsonb_array_elements(%s::jsonb) AS e(r)"

_RUN_PENDING = f"""
INSERT INTO runs (run_id, workflow, version, trigger_key, matrix, group_key, status, trigger,
                  created_at, updated_at, source, pending_reason, waiting_for)
SELECT r->>0, r->>1, r->>2, r->>3, r->4, r->>5, 'pending', r->6,
       (r->>7)::timestamptz, (r->>8)::timestamptz, r->>9, r->>10, r->>11
{_ROWS}
ON CONFLICT (run_id) DO UPDATE SET
    pending_reason = EXCLUDED.pending_reason, waiting_for = EXCLUDED.waiting_for,
    updated_at = EXCLUDED.updated_at
WHERE runs.status = 'pending'
"""

# A pending row becomes the started run; a row that is past pending is left alone (a
# replayed start changes nothing).
_RUN_STARTED = f"""
INSERT INTO runs (run_id, workflow, version, trigger_key, matrix, group_key, status, trigger,
                  created_at, updated_at, source, started_at, retry_of, parent_run_id,
                  parent_step)
SELECT r->>0, r->>1, r->>2, r->>3, r->4, r->>5, 'running', r->6,
       (r->>7)::timestamptz, (r->>8)::timestamptz, r->>9, (r->>7)::timestamptz, r->>10,
       r->>11, r->>12
{_ROWS}
ON CONFLICT (run_id) DO UPDATE SET
    status = 'running', version = EXCLUDED.version, started_at = EXCLUDED.started_at,
    updated_at = EXCLUDED.updated_at, retry_of = EXCLUDED.retry_of,
    parent_run_id = EXCLUDED.parent_run_id, parent_step = EXCLUDED.parent_step,
    source = COALESCE(runs.source, EXCLUDED.source), pending_reason = NULL,
    waiting_for = NULL
WHERE runs.status = 'pending'
"""

_RUN_STATUS = f"""
UPDATE runs SET status = x.status, waiting_for = x.waiting_for, updated_at = x.updated_at
FROM (SELECT r->>0 AS status, r->>1 AS waiting_for, (r->>2)::timestamptz AS updated_at,
             r->>3 AS run_id {_ROWS}) AS x
WHERE runs.run_id = x.run_id AND runs.settled_at IS NULL AND runs.status IN ('running', 'waiting')
"""

_RUN_SETTLED = f"""
UPDATE runs SET status = x.status, error_kind = x.error_kind, error_message = x.error_message,
                settled_at = x.settled_at, updated_at = x.updated_at, waiting_for = NULL,
                pending_reason = NULL
FROM (SELECT r->>0 AS status, r->>1 AS error_kind, r->>2 AS error_message,
             (r->>3)::timestamptz AS settled_at, (r->>4)::timestamptz AS updated_at,
             r->>5 AS run_id {_ROWS}) AS x
WHERE runs.run_id = x.run_id
"""

_FINAL = f"""
UPDATE runs SET final_state = x.final_state
FROM (SELECT r->0 AS final_state, r->>1 AS run_id {_ROWS}) AS x
WHERE runs.run_id = x.run_id
"""

_STEP_STARTED = f"""
INSERT INTO step_logs (run_id, path, visit, kind, status, attempt, started_at, seq, parent,
                       role, detail)
SELECT r->>0, r->>1, (r->>2)::integer, r->>3, coalesce(r->>9, 'running'), 1,
       (r->>4)::timestamptz, (r->>5)::bigint, r->>6, r->>7, r->8
{_ROWS}
ON CONFLICT (run_id, path, visit) DO NOTHING
"""

_STEP_RETRYING = f"""
UPDATE step_logs SET status = 'retrying', attempt = x.attempt, error_kind = x.error_kind,
                     error_message = x.error_message
FROM (SELECT (r->>0)::integer AS attempt, r->>1 AS error_kind, r->>2 AS error_message,
             r->>3 AS run_id, r->>4 AS path, (r->>5)::integer AS visit {_ROWS}) AS x
WHERE step_logs.run_id = x.run_id AND step_logs.path = x.path AND step_logs.visit = x.visit
  AND step_logs.settled_at IS NULL
"""

_STEP_SETTLED = f"""
INSERT INTO step_logs (run_id, path, visit, status, attempt, input, output, error_kind, error_message,
                       started_at, settled_at, seq, parent, role, detail)
SELECT r->>0, r->>1, (r->>2)::integer, r->>3, (r->>4)::integer, r->5, r->6, r->>7, r->>8,
       (r->>9)::timestamptz, (r->>10)::timestamptz, (r->>11)::bigint, r->>12, r->>13,
       NULLIF(r->14, 'null'::jsonb)
{_ROWS}
ON CONFLICT (run_id, path, visit) DO UPDATE SET
    status = EXCLUDED.status, attempt = EXCLUDED.attempt, input = EXCLUDED.input,
    output = EXCLUDED.output, error_kind = EXCLUDED.error_kind,
    error_message = EXCLUDED.error_message, settled_at = EXCLUDED.settled_at,
    parent = COALESCE(EXCLUDED.parent, step_logs.parent),
    role = COALESCE(EXCLUDED.role, step_logs.role),
    detail = COALESCE(EXCLUDED.detail, step_logs.detail)
"""

_DEAD = f"""
INSERT INTO dead_runs (run_id, workflow, error_kind, error_message, journal, dead_at)
SELECT r->>0, r->>1, r->>2, r->>3, r->4, (r->>5)::timestamptz
{_ROWS}
ON CONFLICT (run_id) DO NOTHING
"""

_LIST = """
SELECT run_id, workflow, version, status, error_kind, error_message, trigger_key, group_key,
       created_at, updated_at, started_at, settled_at, pending_reason, waiting_for, retry_of,
       retried_as, source, parent_run_id, parent_step
FROM runs
WHERE (%(workflow)s::text IS NULL OR workflow = %(workflow)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(source)s::text IS NULL OR source = %(source)s)
  AND (NOT %(dead)s OR EXISTS (SELECT 1 FROM dead_runs d WHERE d.run_id = runs.run_id))
  AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s)
ORDER BY created_at DESC
LIMIT %(limit)s
"""

_GET = """
SELECT run_id, workflow, version, trigger_key, matrix, group_key, status, error_kind,
       error_message, trigger, created_at, updated_at, started_at, settled_at, pending_reason,
       waiting_for, retry_of, retried_as, retried_by, source, parent_run_id, parent_step
FROM runs WHERE run_id = %s
"""
_CHILDREN = """
SELECT run_id, workflow, status, parent_step, created_at, settled_at FROM runs
WHERE parent_run_id = %s ORDER BY created_at, run_id
"""
_FINAL_STATE = """
SELECT COALESCE(d.journal, r.final_state) FROM runs r LEFT JOIN dead_runs d USING (run_id)
WHERE r.run_id = %s
"""
_STEPS = "SELECT * FROM step_logs WHERE run_id = %s ORDER BY seq, path, visit"
_SIBLINGS = """
SELECT run_id, matrix, status, retry_of, count(*) OVER () AS total FROM runs
WHERE workflow = %(workflow)s AND trigger_key = %(trigger_key)s AND matrix IS NOT NULL
ORDER BY created_at, run_id
LIMIT %(limit)s
"""
_GET_DEAD = "SELECT * FROM dead_runs WHERE run_id = %s"
_MARK_RETRIED = """
WITH dead AS (
    UPDATE dead_runs SET retried_as = COALESCE(retried_as, %(new)s),
                         retried_by = CASE WHEN retried_as IS NULL THEN %(by)s ELSE retried_by END
    WHERE run_id = %(run)s
)
UPDATE runs SET retried_as = COALESCE(retried_as, %(new)s),
                retried_by = CASE WHEN retried_as IS NULL THEN %(by)s ELSE retried_by END
WHERE run_id = %(run)s
RETURNING retried_as
"""
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
    """Apply journal entries in one transaction; returns how many were applied.

    Statements are batched by kind, in the order that keeps every row's final value
    right whatever the interleaving in the batch: runs started, steps started, retried,
    settled, runs settled, dead letters. Every statement is idempotent, so a batch
    replayed after a crash changes nothing; step order comes from the journal's ``seq``.
    """
    from rflow.engine.effects import Settle  # the readers of runs need none of the engine

    batches: dict[str, list[tuple[Any, ...]]] = {name: [] for name in _ORDER}
    count = 0
    for entry in entries:
        count += 1
        if isinstance(entry, Settle):
            if entry.on_failure == "dead_letter":
                kind = entry.error.kind if entry.error else None
                message = entry.error.message if entry.error else None
                dead_at = entry.journal.get("updated_at")
                batches["dead"].append(
                    (entry.run_id, entry.workflow, kind, message, entry.journal, dead_at)
                )
            elif entry.journal:
                batches["final"].append((entry.journal, entry.run_id))
            continue
        row = _row(entry)
        if row is not None:
            batches[entry.event].append(row)
    try:
        await _apply(conn, batches)
    except InvalidValue:
        # A value Postgres cannot hold (a NUL in text or in JSON, from a trigger's input
        # or an answer): the entries are stored with each NUL shown as U+FFFD.
        await _apply(
            conn, {name: [storable(row) for row in rows] for name, rows in batches.items()}
        )
    return count


async def _apply(conn: psycopg.AsyncConnection, batches: dict[str, list[tuple[Any, ...]]]) -> None:
    with translated():
        async with conn.transaction(), conn.cursor() as cur:
            for name in _ORDER:
                if batches[name]:
                    await cur.execute(_STATEMENTS[name], _rows(name, batches[name]))


def _rows(name: str, rows: list[tuple[Any, ...]]) -> list[Jsonb]:
    """The rows of one kind as the statement's one parameter (a JSON array of rows), those
    of a kind that updates taken once per key."""
    kept = unique(rows, unique_by=_UPDATE_KEYS.get(name), merge=_MERGE.get(name))
    return [Jsonb(kept)]  # encoded by the connection's codec (orjson, see db.py)


def _row(entry: Journal) -> tuple[Any, ...] | None:
    data = entry.data
    visit, seq = data.get("visit", 1), data.get("seq", 0)
    if entry.event in ("run_pending", "run_started"):
        common = (
            entry.run_id,
            entry.workflow,
            data.get("version", ""),
            data.get("trigger_key", ""),
            data.get("matrix"),
            data.get("group"),
            data.get("trigger"),
            entry.at,
            entry.at,
            data.get("source"),
        )
        if entry.event == "run_pending":
            return (*common, data.get("reason"), data.get("waiting_for"))
        parent = data.get("parent") or {}
        return (*common, data.get("retry_of"), parent.get("run_id"), parent.get("path"))
    if entry.event == "run_status":
        return (entry.status, data.get("waiting_for"), entry.at, entry.run_id)
    if entry.event == "run_settled":
        kind, message = _error(data)
        return (entry.status, kind, message, entry.at, entry.at, entry.run_id)
    if entry.event == "step_started":
        return (
            entry.run_id,
            entry.path,
            visit,
            data.get("kind"),
            entry.at,
            seq,
            data.get("parent"),
            data.get("role"),
            data.get("detail"),
            entry.status,
        )
    if entry.event == "step_retrying":
        kind, message = _error(data)
        return (data.get("attempt", 1), kind, message, entry.run_id, entry.path, visit)
    if entry.event == "step_settled":
        kind, message = _error(data)
        # A step a retried run keeps from the run it retries keeps that run's timings.
        started, settled = data.get("started_at"), data.get("settled_at")
        return (
            entry.run_id,
            entry.path,
            visit,
            entry.status,
            data.get("attempt", 1),
            data.get("input"),
            data.get("output"),
            kind,
            message,
            datetime.fromisoformat(started) if started else entry.at,
            datetime.fromisoformat(settled) if settled else entry.at,
            seq,
            data.get("parent"),
            data.get("role"),
            data.get("detail"),
        )
    return None


_UPDATE_KEYS = {
    "run_pending": lambda row: row[0],
    "run_started": lambda row: row[0],
    "run_status": lambda row: row[3],
    "final": lambda row: row[1],
    "run_settled": lambda row: row[5],
    "step_retrying": lambda row: row[3:6],
    "step_settled": lambda row: row[0:3],
}
_MERGE = {
    # A run's row is created by its first entry: a later pending entry changes why it
    # waits, not when it was admitted; a repeated start changes nothing.
    "run_pending": lambda earlier, later: (*later[:7], earlier[7], *later[8:]),  # created_at
    "run_started": lambda earlier, later: earlier,
}
_ORDER = (
    "run_pending",
    "run_started",
    "run_status",
    "step_started",
    "step_retrying",
    "step_settled",
    "run_settled",
    "final",
    "dead",
)
_STATEMENTS = {
    "run_pending": _RUN_PENDING,
    "run_started": _RUN_STARTED,
    "run_status": _RUN_STATUS,
    "final": _FINAL,
    "step_started": _STEP_STARTED,
    "step_retrying": _STEP_RETRYING,
    "step_settled": _STEP_SETTLED,
    "run_settled": _RUN_SETTLED,
    "dead": _DEAD,
}


_BACKLOG = """
SELECT workflow, status, COALESCE(pending_reason, ''), count(*) FROM runs
WHERE status IN ('pending', 'waiting') GROUP BY 1, 2, 3
"""


async def backlog(conn: psycopg.AsyncConnection) -> list[tuple[str, str, str, int]]:
    """(workflow, status, pending reason or '', count) of the runs not started yet
    (pending) or parked (waiting)."""
    with translated():
        cur = await conn.execute(_BACKLOG)
        return list(await cur.fetchall())


async def list_runs(
    conn: psycopg.AsyncConnection,
    *,
    workflow: str | None = None,
    status: str | None = None,
    source: str | None = None,
    dead: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """The newest runs, optionally of one workflow, status or trigger source, admitted
    at or after ``since`` and before ``until``; ``dead`` keeps the dead-lettered ones
    (the DLQ: not the failed runs of ``on_failure: drop`` or ``halt``)."""
    params = {
        "workflow": workflow,
        "status": status,
        "source": source,
        "dead": dead,
        "since": since,
        "until": until,
        "limit": limit,
    }
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_LIST, params)
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
            await cur.execute(_CHILDREN, (run_id,))
            run["children"] = list(await cur.fetchall())
            return run


async def matrix_runs(
    conn: psycopg.AsyncConnection, run: dict[str, Any], limit: int = 1000
) -> tuple[list[dict[str, Any]], int]:
    """The runs of ``run``'s firing, one per matrix combination, and their retries (they
    keep its trigger key), in the order they were admitted: the first ``limit`` of them,
    ``run`` always among them, and how many there are. None for a run without a matrix."""
    if run.get("matrix") is None:
        return [], 0
    params = {"workflow": run["workflow"], "trigger_key": run["trigger_key"], "limit": limit}
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_SIBLINGS, params)
            found = list(await cur.fetchall())
    total = found[0]["total"] if found else 0
    if not any(row["run_id"] == run["run_id"] for row in found):
        found.append({k: run[k] for k in ("run_id", "matrix", "status", "retry_of")})
        total = max(total, len(found))
    return found, total


async def mark_retried(
    conn: psycopg.AsyncConnection, run_id: str, new_run_id: str, *, by: str | None = None
) -> str | None:
    """Link failed ``run_id`` (and its dead letter) to the run retrying it, and to ``by``,
    the principal who asked; the first link stays, and is returned."""
    with translated():
        cur = await conn.execute(_MARK_RETRIED, {"new": new_run_id, "run": run_id, "by": by})
        row = await cur.fetchone()
        return row[0] if row else None


async def final_state(conn: psycopg.AsyncConnection, run_id: str) -> dict[str, Any] | None:
    """The final state of failed run ``run_id`` (from its dead letter, else its row)."""
    with translated():
        cur = await conn.execute(_FINAL_STATE, (run_id,))
        row = await cur.fetchone()
        return row[0] if row else None


async def purge(conn: psycopg.AsyncConnection, workflow: str, before: datetime) -> int:
    """Delete settled runs of ``workflow`` created before ``before`` (retention)."""
    with translated():
        async with conn.transaction():
            cur = await conn.execute(_PURGED, (workflow, before))
            (count,) = await cur.fetchone()
            await conn.execute(_PURGE, (workflow, before))
        return count


_DEAD_RUNS = """
SELECT run_id, workflow, error_kind, error_message, dead_at, retried_as FROM dead_runs
ORDER BY dead_at DESC, run_id
LIMIT %s
"""


async def dead_runs(conn: psycopg.AsyncConnection, limit: int = 50) -> list[dict[str, Any]]:
    """The newest dead-lettered runs: why each failed, and the run retrying it if any."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_DEAD_RUNS, (limit,))
            return list(await cur.fetchall())
