"""Exact conversions between text, integers and decimals, including token units."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from rflow.expr.errors import eval_error, limit_error
from rflow.expr.limits import MAX_INT, check_int
from rflow.expr.values import decimal_text, finite, is_int, type_name

MAX_UNIT_DECIMALS = 255
"""ERC-20 ``decimals()`` is a uint8."""

_MAX_DIGITS = len(str(MAX_INT))
_INT_TEXT = re.compile(r"\s*([+-]?)(?:0[xX]([0-9a-fA-F]+)|([0-9]+)(?:\.([0-9]*))?)\s*")
_DECIMAL_TEXT = re.compile(r"\s*([+-]?)([0-9]*)(?:\.([0-9]*))?\s*")


def to_int(value: Any) -> int:
    """An int from an int, a decimal without fraction, or decimal or ``0x`` hex text."""
    if is_int(value):
        return check_int(value)
    if isinstance(value, Decimal):
        finite(value)
        if value.adjusted() > _MAX_DIGITS:
            raise limit_error("int(): value exceeds the limit of 2**1024")
        number = int(value)
        if number != value:
            raise eval_error(f"int(): {decimal_text(value)} has a fractional part")
        return check_int(number)
    if isinstance(value, str):
        match = _INT_TEXT.fullmatch(value) if len(value) <= 2 * _MAX_DIGITS else None
        if match is None:
            raise eval_error(f"int(): {_show(value)} is not an integer")
        sign, hex_digits, digits, fraction = match.groups()
        if fraction and fraction.strip("0"):
            raise eval_error(f"int(): {_show(value)} has a fractional part")
        number = int(hex_digits, 16) if hex_digits else int(digits)
        return check_int(-number if sign == "-" else number)
    raise eval_error(f"int() cannot convert {type_name(value)}")


def to_decimal(value: Any) -> Decimal:
    """A decimal from an int, a decimal, or decimal text such as ``'-1.25'``."""
    if is_int(value):
        return Decimal(check_int(value))
    if isinstance(value, Decimal):
        return finite(value)
    if isinstance(value, str):
        sign, whole, fraction = _decimal_parts("decimal", value)
        return Decimal(f"{sign}{whole or '0'}.{fraction or '0'}")
    raise eval_error(f"decimal() cannot convert {type_name(value)}")


def parse_units(value: Any, decimals: Any) -> int:
    """``value`` whole tokens in base units: ``parse_units('1.5', 18)`` is 1.5 * 10**18,
    exactly; more fractional digits than ``decimals`` is an error, never rounded away."""
    scale = _unit_decimals("parse_units", decimals)
    if is_int(value):
        return check_int(check_int(value) * 10**scale)
    if isinstance(value, Decimal):
        value = decimal_text(value)
    if not isinstance(value, str):
        raise eval_error(
            f"parse_units() argument 1 must be a str or number, got {type_name(value)}"
        )
    sign, whole, fraction = _decimal_parts("parse_units", value)
    fraction = fraction.rstrip("0")
    if len(fraction) > scale:
        raise eval_error(f"parse_units(): {_show(value)} has more than {scale} decimal places")
    number = int(whole or "0") * 10**scale + int(fraction.ljust(scale, "0") or "0")
    return check_int(-number if sign == "-" else number)


def format_units(amount: Any, decimals: Any) -> str:
    """Base units as exact whole-token text: ``format_units(1500000000000000000, 18)`` is
    ``'1.5'``; trailing zeros are dropped, and so is the point of a whole amount."""
    scale = _unit_decimals("format_units", decimals)
    if not is_int(amount):
        raise eval_error(f"format_units() argument 1 must be an int, got {type_name(amount)}")
    whole, fraction = divmod(abs(check_int(amount)), 10**scale)
    sign = "-" if amount < 0 else ""
    fraction_text = str(fraction).zfill(scale).rstrip("0") if scale else ""
    return f"{sign}{whole}.{fraction_text}" if fraction_text else f"{sign}{whole}"


def _unit_decimals(function: str, decimals: Any) -> int:
    if not is_int(decimals) or not 0 <= decimals <= MAX_UNIT_DECIMALS:
        raise eval_error(
            f"{function}() argument 2 must be an int from 0 to {MAX_UNIT_DECIMALS}, "
            f"got {_show(decimals)}"
        )
    return int(decimals)


def _decimal_parts(function: str, text: str) -> tuple[str, str, str]:
    match = _DECIMAL_TEXT.fullmatch(text) if len(text) <= 4 * _MAX_DIGITS else None
    if match is None or not (match.group(2) or match.group(3)):
        raise eval_error(f"{function}(): {_show(text)} is not a decimal number")
    sign, whole, fraction = match.groups()
    if len(whole.lstrip("0")) > _MAX_DIGITS:
        raise limit_error(f"{function}(): value exceeds the limit of 2**1024")
    return sign, whole, fraction or ""


def _show(value: Any) -> str:
    """A short rendering of a bad argument for an error message."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:40]) + "..."
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if is_int(value) and abs(value) < 10**40:
        return str(value)
    return f"a {type_name(value)}"
