"""What the operators do to values: member and index access, arithmetic, comparison."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal, DivisionByZero, InvalidOperation, Overflow
from typing import Any

from rflow.expr.errors import eval_error, limit_error
from rflow.expr.limits import (
    MAX_DECIMAL_EXPONENT,
    Budget,
    check_int,
    check_list_length,
    check_string_length,
)
from rflow.expr.values import (
    DECIMAL_CONTEXT,
    equal,
    finite,
    is_int,
    is_list,
    is_number,
    order,
    type_name,
)


def member(obj: Any, name: str) -> Any:
    """``obj.name``: a key of an object; ``null`` when the key or ``obj`` is missing."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    raise eval_error(f"cannot read member '{name}' of {type_name(obj)}")


def index(obj: Any, key: Any) -> Any:
    """``obj[key]``: a list or string position (negative counts from the end) or an
    object key; ``null`` when out of range, missing, or ``obj`` is null."""
    if obj is None:
        return None
    if is_list(obj) or isinstance(obj, str):
        if not is_int(key):
            raise eval_error(f"{type_name(obj)} index must be an int, got {type_name(key)}")
        return obj[key] if -len(obj) <= key < len(obj) else None
    if isinstance(obj, Mapping):
        if not isinstance(key, str):
            raise eval_error(f"object key must be a str, got {type_name(key)}")
        return obj.get(key)
    raise eval_error(f"cannot index {type_name(obj)}")


def negate(value: Any) -> Any:
    """``-value`` of a number."""
    if is_int(value):
        return -check_int(value)
    if isinstance(value, Decimal):
        return finite(value).copy_negate()
    raise eval_error(f"cannot negate {type_name(value)}")


def binary(op: str, left: Any, right: Any, budget: Budget) -> Any:
    """``left op right`` for every binary operator except the short-circuiting ones."""
    if op == "==":
        return equal(left, right, budget)
    if op == "!=":
        return not equal(left, right, budget)
    if op == "in":
        return contains(right, left, budget)
    if op == "not in":
        return not contains(right, left, budget)
    if op in ("<", "<=", ">", ">="):
        return order(op, left, right)
    return _ARITHMETIC[op](left, right, budget)


def contains(container: Any, item: Any, budget: Budget) -> bool:
    """``item in container``: a substring, a list element or an object key; never in null."""
    if container is None:
        return False
    if isinstance(container, str):
        if not isinstance(item, str):
            raise eval_error(f"cannot search for {type_name(item)} in a str")
        budget.charge_bulk(len(container))
        return item in container
    if is_list(container):
        if isinstance(item, str):
            # A string equals only an equal string, so Python's own scan agrees with ours.
            budget.charge_bulk(len(container))
            return item in container
        if item is None or isinstance(item, bool) or is_number(item):
            return _contains_scalar(container, item, budget)
        return any(equal(item, element, budget) for element in container)
    if isinstance(container, Mapping):
        return isinstance(item, str) and item in container
    raise eval_error(f"cannot search in {type_name(container)}")


def _contains_scalar(container: list[Any] | tuple[Any, ...], item: Any, budget: Budget) -> bool:
    """Membership of null, a bool or a number, without a function call per element."""
    budget.charge_items(len(container))
    if item is None or isinstance(item, bool):
        # null, true and false are singletons, and never equal to anything else.
        return any(element is item for element in container)
    if isinstance(item, Decimal) and not item.is_finite():
        return False
    for element in container:
        if (
            isinstance(element, int | Decimal)
            and not isinstance(element, bool)
            and (not isinstance(element, Decimal) or element.is_finite())
            and element == item
        ):
            return True
    return False


def add(left: Any, right: Any, budget: Budget) -> Any:
    """Numbers add, strings and lists concatenate."""
    if isinstance(left, str) and isinstance(right, str):
        check_string_length(len(left) + len(right))
        budget.charge_bulk(len(left) + len(right))
        return left + right
    if is_list(left) and is_list(right):
        check_list_length(len(left) + len(right))
        budget.charge_bulk(len(left) + len(right))
        return [*left, *right]
    return _arithmetic("add", left, right, lambda a, b: a + b, DECIMAL_CONTEXT.add)


def subtract(left: Any, right: Any, _budget: Budget) -> Any:
    """Numbers only."""
    return _arithmetic("subtract", left, right, lambda a, b: a - b, DECIMAL_CONTEXT.subtract)


def multiply(left: Any, right: Any, _budget: Budget) -> Any:
    """Numbers only; an oversized integer product is refused before it is computed."""
    if is_int(left) and is_int(right) and left.bit_length() + right.bit_length() > 1026:
        raise limit_error("integer exceeds the limit of 2**1024 in magnitude")
    return _arithmetic("multiply", left, right, lambda a, b: a * b, DECIMAL_CONTEXT.multiply)


def divide(left: Any, right: Any, _budget: Budget) -> Any:
    """An int when two ints divide exactly, else a decimal."""
    _check_divisor("divide", left, right)
    if is_int(left) and is_int(right):
        quotient, remainder = divmod(check_int(left), check_int(right))
        if remainder == 0:
            return quotient
    return _decimal_op(DECIMAL_CONTEXT.divide, left, right)


def floor_divide(left: Any, right: Any, _budget: Budget) -> int:
    """The floor of the quotient, always an int."""
    _check_divisor("divide", left, right)
    if is_int(left) and is_int(right):
        return check_int(check_int(left) // check_int(right))
    quotient, remainder = _decimal_op(DECIMAL_CONTEXT.divmod, left, right)
    # Decimal division truncates toward zero; floor division rounds toward -infinity.
    if remainder != 0 and (remainder < 0) != (right < 0):
        quotient = DECIMAL_CONTEXT.subtract(quotient, 1)
    return check_int(int(quotient))


def modulo(left: Any, right: Any, _budget: Budget) -> Any:
    """The remainder of :func:`floor_divide`; it takes the sign of the divisor."""
    _check_divisor("take the remainder of", left, right)
    if is_int(left) and is_int(right):
        return check_int(left) % check_int(right)
    remainder = _decimal_op(DECIMAL_CONTEXT.remainder, left, right)
    if remainder != 0 and (remainder < 0) != (right < 0):
        remainder = _decimal_op(DECIMAL_CONTEXT.add, remainder, right)
    return remainder


_ARITHMETIC: dict[str, Callable[[Any, Any, Budget], Any]] = {
    "+": add,
    "-": subtract,
    "*": multiply,
    "/": divide,
    "//": floor_divide,
    "%": modulo,
}


def _check_divisor(verb: str, left: Any, right: Any) -> None:
    if not (is_number(left) and is_number(right)):
        raise eval_error(f"cannot {verb} {type_name(left)} and {type_name(right)}")
    if right == 0:
        raise eval_error("division by zero")


def _arithmetic(
    verb: str,
    left: Any,
    right: Any,
    exact: Callable[[int, int], int],
    inexact: Callable[[Decimal, Decimal], Any],
) -> Any:
    if is_int(left) and is_int(right):
        return check_int(exact(check_int(left), check_int(right)))
    if is_number(left) and is_number(right):
        return _decimal_op(inexact, left, right)
    raise eval_error(f"cannot {verb} {type_name(left)} and {type_name(right)}")


def _decimal_op(operation: Callable[[Decimal, Decimal], Any], left: Any, right: Any) -> Any:
    operands = [
        Decimal(check_int(value)) if is_int(value) else finite(value) for value in (left, right)
    ]
    try:
        return operation(*operands)
    except Overflow:
        raise limit_error(
            f"decimal result exceeds the limit of 10**{MAX_DECIMAL_EXPONENT}"
        ) from None
    except DivisionByZero:
        raise eval_error("division by zero") from None
    except InvalidOperation:
        raise eval_error("decimal result is out of range") from None
