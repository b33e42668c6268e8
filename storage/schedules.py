"""Schedule cursors: how far each schedule-triggered workflow has been fired.

A cursor is the instant up to which a workflow's fire times have been handled; the
policy that moves it lives in :mod:`rflow.ingress.schedule`. Here the cursor only ever
moves forward (:func:`advance` refuses to go back), and :func:`held` serialises the
schedulers of all workers on one workflow: the one holding the row decides and produces
the fire while the others wait, then find the cursor already past it.

A changed cron or time zone keeps the cursor: the new definition's fire times after it
are due as usual, so a redeploy neither replays the past nor skips a fire, and workers
still running the old definition during a rolling deploy cannot move it backwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.rows import class_row

from rflow.storage.errors import translated


@dataclass(frozen=True)
class ScheduleCursor:
    """One row of ``schedule_cursors``."""

    workflow: str
    cron: str
    """The definition that last moved the cursor."""
    timezone: str
    last_fire: datetime
    """Every fire time at or before this instant has been handled."""
    updated_at: datetime


_COLUMNS = "workflow, cron, timezone, last_fire, updated_at"

_GET = f"SELECT {_COLUMNS} FROM schedule_cursors WHERE workflow = %(workflow)s"

_LOCK = "SELECT last_fire FROM schedule_cursors WHERE workflow = %(workflow)s FOR UPDATE"

_ALL = f"SELECT {_COLUMNS} FROM schedule_cursors ORDER BY workflow"

_START = """
INSERT INTO schedule_cursors (workflow, cron, timezone, last_fire)
VALUES (%(workflow)s, %(cron)s, %(timezone)s, %(at)s)
ON CONFLICT (workflow) DO NOTHING
"""

_ADVANCE = """
UPDATE schedule_cursors
SET last_fire = %(at)s, cron = %(cron)s, timezone = %(timezone)s, updated_at = now()
WHERE workflow = %(workflow)s AND last_fire < %(at)s
"""


@asynccontextmanager
async def held(conn: psycopg.AsyncConnection, workflow: str) -> AsyncIterator[datetime | None]:
    """A transaction holding ``workflow``'s cursor row; yields its ``last_fire``.

    ``None`` when the workflow has no cursor yet (nothing is locked then: racing
    schedulers may all :func:`start` it, and the first insert wins). Leaving the block
    commits; an exception rolls back and propagates.
    """
    with translated():
        async with conn.transaction():
            cur = await conn.execute(_LOCK, {"workflow": workflow})
            row = await cur.fetchone()
            yield None if row is None else row[0]


async def start(
    conn: psycopg.AsyncConnection, workflow: str, cron: str, timezone: str, at: datetime
) -> bool:
    """Create ``workflow``'s cursor at ``at``; False (and no change) if it has one."""
    with translated():
        cur = await conn.execute(
            _START, {"workflow": workflow, "cron": cron, "timezone": timezone, "at": at}
        )
        return cur.rowcount == 1


async def advance(
    conn: psycopg.AsyncConnection, workflow: str, cron: str, timezone: str, at: datetime
) -> bool:
    """Move ``workflow``'s cursor to ``at`` if that is later; True when it moved."""
    with translated():
        cur = await conn.execute(
            _ADVANCE, {"workflow": workflow, "cron": cron, "timezone": timezone, "at": at}
        )
        return cur.rowcount == 1


async def get(conn: psycopg.AsyncConnection, workflow: str) -> ScheduleCursor | None:
    """``workflow``'s cursor, or ``None`` before its first tick."""
    with translated():
        async with conn.cursor(row_factory=class_row(ScheduleCursor)) as cur:
            await cur.execute(_GET, {"workflow": workflow})
            return await cur.fetchone()


async def all_cursors(conn: psycopg.AsyncConnection) -> list[ScheduleCursor]:
    """Every cursor, by workflow name."""
    with translated():
        async with conn.cursor(row_factory=class_row(ScheduleCursor)) as cur:
            await cur.execute(_ALL)
            return list(await cur.fetchall())
