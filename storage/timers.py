"""Durable timers: retry backoffs, delays and wait timeouts, fired by the partition's owner."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from rflow.storage.errors import translated

_INSERT = """
INSERT INTO timers (timer_key, run_id, partition_key, kafka_partition, path, visit, attempt, purpose, due_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (timer_key) DO NOTHING
"""

_DUE = """
SELECT timer_key, run_id, partition_key, path, visit, attempt, purpose, due_at
FROM timers
WHERE kafka_partition = ANY(%s) AND due_at <= %s
ORDER BY due_at
LIMIT %s
"""

_NEXT_DUE = "SELECT min(due_at) FROM timers WHERE kafka_partition = ANY(%s)"
_DELETE = "DELETE FROM timers WHERE timer_key = ANY(%s)"
_DELETE_RUN = "DELETE FROM timers WHERE run_id = %s"


@dataclass(frozen=True)
class Timer:
    """One durable timer row."""

    timer_key: str
    run_id: str
    partition_key: str
    path: str
    visit: int
    attempt: int
    purpose: str
    due_at: datetime


def timer_key(run_id: str, path: str, visit: int, attempt: int, purpose: str) -> str:
    """The unique key of a timer: scheduling the same timer twice stores it once."""
    return f"{run_id}:{path}:{visit}:{attempt}:{purpose}"


async def schedule(
    conn: psycopg.AsyncConnection,
    *,
    run_id: str,
    partition_key: str,
    kafka_partition: int,
    path: str,
    visit: int,
    attempt: int,
    purpose: str,
    due_at: datetime,
) -> None:
    """Store a timer once (idempotent by its key)."""
    key = timer_key(run_id, path, visit, attempt, purpose)
    with translated():
        await conn.execute(
            _INSERT,
            (key, run_id, partition_key, kafka_partition, path, visit, attempt, purpose, due_at),
        )


async def due(
    conn: psycopg.AsyncConnection, partitions: list[int], now: datetime, limit: int = 500
) -> list[Timer]:
    """Timers of ``partitions`` due at ``now``, oldest first."""
    with translated():
        cur = await conn.execute(_DUE, (partitions, now, limit))
        return [Timer(*row) for row in await cur.fetchall()]


async def next_due(conn: psycopg.AsyncConnection, partitions: list[int]) -> datetime | None:
    """The earliest due time among ``partitions``' timers."""
    with translated():
        cur = await conn.execute(_NEXT_DUE, (partitions,))
        row = await cur.fetchone()
        return row[0] if row else None


async def delete(conn: psycopg.AsyncConnection, keys: list[str]) -> None:
    """Remove fired timers."""
    with translated():
        await conn.execute(_DELETE, (keys,))


async def delete_run(conn: psycopg.AsyncConnection, run_id: str) -> None:
    """Remove every timer of a settled run."""
    with translated():
        await conn.execute(_DELETE_RUN, (run_id,))
