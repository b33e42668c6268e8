"""The dead-letter path: bad records go to the DLQ topic, and from there to Postgres."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rflow.codecs import DEAD_LETTER_RAW_LIMIT, DeadLetter, DecodeError, decode, encode
from rflow.storage import StorageError
from rflow.storage import dead_letters as store

if TYPE_CHECKING:
    from faust.types import Message

    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)
RAW_LIMIT = DEAD_LETTER_RAW_LIMIT


def letter_for(message: Message, reason: str) -> DeadLetter:
    """The dead letter describing ``message`` and why it failed."""
    raw = message.value or b""
    key = message.key.decode("utf-8", "replace") if message.key is not None else None
    return DeadLetter(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=key,
        reason=reason,
        raw=raw[:RAW_LIMIT].decode("utf-8", "replace"),
        failed_at=datetime.now(UTC),
    )


async def send_dead_letter(app: RflowApp, message: Message, reason: str) -> None:
    """Route ``message`` to the DLQ topic with ``reason``; the worker carries on."""
    log.warning(
        "dead-lettering %s[%s]@%s: %s", message.topic, message.partition, message.offset, reason
    )
    letter = letter_for(message, reason)
    await app.rflow.topics.dlq.send(key=message.key, value=encode(letter))


def attach(app: RflowApp) -> None:
    """Declare the agent that stores dead letters in Postgres."""
    consumption = app.rflow.consumption

    @app.agent(app.rflow.topics.dlq, name="rflow.dead-letters", concurrency=1)
    async def dead_letters(stream):
        """Store every dead letter in the ``dead_letters`` table (idempotent by origin)."""
        async for event in stream.events():
            if not consumption.take(event.message):
                continue
            await store_letter(event)
            consumption.processed(event.message)

    async def store_letter(event: Any) -> None:
        """Store one dead letter; a refused one without its record's text."""
        try:
            letter = decode(event.value, DeadLetter)
        except DecodeError as exc:
            # A malformed record on the DLQ itself is stored as its own dead letter.
            letter = letter_for(event.message, f"unreadable dead letter: {exc.reason}")
        try:
            await app.rflow.database.run(
                lambda conn, letter=letter: store.record(conn, letter), what="dead letter"
            )
        except StorageError as exc:
            # Refused by the database: keep the origin and the reason, without the
            # record's text. The agent must never stop on what it was sent.
            log.error("dead letter from %s@%s refused: %s", letter.topic, letter.offset, exc)
            bare = letter.model_copy(
                update={"raw": "", "reason": f"{letter.reason} (record not storable: {exc})"}
            )
            await app.rflow.database.run(
                lambda conn, bare=bare: store.record(conn, bare), what="dead letter"
            )
