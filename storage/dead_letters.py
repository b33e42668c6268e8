"""The dead-letter table: records that could not be processed, and why."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from rflow.codecs import DeadLetter
from rflow.storage.errors import storable, translated

_INSERT = """
INSERT INTO dead_letters (topic, "partition", "offset", record_key, reason, raw, failed_at)
VALUES (%(topic)s, %(partition)s, %(offset)s, %(key)s, %(reason)s, %(raw)s, %(failed_at)s)
ON CONFLICT ON CONSTRAINT dead_letters_origin DO NOTHING
"""

_RECENT = """
SELECT id, topic, "partition", "offset", record_key, reason, raw, failed_at, recorded_at
FROM dead_letters
WHERE %(topic)s::text IS NULL OR topic = %(topic)s
ORDER BY recorded_at DESC, id DESC
LIMIT %(limit)s
"""


async def record(conn: psycopg.AsyncConnection, letter: DeadLetter) -> bool:
    """Store ``letter`` once; returns False when the same origin was stored before.

    Postgres text cannot hold NUL: a record carrying one (hostile or broken input is what
    this table is for) is stored with each NUL shown as U+FFFD.
    """
    with translated():
        cur = await conn.execute(_INSERT, storable(letter.model_dump()))
        return cur.rowcount == 1


async def recent(
    conn: psycopg.AsyncConnection, *, topic: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """The newest dead letters, optionally of one topic."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_RECENT, {"topic": topic, "limit": limit})
            return list(await cur.fetchall())


_COUNTS = """
SELECT (SELECT count(*) FROM dead_letters), (SELECT count(*) FROM dead_runs)
"""


async def counts(conn: psycopg.AsyncConnection) -> dict[str, int]:
    """How many records (``record``) and runs (``run``) are dead-lettered."""
    with translated():
        cur = await conn.execute(_COUNTS)
        records, runs = await cur.fetchone()
        return {"record": records, "run": runs}


_GET = """
SELECT id, topic, "partition", "offset", record_key, reason, raw, failed_at, recorded_at
FROM dead_letters WHERE id = %s
"""


async def get(conn: psycopg.AsyncConnection, letter_id: int) -> dict[str, Any] | None:
    """One dead letter by its id, or ``None``."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_GET, (letter_id,))
            return await cur.fetchone()
