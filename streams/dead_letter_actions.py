"""Operator actions on dead-lettered records: list them, show one, replay one.

A replay claims the dead letter's row under its lock, checks that the stored record can
go back (:func:`rflow.replay.plan`), produces it to its topic under its key, and marks
the row replayed, all inside one transaction: a second replay of the same dead letter
waits for the first and is then refused. A replay that dies between the produce and the
commit leaves the row unmarked, so it can be produced twice; every topic a replay writes
to takes a repeated record as harmless (for a firing: the triggers gate).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from rflow import replay
from rflow.codecs import RetryRecord, TriggerRecord
from rflow.engine.keys import run_id
from rflow.storage import StorageError, deployments
from rflow.storage import dead_letters as store
from rflow.storage.dead_letters import LetterRow
from rflow.streams.control import ControlError, Sender

Database = Callable[[Callable[[psycopg.AsyncConnection], Awaitable[Any]]], Awaitable[Any]]


class DeadLetterActions:
    """``rflow dead-letters`` over ``database`` and ``producer``."""

    def __init__(self, database: Database, producer: Sender) -> None:
        self.database = database
        self.producer = producer

    async def show(self, letter_id: int) -> dict[str, Any]:
        """Dead letter ``letter_id`` with its record, and whether a replay would take it."""
        prefix = self.producer.topic_prefix
        document = await self.database(lambda conn: describe(conn, letter_id, prefix))
        if document is None:
            raise ControlError(f"no dead letter {letter_id} (rflow dead-letters ls)", 404)
        return document

    async def replay(self, letter_id: int, by: str | None = None) -> dict[str, Any]:
        """Produce dead letter ``letter_id``'s record back to its topic under its key, once;
        the letter records ``by``, the principal who asked."""
        prefix = self.producer.topic_prefix

        async def work(conn: psycopg.AsyncConnection) -> dict[str, Any]:
            async with conn.transaction():
                row = await store.claim(conn, letter_id)
                if row is None:
                    raise ControlError(f"no dead letter {letter_id} (rflow dead-letters ls)", 404)
                if row.replayed_at is not None:
                    raise ControlError(f"dead letter {letter_id}: {_replayed(row)}")
                try:
                    planned = replay.plan(row, prefix, await _deployed(conn))
                except replay.Refused as exc:
                    raise ControlError(
                        f"dead letter {letter_id} cannot be replayed: {exc}"
                    ) from None
                partition, offset = await self.producer.send_raw(
                    planned.topic, planned.key, planned.value
                )
                try:
                    await store.mark_replayed(conn, letter_id, partition, offset, by)
                except StorageError as exc:
                    raise ControlError(
                        f"dead letter {letter_id} was produced to {planned.topic} (partition "
                        f"{partition}, offset {offset}) but could not be marked replayed ({exc}): "
                        "a second replay produces it again, which its reader takes as a repeat",
                        503,
                    ) from None
            return {
                "id": letter_id,
                "topic": planned.topic,
                "key": row.key,
                "partition": partition,
                "offset": offset,
                **_what(planned.record),
            }

        return await self.database(work)


async def describe(
    conn: psycopg.AsyncConnection, letter_id: int, prefix: str
) -> dict[str, Any] | None:
    """Dead letter ``letter_id`` as a document with its record, ``replayable`` and, when
    it is not, ``why_not``; ``None`` when there is no such dead letter."""
    row = await store.get(conn, letter_id)
    if row is None:
        return None
    document = row.document()
    try:
        replay.plan(row, prefix, await _deployed(conn))
    except replay.Refused as exc:
        document["replayable"], document["why_not"] = False, str(exc)
    else:
        document["replayable"] = row.replayed_at is None
        document["why_not"] = _replayed(row) if row.replayed_at else None
    return document


def _replayed(row: LetterRow) -> str:
    return (
        f"already replayed at {row.replayed_at:%Y-%m-%d %H:%M:%S} (partition "
        f"{row.replayed_partition}, offset {row.replayed_offset}); if it failed again, it "
        "is a new dead letter: replay that one"
    )


def _what(record: Any) -> dict[str, Any]:
    """What the replayed record is; for a firing, the gate entry that admits it once and
    the run it starts (without a matrix)."""
    if isinstance(record, TriggerRecord):
        return {
            "record": record.kind,
            "workflow": record.workflow,
            "gate": f"{record.workflow}:{record.trigger_key}",
            "run_id": run_id(record.workflow, record.trigger_key),
        }
    if isinstance(record, RetryRecord):
        return {
            "record": record.kind,
            "workflow": record.workflow,
            "gate": record.gate_key,
            "run_id": record.run_id,
        }
    return {"record": record.kind}


async def _deployed(conn: psycopg.AsyncConnection) -> replay.Deployed | None:
    newest = await deployments.recent(conn, 1)
    if not newest:
        return None
    return replay.Deployed(newest[0].id, frozenset(newest[0].versions))
