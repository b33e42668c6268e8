"""Encoding and decoding of topic records, with reasons for every refusal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

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

    Every reason is a sentence for the person reading the dead letter: it names the field
    at fault and what was expected there (``not JSON: ...``, ``no "v" (record
    version): ...``, ``"source" is 'fax': expected one of ...``).

    ``expect``: the record type (or types) the reader takes; any other kind is refused."""
    if data is None:
        raise DecodeError(
            "empty record: it has no value (a tombstone?); expected one JSON object "
            'such as {"kind": "trigger", "v": 1, ...}'
        )
    if len(data) > MAX_RECORD_BYTES:
        raise DecodeError(f"record of {len(data)} bytes exceeds the {MAX_RECORD_BYTES}-byte limit")
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as exc:
        why = "its bytes are not UTF-8" if "UTF-8" in str(exc) else str(exc)
        raise DecodeError(
            f"not JSON: {why}; a record is one JSON object, and this one begins {_begins(data)}"
        ) from None
    if not isinstance(doc, dict):
        raise DecodeError(
            f"not a JSON object: the record is {_json_type(doc)}; expected an object such as "
            '{"kind": "trigger", "v": 1, ...}'
        )
    kind, version = doc.get("kind"), doc.get("v")
    if kind not in KNOWN_VERSIONS:
        known = ", ".join(repr(k) for k in sorted(KNOWN_VERSIONS))
        if "kind" not in doc:
            raise DecodeError(f'no "kind" (record type): expected one of {known}')
        raise DecodeError(
            f'"kind" (record type) is {_shown(kind)}, which no rflow record is: expected one '
            f"of {known}"
        )
    versions = sorted(KNOWN_VERSIONS[kind])
    if version not in versions or isinstance(version, bool):
        reads = (
            f'"v": {versions[0]}'
            if len(versions) == 1
            else "one of " + ", ".join(f'"v": {v}' for v in versions)
        )
        if "v" not in doc:
            raise DecodeError(f'no "v" (record version): a {kind!r} record carries {reads}')
        raise DecodeError(
            f'"v" (record version) is {_shown(version)}: this worker reads {kind!r} records '
            f"with {reads}"
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


_PREVIEW = 40
"""Characters of a value (or of a record that is not JSON) a reason shows."""

_EXPECTED = {
    "dict_type": "expected a JSON object",
    "model_type": "expected a JSON object",
    "model_attributes_type": "expected a JSON object",
    "list_type": "expected a list",
    "string_type": "expected text",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "datetime_type": "expected an RFC 3339 time with a time zone, such as 2026-05-06T07:08:09Z",
    "datetime_parsing": "expected an RFC 3339 time with a time zone, such as 2026-05-06T07:08:09Z",
    "datetime_from_date_parsing": (
        "expected an RFC 3339 time with a time zone, such as 2026-05-06T07:08:09Z"
    ),
    "timezone_aware": "expected a time with a time zone, such as 2026-05-06T07:08:09Z",
}
"""What a field expected, by pydantic's error type."""


def _describe(exc: ValidationError) -> str:
    """Each of the first five problems as a clause naming its field."""
    return "; ".join(_problem(error) for error in exc.errors()[:5])


def _problem(error: Any) -> str:
    where = ".".join(str(p) for p in error["loc"][1:])  # the first is the record's kind
    field = f'"{where}"' if where else "the record"
    kind = error["type"]
    ctx = error.get("ctx") or {}
    given = error.get("input")
    if kind == "missing":
        return f"no {field} (a required field)"
    if kind == "extra_forbidden":
        return f"unexpected field {field} (not part of this record)"
    if kind == "literal_error":
        return f"{field} is {_shown(given)}: expected {ctx.get('expected', 'another value')}"
    if kind == "string_too_short":
        least = ctx.get("min_length", 1)
        return f"{field} is {_shown(given)}: expected at least {least} character" + (
            "s" if least != 1 else ""
        )
    if kind == "string_too_long":
        return f"{field} is {len(given)} characters long: expected at most {ctx.get('max_length')}"
    if kind in _EXPECTED:
        return f"{field} is {_shown(given)}: {_EXPECTED[kind]}"
    if kind == "value_error":
        reason = str(ctx.get("error", error["msg"]))
        return f"{field}: {reason}" if where else reason
    return f"{field}: {error['msg'][0].lower()}{error['msg'][1:]}"


def _shown(value: Any) -> str:
    """A value as a reason quotes it: its JSON type for containers, else its text, cut."""
    if isinstance(value, dict | list):
        return _json_type(value)
    text = "null" if value is None else repr(value)
    if isinstance(value, bool):
        text = "true" if value else "false"
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 3] + "..."


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true or false"
    if value is None:
        return "null"
    return "a number"


def _begins(data: bytes) -> str:
    text = data[:_PREVIEW].decode("utf-8", "replace")
    return repr(text) + ("..." if len(data) > _PREVIEW else "")
