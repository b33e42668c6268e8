"""Encoding and decoding of topic records, with reasons for every refusal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from pydantic import TypeAdapter, ValidationError

from rflow.codecs import json
from rflow.codecs.records import KNOWN_VERSIONS, AnyRecord, Record

if TYPE_CHECKING:
    from rflow.engine.effects import Journal, Settle

MAX_RECORD_BYTES = 1 << 20
R = TypeVar("R", bound=Record)

_ANY = TypeAdapter(AnyRecord)


class DecodeError(ValueError):
    """A record that cannot be read; ``reason`` says why, for the dead-letter path."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encode(record: Record) -> bytes:
    """The bytes of ``record`` on a topic."""
    return json.dumps(record.model_dump(mode="json"))


def encode_journal(entries: Sequence[Journal | Settle]) -> bytes:
    """The bytes of a :class:`~rflow.codecs.records.RunJournal` of ``entries``, as
    :func:`encode` writes it, without building the record: the entries were validated
    when the engine made them, and a run's journal is written at every checkpoint."""
    return json.dumps(
        {
            "kind": "run_journal",
            "v": 2,
            "entry": None,
            "entries": [entry.model_dump(mode="json") for entry in entries],
        }
    )


def decode(
    data: bytes | None, expect: type[R] | tuple[type[Record], ...] | None = None
) -> R | Record:
    """Read one record; anything unreadable raises :class:`DecodeError` with the reason.

    ``expect``: the record type (or types) the reader takes; any other kind is refused."""
    if data is None:
        raise DecodeError("empty record (no value)")
    if len(data) > MAX_RECORD_BYTES:
        raise DecodeError(f"record of {len(data)} bytes exceeds the {MAX_RECORD_BYTES}-byte limit")
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as exc:
        raise DecodeError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise DecodeError(f"expected a JSON object, got {type(doc).__name__}")
    kind, version = doc.get("kind"), doc.get("v")
    if kind not in KNOWN_VERSIONS:
        raise DecodeError(
            f"unknown record kind {kind!r}; known: {', '.join(sorted(KNOWN_VERSIONS))}"
        )
    if version not in KNOWN_VERSIONS[kind]:
        known = ", ".join(str(v) for v in sorted(KNOWN_VERSIONS[kind]))
        raise DecodeError(
            f"unsupported version {version!r} of {kind!r} records; this worker reads: {known}"
        )
    try:
        record = _ANY.validate_python(doc)
    except ValidationError as exc:
        raise DecodeError(f"invalid {kind!r} record: {_describe(exc)}") from None
    if expect is not None and not isinstance(record, expect):
        kinds = " or ".join(
            repr(tp.model_fields["kind"].default)
            for tp in (expect if isinstance(expect, tuple) else (expect,))
        )
        raise DecodeError(f"expected a {kinds} record, got {kind!r}")
    return record


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error["loc"][1:]) or "record"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
