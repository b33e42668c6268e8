"""JSON for everything rflow writes: the only caller of orjson.

orjson refuses integers beyond 64 bits, and wei amounts routinely exceed them: such
integers are written as decimal strings (as most chain APIs do), so no amount is ever
rounded through a float. Models that carry amounts declare them as ``Wei`` fields,
which read the strings back as exact integers.
"""

from __future__ import annotations

import json as stdlib_json
from datetime import date
from decimal import Decimal
from typing import Any

import orjson

from rflow.jsonlimits import MAX_DEPTH, nesting_depth

_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


class JSONDecodeError(ValueError):
    """Bytes that are not one JSON document."""


_INT64 = (-(2**63), 2**64 - 1)


def _widen(value: Any) -> Any:
    """Replace integers outside orjson's range by their decimal strings."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if _INT64[0] <= value <= _INT64[1] else str(value)
    if isinstance(value, dict):
        return {key: _widen(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_widen(item) for item in value]
    if hasattr(value, "model_dump"):
        return _widen(value.model_dump(mode="json"))
    return value


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, date):  # orjson writes these itself; the standard library asks
        return value.isoformat()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(value: Any) -> bytes:
    """Encode ``value`` as compact JSON with sorted keys (stable bytes for stable input)."""
    try:
        return orjson.dumps(value, default=_default, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        if "64-bit" not in str(exc):
            raise TypeError(str(exc)) from exc
    return orjson.dumps(_widen(value), default=_default, option=_OPTIONS)


def dumps_exact(value: Any) -> bytes:
    """Encode ``value`` for a JSONB column: like :func:`dumps`, but an integer beyond 64
    bits stays a number (Postgres keeps it exact), and keys keep their order."""
    try:
        return orjson.dumps(value, default=_default, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError as exc:
        if "64-bit" not in str(exc):
            raise TypeError(str(exc)) from exc
    return orjson.dumps(_exact(value), default=_default, option=orjson.OPT_NON_STR_KEYS)


def _exact(value: Any) -> Any:
    """Replace integers outside orjson's range by their digits, written as they are."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if _INT64[0] <= value <= _INT64[1]:
            return value
        return orjson.Fragment(str(value).encode())
    if isinstance(value, dict):
        return {key: _exact(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_exact(item) for item in value]
    if hasattr(value, "model_dump"):
        return _exact(value.model_dump(mode="json"))
    return value


def pretty(value: Any) -> str:
    """``value`` as indented JSON text with sorted keys, for people to read (the console):
    an integer beyond 64 bits is written as the number it is, not as a string."""
    return orjson.dumps(
        _exact(value), default=_default, option=_OPTIONS | orjson.OPT_INDENT_2
    ).decode()


_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
"""Every digit as ``0``, every other byte as a space: a document has a run of 20 digits
where its translation has twenty ``0`` in a row, found by a plain substring search
(many times faster than a regular expression over the document)."""
_LONG_RUN = b"0" * 20


def loads(data: bytes | str) -> Any:
    """Decode one JSON document; any failure is a :class:`JSONDecodeError`.

    orjson reads integers beyond 64 bits as floats, which would round a wei amount; a
    document with a run of 20 or more digits is read by the standard library instead,
    which keeps every integer exact.
    """
    raw = data.encode() if isinstance(data, str) else data
    try:
        if _LONG_RUN in raw.translate(_DIGITS):
            if nesting_depth(raw) > MAX_DEPTH:
                raise JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels")
            return stdlib_json.loads(raw)
        return orjson.loads(raw)
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise JSONDecodeError(str(exc)) from exc
