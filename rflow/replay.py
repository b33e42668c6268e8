"""Whether a dead letter can be produced back to its topic, and why not.

A replay produces the stored record, byte for byte, to the topic it came from, under the
key it had. That is only the original record when the dead-letter table kept it whole,
and only worth doing when a worker would not dead-letter it again for the same reason.
Repeating a record is harmless by design on every topic a replay writes to: the
triggers topic admits a firing once per ``<workflow>:<trigger key>`` (the gate), the
runner ignores a result for a step that has settled, the relayer answers a send key it
has stored from its row, and the projector upserts.

:func:`plan` is pure: the caller reads the row and the newest deployment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rflow.codecs import (
    DEAD_LETTER_RAW_LIMIT,
    DecodeError,
    Record,
    RetryRecord,
    RunEvent,
    RunJournal,
    SendControl,
    SendRequest,
    TriggerRecord,
    TriggerRetracted,
    decode,
)

READERS: Mapping[str, tuple[type[Record], ...]] = {
    "rflow.triggers": (TriggerRecord, RetryRecord, TriggerRetracted, RunEvent),
    "rflow.runs": (TriggerRecord, RetryRecord, TriggerRetracted, RunEvent),
    "rflow.sends": (SendRequest, SendControl),
    "rflow.events": (RunJournal,),
}
"""The topics a replay may write to (declared names), with the records their readers take."""


class Letter(Protocol):
    """What a replay needs of a dead letter (a row of ``dead_letters``)."""

    id: int
    topic: str
    key: str | None
    raw: str | None
    reason: str


@dataclass(frozen=True)
class Deployed:
    """The newest deployment: its id and its workflows."""

    id: int
    workflows: frozenset[str]


@dataclass(frozen=True)
class Replay:
    """What to produce: to ``topic`` (its full name), under ``key``, the bytes ``value``."""

    topic: str
    key: bytes | None
    value: bytes
    record: Any
    """The decoded record, for the answer (a firing's workflow and trigger key...)."""


class Refused(Exception):
    """The dead letter cannot be replayed; the message says why and what to do."""


def plan(letter: Letter, prefix: str, deployed: Deployed | None) -> Replay:
    """What replaying ``letter`` produces, or :class:`Refused` with the reason.

    ``prefix`` is the topic prefix of this configuration (``RFLOW_TOPIC_PREFIX``);
    ``deployed`` the newest deployment (``None`` when there is none).
    """
    name = _declared(letter.topic, prefix)
    raw = letter.raw or ""
    if not raw:
        raise Refused(
            "the dead letter holds no record (an empty value, or one the database could "
            "not store): there is nothing to produce"
        )
    if "\ufffd" in raw or (letter.key is not None and "\ufffd" in letter.key):
        raise Refused(
            "the stored record is not the original bytes: it held bytes that are not UTF-8 "
            "(or NUL), stored as U+FFFD"
        )
    value = raw.encode()
    if len(value) >= DEAD_LETTER_RAW_LIMIT:
        raise Refused(f"the stored record is cut at {DEAD_LETTER_RAW_LIMIT // 1024} KiB")
    try:
        record = decode(value, READERS[name])
    except DecodeError as exc:
        raise Refused(
            f"it does not decode ({exc.reason}): a worker would dead-letter it again"
        ) from None
    if isinstance(record, TriggerRecord | RetryRecord):
        _firing(record, letter.key, deployed)
    key = letter.key.encode() if letter.key is not None else None
    return Replay(letter.topic, key, value, record)


def _declared(topic: str, prefix: str) -> str:
    name = topic[len(prefix) :] if topic.startswith(prefix) else None
    if name == "rflow.dlq":
        raise Refused(
            "it came from the dead-letter topic itself (a dead letter that could not be "
            "read): it is not a record a worker processes"
        )
    if name not in READERS:
        raise Refused(
            f"topic {topic!r} is not a topic a replay writes to under this configuration "
            f"(RFLOW_TOPIC_PREFIX={prefix!r}; it writes to "
            f"{', '.join(prefix + n for n in READERS)}): replay it with the workers' settings"
        )
    return name


def _firing(record: TriggerRecord | RetryRecord, key: str | None, deployed: Deployed | None):
    if deployed is None:
        raise Refused(
            f"nothing is deployed, so a worker would dead-letter the firing of workflow "
            f"{record.workflow!r} again: deploy the project first (rflow deploy PATH)"
        )
    if record.workflow not in deployed.workflows:
        raise Refused(
            f"workflow {record.workflow!r} is not in the newest deployment ({deployed.id}), "
            "so a worker would dead-letter the firing again: deploy it first"
        )
    if key != record.partition_key:
        shown = "none" if key is None else repr(key)
        raise Refused(
            f"its key {shown} is not the firing's partition key {record.partition_key!r} "
            "(its concurrency group, else its trigger key), so a worker would dead-letter "
            "it again: fire it anew (rflow trigger, or your producer with that key)"
        )
