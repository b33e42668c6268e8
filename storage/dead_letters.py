"""The dead-letter table: records that could not be processed, and why."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import class_row, dict_row

from rflow.storage.errors import StorageError, storable, translated

if TYPE_CHECKING:
    from rflow.codecs import DeadLetter

_INSERT = """
INSERT INTO dead_letters (topic, "partition", "offset", record_key, reason, raw, failed_at)
VALUES (%(topic)s, %(partition)s, %(offset)s, %(key)s, %(reason)s, %(raw)s, %(failed_at)s)
ON CONFLICT ON CONSTRAINT dead_letters_origin DO NOTHING
"""

_RECENT = """
SELECT id, topic, "partition", "offset", record_key, reason, raw, failed_at, recorded_at,
       replayed_at, replayed_partition, replayed_offset
FROM dead_letters
WHERE %(topic)s::text IS NULL OR topic = %(topic)s
ORDER BY recorded_at DESC, id DESC
LIMIT %(limit)s
"""


_COLUMNS = """
id, topic, "partition", "offset", record_key AS key, reason, failed_at, recorded_at,
replayed_at, replayed_partition, replayed_offset, octet_length(raw) AS size
"""
_LIST = f"""
SELECT {_COLUMNS}, NULL::text AS raw FROM dead_letters
WHERE (%(topic)s::text IS NULL OR topic = %(topic)s)
  AND (%(replayed)s::boolean IS NULL OR (replayed_at IS NOT NULL) = %(replayed)s)
ORDER BY id DESC
LIMIT %(limit)s
"""
_GET = f"SELECT {_COLUMNS}, raw FROM dead_letters WHERE id = %s"
_CLAIM = _GET + " FOR UPDATE"
_MARK = """
UPDATE dead_letters SET replayed_at = now(), replayed_partition = %s, replayed_offset = %s,
                        replayed_by = %s
WHERE id = %s
RETURNING replayed_at
"""


@dataclass(frozen=True)
class LetterRow:
    """One dead letter: where the record came from, why it failed, and its replay."""

    id: int
    topic: str
    partition: int
    offset: int
    key: str | None
    reason: str
    failed_at: datetime
    recorded_at: datetime
    replayed_at: datetime | None
    replayed_partition: int | None
    replayed_offset: int | None
    size: int
    """Bytes of the stored record (UTF-8)."""
    raw: str | None
    """The stored record (``None`` in listings, which leave it out)."""

    def document(self) -> dict[str, Any]:
        """The dead letter as JSON-ready data, its topic named as the workers name it (the
        prefix included)."""
        document: dict[str, Any] = {
            "id": self.id,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "key": self.key,
            "reason": self.reason,
            "size": self.size,
            "failed_at": self.failed_at.isoformat(),
            "recorded_at": self.recorded_at.isoformat(),
            "replayed_at": self.replayed_at.isoformat() if self.replayed_at else None,
            "replayed_to": (
                {"partition": self.replayed_partition, "offset": self.replayed_offset}
                if self.replayed_at
                else None
            ),
        }
        if self.raw is not None:
            document["record"] = self.raw
        return document


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
    """The newest dead letters with their records, optionally of one topic; a replayed
    one has ``replayed_at`` and where it went."""
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


async def listing(
    conn: psycopg.AsyncConnection,
    *,
    topic: str | None = None,
    replayed: bool | None = None,
    limit: int = 50,
) -> list[LetterRow]:
    """The newest dead letters without their records, optionally of one topic (its full
    name) and only those replayed (``True``) or not (``False``)."""
    with translated():
        async with conn.cursor(row_factory=class_row(LetterRow)) as cur:
            await cur.execute(_LIST, {"topic": topic, "replayed": replayed, "limit": limit})
            return list(await cur.fetchall())


async def get(conn: psycopg.AsyncConnection, letter_id: int) -> LetterRow | None:
    """Dead letter ``letter_id``, its record included."""
    with translated():
        async with conn.cursor(row_factory=class_row(LetterRow)) as cur:
            await cur.execute(_GET, (letter_id,))
            return await cur.fetchone()


async def claim(conn: psycopg.AsyncConnection, letter_id: int) -> LetterRow | None:
    """Dead letter ``letter_id``, locked until the caller's transaction ends: a replay
    holds it while it produces, so a second replay waits, then sees the first's mark."""
    with translated():
        async with conn.cursor(row_factory=class_row(LetterRow)) as cur:
            await cur.execute(_CLAIM, (letter_id,))
            return await cur.fetchone()


async def mark_replayed(
    conn: psycopg.AsyncConnection,
    letter_id: int,
    partition: int,
    offset: int,
    by: str | None = None,
) -> datetime:
    """Record that dead letter ``letter_id`` was produced back at ``partition``/``offset``
    at the request of ``by``."""
    with translated():
        cur = await conn.execute(_MARK, (partition, offset, by, letter_id))
        row = await cur.fetchone()
        if row is None:
            raise StorageError(f"dead letter {letter_id} is gone")
        return row[0]
