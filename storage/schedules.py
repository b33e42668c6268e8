"""Schedules: how far each schedule has been fired, which ones operators disabled, and
how their runs went.

A cursor is the instant up to which one schedule (a workflow's schedule trigger, by its
id) has been handled; the policy that moves it lives in :mod:`rflow.ingress.schedule`.
Here the cursor only ever moves forward (:func:`advance` refuses to go back), and
:func:`held` serialises the schedulers of all workers on one schedule: the one holding
the row decides and produces the fire while the others wait, then find the cursor
already past it.

A changed cron or time zone keeps the cursor: the new definition's fire times after it
are due as usual, so a redeploy neither replays the past nor skips a fire, and workers
still running the old definition during a rolling deploy cannot move it backwards.

An operator's :func:`disable` and :func:`enable` take the cursor's row lock too, so no
fire is produced after ``disable`` returns, and ``enable`` moves the cursor to the
instant it was asked at: the fire times skipped while disabled never fire.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.rows import class_row, dict_row

from rflow.storage.errors import translated


@dataclass(frozen=True)
class ScheduleCursor:
    """One row of ``schedule_cursors``."""

    workflow: str
    trigger: str
    """The schedule trigger's id within its workflow."""
    cron: str
    """The definition that last moved the cursor."""
    timezone: str
    last_fire: datetime
    """Every fire time at or before this instant has been handled (fired or passed over)."""
    firing: bool
    """Whether the schedule was firing (enabled) when the cursor last moved."""
    last_fired: datetime | None
    """The latest fire time produced."""
    updated_at: datetime


@dataclass(frozen=True)
class Held:
    """What the scheduler holding a schedule's row reads."""

    cursor: datetime | None
    """``last_fire``, or ``None`` before the schedule's first tick."""
    firing: bool
    """Whether it was firing when the cursor last moved (``True`` before the first tick)."""
    disabled_by: str | None
    """Who disabled it (``None``: no operator did)."""


@dataclass(frozen=True)
class Disabled:
    """One row of ``schedule_controls``: an operator's disable."""

    workflow: str
    trigger: str
    disabled_by: str
    reason: str | None
    disabled_at: datetime


_COLUMNS = "workflow, trigger, cron, timezone, last_fire, firing, last_fired, updated_at"
_KEY = "workflow = %(workflow)s AND trigger = %(trigger)s"

_GET = f"SELECT {_COLUMNS} FROM schedule_cursors WHERE {_KEY}"

_LOCK = f"SELECT last_fire, firing FROM schedule_cursors WHERE {_KEY} FOR UPDATE"

_CONTROL = f"SELECT disabled_by FROM schedule_controls WHERE {_KEY}"

_ALL = f"SELECT {_COLUMNS} FROM schedule_cursors ORDER BY workflow, trigger"

_START = """
INSERT INTO schedule_cursors (workflow, trigger, cron, timezone, last_fire, firing)
VALUES (%(workflow)s, %(trigger)s, %(cron)s, %(timezone)s, %(at)s, %(firing)s)
ON CONFLICT (workflow, trigger) DO NOTHING
"""

_ADVANCE = f"""
UPDATE schedule_cursors
SET last_fire = GREATEST(last_fire, %(at)s), cron = %(cron)s, timezone = %(timezone)s,
    firing = %(firing)s,
    last_fired = CASE WHEN %(fired)s THEN %(at)s ELSE last_fired END,
    updated_at = now()
WHERE {_KEY} AND (last_fire < %(at)s OR firing <> %(firing)s)
"""

_DISABLE = """
INSERT INTO schedule_controls (workflow, trigger, disabled_by, reason)
VALUES (%(workflow)s, %(trigger)s, %(by)s, %(reason)s)
ON CONFLICT (workflow, trigger) DO NOTHING
"""

_ENABLE = f"DELETE FROM schedule_controls WHERE {_KEY}"

_RESTART = f"""
UPDATE schedule_cursors SET last_fire = GREATEST(last_fire, %(at)s), firing = true,
    updated_at = now()
WHERE {_KEY}
"""

_CONTROLS = (
    "SELECT workflow, trigger, disabled_by, reason, disabled_at FROM schedule_controls "
    "ORDER BY workflow, trigger"
)

# Per schedule (its workflow and the prefix of its trigger keys): the last success, the
# last failure, and how many runs failed since that success. A retry of a failed run
# has its trigger key and source, so its outcome counts too.
_OUTCOMES = """
SELECT s.workflow, s.prefix, ok.settled_at AS last_success,
       bad.settled_at AS last_failure, bad.error_kind, bad.error_message, bad.run_id,
       (SELECT count(*) FROM runs r
        WHERE r.workflow = s.workflow AND r.source = 'schedule' AND r.settled_at IS NOT NULL
          AND starts_with(r.trigger_key, s.prefix) AND r.status = 'failed'
          AND r.settled_at > COALESCE(ok.settled_at, '-infinity')) AS consecutive_failures
FROM unnest(%(workflows)s::text[], %(prefixes)s::text[]) AS s(workflow, prefix)
LEFT JOIN LATERAL (
    SELECT r.settled_at FROM runs r
    WHERE r.workflow = s.workflow AND r.source = 'schedule' AND r.settled_at IS NOT NULL
      AND starts_with(r.trigger_key, s.prefix) AND r.status = 'succeeded'
    ORDER BY r.settled_at DESC LIMIT 1
) ok ON true
LEFT JOIN LATERAL (
    SELECT r.settled_at, r.error_kind, r.error_message, r.run_id FROM runs r
    WHERE r.workflow = s.workflow AND r.source = 'schedule' AND r.settled_at IS NOT NULL
      AND starts_with(r.trigger_key, s.prefix) AND r.status = 'failed'
    ORDER BY r.settled_at DESC LIMIT 1
) bad ON true
"""


@asynccontextmanager
async def held(
    conn: psycopg.AsyncConnection, workflow: str, trigger: str = "schedule"
) -> AsyncIterator[Held]:
    """A transaction holding the cursor row of ``workflow``'s schedule ``trigger``.

    Before the schedule's first tick there is no row, and nothing is locked: racing
    schedulers may all :func:`start` it, and the first insert wins. Leaving the block
    commits; an exception rolls back and propagates.
    """
    key = {"workflow": workflow, "trigger": trigger}
    with translated():
        async with conn.transaction():
            cur = await conn.execute(_LOCK, key)
            row = await cur.fetchone()
            cur = await conn.execute(_CONTROL, key)
            control = await cur.fetchone()
            yield Held(
                cursor=None if row is None else row[0],
                firing=True if row is None else row[1],
                disabled_by=None if control is None else control[0],
            )


async def start(
    conn: psycopg.AsyncConnection,
    workflow: str,
    cron: str,
    timezone: str,
    at: datetime,
    *,
    trigger: str = "schedule",
    firing: bool = True,
) -> bool:
    """Create the cursor of ``workflow``'s schedule ``trigger`` at ``at``; False (and no
    change) if it has one."""
    params = {
        "workflow": workflow,
        "trigger": trigger,
        "cron": cron,
        "timezone": timezone,
        "at": at,
        "firing": firing,
    }
    with translated():
        cur = await conn.execute(_START, params)
        return cur.rowcount == 1


async def advance(
    conn: psycopg.AsyncConnection,
    workflow: str,
    cron: str,
    timezone: str,
    at: datetime,
    *,
    trigger: str = "schedule",
    fired: bool = True,
    firing: bool = True,
) -> bool:
    """Move the cursor of ``workflow``'s schedule ``trigger`` to ``at`` if that is later
    (``fired``: ``at`` is a fire time produced, else one passed over), and record whether
    it is ``firing``; True when the row changed."""
    params = {
        "workflow": workflow,
        "trigger": trigger,
        "cron": cron,
        "timezone": timezone,
        "at": at,
        "fired": fired,
        "firing": firing,
    }
    with translated():
        cur = await conn.execute(_ADVANCE, params)
        return cur.rowcount == 1


async def get(
    conn: psycopg.AsyncConnection, workflow: str, trigger: str = "schedule"
) -> ScheduleCursor | None:
    """The cursor of ``workflow``'s schedule ``trigger``, or ``None`` before its first tick."""
    with translated():
        async with conn.cursor(row_factory=class_row(ScheduleCursor)) as cur:
            await cur.execute(_GET, {"workflow": workflow, "trigger": trigger})
            return await cur.fetchone()


async def all_cursors(conn: psycopg.AsyncConnection) -> list[ScheduleCursor]:
    """Every cursor, by workflow and trigger."""
    with translated():
        async with conn.cursor(row_factory=class_row(ScheduleCursor)) as cur:
            await cur.execute(_ALL)
            return list(await cur.fetchall())


async def disable(
    conn: psycopg.AsyncConnection, workflow: str, trigger: str, *, by: str, reason: str | None
) -> bool:
    """An operator disables ``workflow``'s schedule ``trigger``: from this call's return on,
    it produces no fire. False when it was disabled already (the first reason stays)."""
    params = {"workflow": workflow, "trigger": trigger, "by": by, "reason": reason}
    with translated():
        async with conn.transaction():
            # Wait for a scheduler producing a fire of it right now to finish.
            await conn.execute(_LOCK, params)
            cur = await conn.execute(_DISABLE, params)
            return cur.rowcount == 1


async def enable(
    conn: psycopg.AsyncConnection, workflow: str, trigger: str, *, at: datetime
) -> bool:
    """An operator enables ``workflow``'s schedule ``trigger`` again at ``at``: it fires
    the times after ``at``, none it skipped before. False when no operator had disabled it."""
    params = {"workflow": workflow, "trigger": trigger, "at": at}
    with translated():
        async with conn.transaction():
            await conn.execute(_LOCK, params)
            cur = await conn.execute(_ENABLE, params)
            if cur.rowcount == 0:
                return False
            await conn.execute(_RESTART, params)
            return True


async def disabled(conn: psycopg.AsyncConnection) -> list[Disabled]:
    """Every schedule an operator disabled."""
    with translated():
        async with conn.cursor(row_factory=class_row(Disabled)) as cur:
            await cur.execute(_CONTROLS)
            return list(await cur.fetchall())


async def outcomes(
    conn: psycopg.AsyncConnection, schedules: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], dict[str, object]]:
    """How the runs of each ``(workflow, trigger key prefix)`` went: ``last_success``,
    ``last_failure`` with its ``error_kind``, ``error_message`` and ``run_id``, and the
    ``consecutive_failures`` since the last success."""
    if not schedules:
        return {}
    params = {
        "workflows": [workflow for workflow, _ in schedules],
        "prefixes": [prefix for _, prefix in schedules],
    }
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_OUTCOMES, params)
            return {(row.pop("workflow"), row.pop("prefix")): row for row in await cur.fetchall()}
