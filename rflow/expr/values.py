"""The value model: types, truthiness, equality, ordering and text of expression values.

Values are ``None``, ``bool``, ``int``, :class:`~decimal.Decimal`, ``str``, lists (or
tuples) and mappings with string keys. Floats never appear: JSON numbers with a fraction
become decimals and arithmetic stays exact or uses :data:`DECIMAL_CONTEXT`.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import (
    ROUND_HALF_EVEN,
    Context,
    Decimal,
    DivisionByZero,
    InvalidOperation,
    Overflow,
)
from typing import Any

from rflow.expr.errors import eval_error, limit_error
from rflow.expr.limits import DECIMAL_PRECISION, MAX_DECIMAL_EXPONENT, Budget, check_int

DECIMAL_CONTEXT = Context(
    prec=DECIMAL_PRECISION,
    rounding=ROUND_HALF_EVEN,
    Emax=MAX_DECIMAL_EXPONENT,
    Emin=-MAX_DECIMAL_EXPONENT,
    traps=[InvalidOperation, DivisionByZero, Overflow],
)
"""Every decimal operation names this context: the thread's ambient one could differ."""


def type_name(value: Any) -> str:
    """The name an error message uses for the type of ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, Decimal):
        return "decimal"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def is_int(value: Any) -> bool:
    """An integer that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An integer (not a bool) or a decimal."""
    return is_int(value) or isinstance(value, Decimal)


def is_list(value: Any) -> bool:
    """A list; tuples from the caller's context count as lists."""
    return isinstance(value, list | tuple)


def size_of(value: Any) -> int:
    """The length of a string, list or object, else 0: what scanning it costs."""
    if isinstance(value, str | list | tuple | Mapping):
        return len(value)
    return 0


def truthy(value: Any) -> bool:
    """``null``, ``false``, zero, ``''``, ``[]`` and ``{}`` are false; all else is true."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if is_number(value):
        return value != 0
    if isinstance(value, str | list | tuple | Mapping):
        return len(value) > 0
    return True


def finite(value: Decimal) -> Decimal:
    """``value`` if it is a finite decimal (a caller's context may hold NaN or Infinity)."""
    if not value.is_finite():
        raise eval_error(f"decimal value {value} is not a finite number")
    return value


def equal(left: Any, right: Any, budget: Budget) -> bool:
    """Structural equality: numbers by value, ``true`` never equal to ``1``, other types
    never equal to each other."""
    if not (is_list(left) or isinstance(left, Mapping)):
        # The common case, such as each step of a membership scan, needs no stack.
        budget.charge_items(1)
        return _scalar_equal(left, right)
    # An explicit stack: values from a caller's context may nest arbitrarily deep.
    stack = [(left, right)]
    pairs = 0
    try:
        while stack:
            a, b = stack.pop()
            pairs += 1
            if pairs == 256:
                budget.charge_items(pairs)
                pairs = 0
            if is_list(a) and is_list(b):
                if len(a) != len(b):
                    return False
                stack.extend(zip(a, b, strict=True))
            elif isinstance(a, Mapping) and isinstance(b, Mapping):
                if len(a) != len(b) or any(key not in b for key in a):
                    return False
                stack.extend((a[key], b[key]) for key in a)
            elif not _scalar_equal(a, b):
                return False
        return True
    finally:
        budget.charge_items(pairs)


def _scalar_equal(a: Any, b: Any) -> bool:
    """Equality when at most one side is a list or an object (which then differs)."""
    if a is None or b is None:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if is_number(a) and is_number(b):
        return _comparable(a) and _comparable(b) and a == b
    return a is b


def _comparable(number: int | Decimal) -> bool:
    return not isinstance(number, Decimal) or number.is_finite()


def order(op: str, left: Any, right: Any) -> bool:
    """``left op right`` for ``<``, ``<=``, ``>``, ``>=``: numbers with numbers (exactly,
    across int and decimal) and strings with strings."""
    if is_number(left) and is_number(right):
        for value in (left, right):
            if isinstance(value, Decimal):
                finite(value)
    elif not (isinstance(left, str) and isinstance(right, str)):
        raise eval_error(f"cannot compare {type_name(left)} and {type_name(right)}")
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    return left >= right


def int_text(value: int) -> str:
    """Decimal digits of ``value``, within the integer limit."""
    return str(check_int(value))


def decimal_text(value: Decimal) -> str:
    """``value`` as plain digits, never in exponent notation."""
    finite(value)
    if abs(value.adjusted()) > MAX_DECIMAL_EXPONENT:
        raise limit_error(f"decimal exceeds the limit of 10**±{MAX_DECIMAL_EXPONENT}")
    return format(value, "f")
