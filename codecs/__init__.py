"""Codecs: the only place records are turned into bytes and back.

Every record on a topic is a versioned pydantic model (:mod:`.records`); anything that
fails to decode raises :class:`DecodeError` with a reason meant for the dead-letter path.
"""

from rflow.codecs.envelope import MAX_RECORD_BYTES, DecodeError, decode, encode
from rflow.codecs.records import (
    DEAD_LETTER_RAW_LIMIT,
    DeadLetter,
    PauseChanged,
    Record,
    RetryRecord,
    RunEvent,
    RunJournal,
    SendControl,
    SendRequest,
    TriggerRecord,
    TriggerRetracted,
)

__all__ = [
    "DEAD_LETTER_RAW_LIMIT",
    "MAX_RECORD_BYTES",
    "DeadLetter",
    "DecodeError",
    "PauseChanged",
    "Record",
    "RetryRecord",
    "RunEvent",
    "RunJournal",
    "SendControl",
    "SendRequest",
    "TriggerRecord",
    "TriggerRetracted",
    "decode",
    "encode",
]
