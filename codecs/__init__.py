"""Codecs: the only place records are turned into bytes and back.

Every record on a topic is a versioned pydantic model (:mod:`.records`); anything that
fails to decode raises :class:`DecodeError` with a reason meant for the dead-letter path.

The names below are imported from their module when first used, so a reader of one
submodule (``rflow.codecs.json``, say: the database's JSON columns, which the CLI reads)
does not pay for the records and the engine's models they carry.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rflow.codecs.backtests import BacktestReport, decode_report
    from rflow.codecs.envelope import (
        MAX_RECORD_BYTES,
        DecodeError,
        decode,
        encode,
        encode_journal,
    )
    from rflow.codecs.records import (
        DEAD_LETTER_RAW_LIMIT,
        CallRecord,
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

_HOMES = {
    "BacktestReport": "backtests",
    "decode_report": "backtests",
    "MAX_RECORD_BYTES": "envelope",
    "DecodeError": "envelope",
    "decode": "envelope",
    "encode": "envelope",
    "encode_journal": "envelope",
    "DEAD_LETTER_RAW_LIMIT": "records",
    "CallRecord": "records",
    "DeadLetter": "records",
    "PauseChanged": "records",
    "Record": "records",
    "RetryRecord": "records",
    "RunEvent": "records",
    "RunJournal": "records",
    "SendControl": "records",
    "SendRequest": "records",
    "TriggerRecord": "records",
    "TriggerRetracted": "records",
}
"""Each exported name and the submodule that defines it."""


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'rflow.codecs' has no attribute {name!r}")
    module = importlib.import_module(f"rflow.codecs.{_HOMES[name]}")
    globals()[name] = value = getattr(module, name)
    return value


__all__ = [
    "DEAD_LETTER_RAW_LIMIT",
    "MAX_RECORD_BYTES",
    "BacktestReport",
    "CallRecord",
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
    "decode_report",
    "encode",
    "encode_journal",
]
