"""Values as text: template stringification, JSON encoding and bounded JSON decoding.

The standard library does the string escaping and the parsing; numbers are ours, so that
big integers and decimals keep every digit and floats never appear.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from rflow.expr.errors import eval_error, limit_error
from rflow.expr.limits import (
    MAX_DECIMAL_EXPONENT,
    MAX_INT,
    MAX_JSON_DEPTH,
    MAX_JSON_LENGTH,
    MAX_LIST_LENGTH,
    MAX_STRING_LENGTH,
    Budget,
    check_list_length,
)
from rflow.expr.values import decimal_text, int_text, is_list, type_name
from rflow.jsonlimits import nesting_depth


def to_text(value: Any, budget: Budget) -> str:
    """How a value reads inside a larger string: ``null`` is empty, booleans are
    ``true``/``false``, numbers are plain digits, lists and objects are compact JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return int_text(value)
    if isinstance(value, Decimal):
        return decimal_text(value)
    if is_list(value) or isinstance(value, Mapping):
        return dumps(value, budget)
    raise eval_error(f"cannot convert a value of type {type_name(value)} to text")


class _Raw(str):
    """Punctuation queued on the encoder's stack, as opposed to a value to encode."""

    __slots__ = ()


_COMMA = _Raw(",")
_CLOSE_LIST = _Raw("]")
_CLOSE_OBJECT = _Raw("}")


def dumps(value: Any, budget: Budget) -> str:
    """Compact JSON of ``value``; decimals appear as exact numbers, keys keep their order."""
    parts: list[str] = []
    size = 0
    visited = 0
    # An explicit stack: a caller's context may nest deeper than Python's recursion
    # limit, and a cyclic one only ends when the output outgrows the string limit.
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        visited += 1
        if visited == 256:
            budget.charge_items(visited)
            visited = 0
        if isinstance(item, _Raw):
            text: str = item
        elif isinstance(item, str):
            text = json.dumps(item, ensure_ascii=False)
        elif item is None:
            text = "null"
        elif isinstance(item, bool):
            text = "true" if item else "false"
        elif isinstance(item, int):
            text = int_text(item)
        elif isinstance(item, Decimal):
            text = decimal_text(item)
        elif is_list(item):
            text = "["
            stack.append(_CLOSE_LIST)
            for position in range(len(item) - 1, -1, -1):
                stack.append(item[position])
                if position:
                    stack.append(_COMMA)
        elif isinstance(item, Mapping):
            text = "{"
            stack.append(_CLOSE_OBJECT)
            entries = list(item.items())
            for position in range(len(entries) - 1, -1, -1):
                key, entry = entries[position]
                if not isinstance(key, str):
                    raise eval_error(
                        f"cannot convert an object with a {type_name(key)} key to JSON"
                    )
                stack.append(entry)
                stack.append(
                    _Raw(("," if position else "") + json.dumps(key, ensure_ascii=False) + ":")
                )
        else:
            raise eval_error(f"cannot convert a value of type {type_name(item)} to JSON")
        parts.append(text)
        size += len(text)
        if size > MAX_STRING_LENGTH:
            raise limit_error(f"JSON text exceeds the limit of {MAX_STRING_LENGTH} characters")
    budget.charge_items(visited)
    return "".join(parts)


_MAX_INT_DIGITS = len(str(MAX_INT))


def loads(text: str, budget: Budget) -> Any:
    """Parse JSON text: integers stay ``int``, other numbers become ``Decimal``.

    The length and the bracket depth are checked before parsing, so that hostile input
    costs little and never reaches the parser's recursion.
    """
    if len(text) > MAX_JSON_LENGTH:
        raise limit_error(f"from_json() input exceeds the limit of {MAX_JSON_LENGTH} characters")
    _check_depth(text)
    budget.charge_bulk(len(text))
    try:
        value = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_decimal, parse_constant=_no_constant
        )
    except json.JSONDecodeError as exc:
        raise eval_error(
            f"from_json(): invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    # Fewer characters than this cannot spell a list over the limit.
    if len(text) > 2 * MAX_LIST_LENGTH:
        _check_lists(value, budget)
    return value


def _check_depth(text: str) -> None:
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return
    if nesting_depth(text) > MAX_JSON_DEPTH:
        raise limit_error(f"from_json() input nests deeper than {MAX_JSON_DEPTH} levels")


def _check_lists(value: Any, budget: Budget) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        budget.charge_items(1)
        if isinstance(item, list):
            check_list_length(len(item))
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > _MAX_INT_DIGITS:
        raise limit_error("from_json(): integer exceeds the limit of 2**1024")
    value = int(digits)
    if abs(value) > MAX_INT:
        raise limit_error("from_json(): integer exceeds the limit of 2**1024")
    return value


def _parse_decimal(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise eval_error(f"from_json(): invalid number {text[:40]}") from None
    if abs(value.adjusted()) > MAX_DECIMAL_EXPONENT:
        raise limit_error(f"from_json(): number exceeds the limit of 10**±{MAX_DECIMAL_EXPONENT}")
    return value


def _no_constant(name: str) -> Any:
    raise eval_error(f"from_json(): {name} is not a valid JSON number")
