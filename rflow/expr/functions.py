"""The function registry: every function an expression may call, with its arity.

Each implementation takes the evaluation's :class:`~rflow.expr.limits.Budget` first and
then its arguments, checks them, and raises :class:`~rflow.expr.ExpressionError`
with a message naming the function; the evaluator adds the offset of the call.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from rflow.expr import conversions, jsontext
from rflow.expr.errors import ExpressionError, eval_error, limit_error
from rflow.expr.limits import (
    MAX_RANGE,
    MAX_STRING_LENGTH,
    Budget,
    check_int,
    check_list_length,
    check_string,
)
from rflow.expr.operators import add, contains
from rflow.expr.values import finite, is_int, is_list, is_number, order, type_name


@dataclass(frozen=True)
class Function:
    """One registered function: ``impl(budget, *args)`` and how many arguments it takes
    (``max_args`` is ``None`` when there is no upper bound)."""

    name: str
    impl: Callable[..., Any]
    min_args: int
    max_args: int | None
    summary: str
    examples: tuple[tuple[str, str], ...] = ()
    """``(call, result)`` pairs from the docstring's ``>>>`` lines, both written in the
    expression language (``docs/expressions.md`` lists them; a test evaluates them)."""

    def arity_problem(self, count: int) -> str | None:
        """Why ``count`` arguments do not fit, or ``None`` when they do."""
        if count >= self.min_args and (self.max_args is None or count <= self.max_args):
            return None
        if self.max_args is None:
            expected = f"at least {_arguments(self.min_args)}"
        elif self.min_args == self.max_args:
            expected = _arguments(self.min_args)
        else:
            expected = f"{self.min_args} to {self.max_args} arguments"
        return f"{self.name}() takes {expected}, got {count}"

    def __call__(self, *args: Any, budget: Budget | None = None) -> Any:
        """Call the function outside an expression, with a fresh budget unless given."""
        return self.impl(budget if budget is not None else Budget(), *args)


def _arguments(count: int) -> str:
    return f"{count} argument" if count == 1 else f"{count} arguments"


_REGISTRY: dict[str, Function] = {}

FUNCTIONS: Mapping[str, Function] = MappingProxyType(_REGISTRY)
"""Every function an expression may call, by name."""


def _function(
    name: str, min_args: int, max_args: int | None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(impl: Callable[..., Any]) -> Callable[..., Any]:
        lines = [line.strip() for line in (impl.__doc__ or "").strip().splitlines()]
        examples = tuple(
            (line[4:], result)
            for line, result in itertools.pairwise(lines)
            if line.startswith(">>> ")
        )
        _REGISTRY[name] = Function(name, impl, min_args, max_args, lines[0], examples)
        return impl

    return register


def _wrong(function: str, position: int, wanted: str, value: Any) -> ExpressionError:
    return eval_error(f"{function}() argument {position} must be {wanted}, got {type_name(value)}")


def _str_arg(function: str, position: int, value: Any) -> str:
    if not isinstance(value, str):
        raise _wrong(function, position, "a str", value)
    return value


def _int_arg(function: str, position: int, value: Any) -> int:
    if not is_int(value):
        raise _wrong(function, position, "an int", value)
    return check_int(value)


def _list_arg(function: str, position: int, value: Any) -> list[Any] | tuple[Any, ...]:
    if not is_list(value):
        raise _wrong(function, position, "a list", value)
    return value


def _object_arg(function: str, position: int, value: Any) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise _wrong(function, position, "an object", value)
    return value


@_function("from_json", 1, 1)
def _from_json(budget: Budget, text: Any) -> Any:
    """Parse JSON text; integers stay exact ints, other numbers become decimals.

    >>> from_json('{"a": [1, 2.5]}')
    {a: [1, 2.5]}
    """
    return jsontext.loads(_str_arg("from_json", 1, text), budget)


@_function("to_json", 1, 1)
def _to_json(budget: Budget, value: Any) -> str:
    """Compact JSON text of a value; decimals are written as exact numbers.

    >>> to_json({a: 1, b: [true, null]})
    '{"a":1,"b":[true,null]}'
    """
    return jsontext.dumps(value, budget)


@_function("length", 1, 1)
def _length(_budget: Budget, value: Any) -> int:
    """The number of characters, items or keys of a string, list or object.

    >>> length([1, 2, 3])
    3
    >>> length('abc')
    3
    """
    if isinstance(value, str | list | tuple | Mapping):
        return len(value)
    raise _wrong("length", 1, "a str, list or object", value)


@_function("lower", 1, 1)
def _lower(_budget: Budget, text: Any) -> str:
    """The string in lower case.

    >>> lower('USDC')
    'usdc'
    """
    return check_string(_str_arg("lower", 1, text).lower())


@_function("upper", 1, 1)
def _upper(_budget: Budget, text: Any) -> str:
    """The string in upper case.

    >>> upper('usdc')
    'USDC'
    """
    return check_string(_str_arg("upper", 1, text).upper())


@_function("trim", 1, 1)
def _trim(_budget: Budget, text: Any) -> str:
    """The string without leading and trailing whitespace.

    >>> trim('  hi ')
    'hi'
    """
    return _str_arg("trim", 1, text).strip()


@_function("contains", 2, 2)
def _contains(budget: Budget, haystack: Any, needle: Any) -> bool:
    """Whether a string contains a substring or a list contains an item; false for null.

    >>> contains('payout-7', 'out')
    true
    >>> contains([1, 2], 3)
    false
    """
    return contains(haystack, needle, budget)


@_function("starts_with", 2, 2)
def _starts_with(_budget: Budget, text: Any, prefix: Any) -> bool:
    """Whether the string starts with the prefix.

    >>> starts_with('0xabc', '0x')
    true
    """
    return _str_arg("starts_with", 1, text).startswith(_str_arg("starts_with", 2, prefix))


@_function("ends_with", 2, 2)
def _ends_with(_budget: Budget, text: Any, suffix: Any) -> bool:
    """Whether the string ends with the suffix.

    >>> ends_with('report.csv', '.csv')
    true
    """
    return _str_arg("ends_with", 1, text).endswith(_str_arg("ends_with", 2, suffix))


_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([0-9]{1,4})\}|[{}]")


@_function("format", 1, None)
def _format(budget: Budget, template: Any, *args: Any) -> str:
    """``format('{0} sent {1}', a, b)``: numbered placeholders; ``{{`` and ``}}`` escape.

    >>> format('{0} sent {1} wei', 'alice', 5)
    'alice sent 5 wei'
    """
    template = _str_arg("format", 1, template)
    size = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal size
        budget.charge_items(1)
        token = match.group()
        if token in ("{{", "}}"):
            text = token[0]
        elif match.group(1) is not None:
            position = int(match.group(1))
            if position >= len(args):
                raise eval_error(
                    f"format(): placeholder {token} has no argument "
                    f"({_arguments(len(args))} given after the format string)"
                )
            text = jsontext.to_text(args[position], budget)
        else:
            raise eval_error(
                f"format(): unmatched '{token}' at position {match.start()} of the format string"
                " (write '{{' or '}}' for a literal brace)"
            )
        size += len(text)
        if size > MAX_STRING_LENGTH:
            raise limit_error(f"string exceeds the limit of {MAX_STRING_LENGTH} characters")
        return text

    return check_string(_PLACEHOLDER.sub(replace, template))


@_function("join", 1, 2)
def _join(budget: Budget, items: Any, separator: Any = ",") -> str:
    """The items as text, joined by the separator (default ``','``).

    >>> join(['a', 'b', 'c'], ' / ')
    'a / b / c'
    >>> join([1, 2])
    '1,2'
    """
    items = _list_arg("join", 1, items)
    separator = _str_arg("join", 2, separator)
    budget.charge_items(len(items))
    parts: list[str] = []
    size = 0
    for item in items:
        parts.append(jsontext.to_text(item, budget))
        size += len(parts[-1]) + len(separator)
        if size > MAX_STRING_LENGTH + len(separator):
            raise limit_error(f"string exceeds the limit of {MAX_STRING_LENGTH} characters")
    return separator.join(parts)


@_function("split", 2, 2)
def _split(_budget: Budget, text: Any, separator: Any) -> list[str]:
    """The parts of the string between occurrences of the (non-empty) separator.

    >>> split('a,b,c', ',')
    ['a', 'b', 'c']
    """
    text = _str_arg("split", 1, text)
    separator = _str_arg("split", 2, separator)
    if not separator:
        raise eval_error("split() separator must not be empty")
    check_list_length(text.count(separator) + 1)
    return text.split(separator)


@_function("keys", 1, 1)
def _keys(_budget: Budget, obj: Any) -> list[Any]:
    """The keys of an object, in order.

    >>> keys({a: 1, b: 2})
    ['a', 'b']
    """
    return list(_object_arg("keys", 1, obj).keys())


@_function("values", 1, 1)
def _values(_budget: Budget, obj: Any) -> list[Any]:
    """The values of an object, in key order.

    >>> values({a: 1, b: 2})
    [1, 2]
    """
    return list(_object_arg("values", 1, obj).values())


@_function("default", 2, 2)
def _default(_budget: Budget, value: Any, fallback: Any) -> Any:
    """The value, or the fallback when the value is null.

    >>> default(null, 'none')
    'none'
    >>> default(0, 5)
    0
    """
    return fallback if value is None else value


@_function("int", 1, 1)
def _int(_budget: Budget, value: Any) -> int:
    """An int from an int, a decimal without fraction, or decimal or 0x-hex text.

    >>> int('0x1a')
    26
    >>> int('42')
    42
    >>> int(2.0)
    2
    """
    return conversions.to_int(value)


@_function("str", 1, 1)
def _str(budget: Budget, value: Any) -> str:
    """The value as text, as a template would render it.

    >>> str(42)
    '42'
    >>> str([1, 'a'])
    '[1,"a"]'
    """
    return jsontext.to_text(value, budget)


@_function("decimal", 1, 1)
def _decimal(_budget: Budget, value: Any) -> Decimal:
    """A decimal from an int, a decimal or decimal text.

    >>> decimal('1.25') * 2
    2.50
    """
    return conversions.to_decimal(value)


def _extreme(function: str, budget: Budget, args: tuple[Any, ...], op: str) -> Any:
    items = _list_arg(function, 1, args[0]) if len(args) == 1 else args
    if not items:
        raise eval_error(f"{function}() of an empty list")
    budget.charge_items(len(items))
    best = items[0]
    for item in items[1:]:
        if order(op, item, best):
            best = item
    return best


@_function("min", 1, None)
def _min(budget: Budget, *args: Any) -> Any:
    """The smallest of the arguments, or of the items of a single list argument.

    >>> min(3, 1, 2)
    1
    >>> min([5, 4])
    4
    """
    return _extreme("min", budget, args, "<")


@_function("max", 1, None)
def _max(budget: Budget, *args: Any) -> Any:
    """The largest of the arguments, or of the items of a single list argument.

    >>> max(3, 1, 2)
    3
    >>> max([5, 4])
    5
    """
    return _extreme("max", budget, args, ">")


@_function("abs", 1, 1)
def _abs(_budget: Budget, value: Any) -> int | Decimal:
    """The magnitude of a number.

    >>> abs(-7)
    7
    """
    if is_int(value):
        return abs(check_int(value))
    if isinstance(value, Decimal):
        return finite(value).copy_abs()
    raise _wrong("abs", 1, "a number", value)


@_function("sum", 1, 1)
def _sum(budget: Budget, items: Any) -> int | Decimal:
    """The sum of a list of numbers (0 for an empty list).

    >>> sum([1, 2, 3])
    6
    >>> sum([])
    0
    """
    items = _list_arg("sum", 1, items)
    budget.charge_items(len(items))
    total: int | Decimal = 0
    for item in items:
        if not is_number(item):
            raise eval_error(f"sum() items must be numbers, got {type_name(item)}")
        total = add(total, item, budget)
    return total


@_function("range", 1, 2)
def _range(_budget: Budget, first: Any, second: Any = None) -> list[int]:
    """``range(n)`` is 0 to n-1, ``range(a, b)`` is a to b-1; at most 10000 items.

    >>> range(3)
    [0, 1, 2]
    >>> range(2, 4)
    [2, 3]
    """
    if second is None:
        start, stop = 0, _int_arg("range", 1, first)
    else:
        start, stop = _int_arg("range", 1, first), _int_arg("range", 2, second)
    if stop - start > MAX_RANGE:
        raise limit_error(f"range() of more than {MAX_RANGE} items")
    return list(range(start, stop))


@_function("is_empty", 1, 1)
def _is_empty(_budget: Budget, value: Any) -> bool:
    """True for null and for an empty string, list or object.

    >>> is_empty([])
    true
    >>> is_empty(null)
    true
    >>> is_empty(' ')
    false
    """
    return value is None or (isinstance(value, str | list | tuple | Mapping) and not value)


@_function("is_not_empty", 1, 1)
def _is_not_empty(budget: Budget, value: Any) -> bool:
    """The negation of ``is_empty``.

    >>> is_not_empty('x')
    true
    """
    return not _is_empty(budget, value)


@_function("parse_units", 2, 2)
def _parse_units(_budget: Budget, value: Any, decimals: Any) -> int:
    """Whole tokens to base units, exactly: ``parse_units('1.5', 18)``.

    >>> parse_units('1.5', 18)
    1500000000000000000
    """
    return conversions.parse_units(value, decimals)


@_function("format_units", 2, 2)
def _format_units(_budget: Budget, amount: Any, decimals: Any) -> str:
    """Base units to exact whole-token text: ``format_units(wei, 18)``.

    >>> format_units(1500000, 6)
    '1.5'
    """
    return conversions.format_units(amount, decimals)
