"""Exact amounts of money and durations, parsed from the forms people write in YAML.

Amounts are integers of the smallest unit (wei for native value, the token's own raw
units for ERC20): ``1 ether``, ``0.5 ether``, ``10 gwei``, ``1000 wei``, a plain integer or
an integer string such as ``"1000000"``. Floats and scientific notation are refused even
when integral: ``1e18`` is a float in YAML, and a float near money is a bug waiting for a
value that is not exactly representable. A fractional number with a unit is accepted only
when it is a whole number of wei (``0.5 gwei`` yes, ``0.0000000001 gwei`` no).

Durations are ``10s``, ``10m``, ``1h``, ``24h``, ``7d``, ``500ms``, ``1h30m``, ``30 seconds``,
``2 hours``, ``1 minute``: one or more number-unit pairs, giving a ``timedelta`` that is a
whole number of milliseconds. A bare number is refused because its unit would be a guess.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation

MAX_UINT256 = 2**256 - 1

ETHER_UNITS: dict[str, int] = {
    "wei": 0,
    "kwei": 3,
    "babbage": 3,
    "mwei": 6,
    "lovelace": 6,
    "gwei": 9,
    "shannon": 9,
    "szabo": 12,
    "microether": 12,
    "finney": 15,
    "milliether": 15,
    "ether": 18,
    "eth": 18,
}
"""Denominations of the native currency and their power of ten in wei."""

_AMOUNT = re.compile(r"(?P<number>[0-9][0-9_]*(?:\.[0-9][0-9_]*)?)\s*(?P<unit>[A-Za-z]+)?")
_INTEGER = re.compile(r"[0-9][0-9_]*")


class UnitError(ValueError):
    """A value that does not parse as an amount or a duration; the message is for a person."""


def _reject_non_text(value: object, what: str, example: str) -> None:
    if isinstance(value, bool):
        raise UnitError(f"expected {what} such as {example}, got {str(value).lower()}")
    if isinstance(value, float):
        raise UnitError(
            f"expected {what} such as {example}, got the floating-point number {value!r}; "
            "floats are not exact, write it as text with a unit or as an integer"
        )


def parse_amount(value: int | str) -> int:
    """Native value in wei from an integer, an integer string or ``<number> <unit>``."""
    _reject_non_text(value, "an amount", "1 ether, 10 gwei or 1000")
    if isinstance(value, int):
        return _in_range(value, str(value))
    if not isinstance(value, str):
        raise UnitError(f"expected an amount such as 1 ether, 10 gwei or 1000, got {_kind(value)}")
    text = value.strip()
    match = _AMOUNT.fullmatch(text)
    if match is None and text.startswith("-"):
        raise UnitError(f"an amount cannot be negative, got {value!r}")
    if match is None:
        raise UnitError(f"expected an amount such as 1 ether, 10 gwei or 1000, got {value!r}")
    number, unit = match["number"], match["unit"]
    if unit is None:
        if "." in number:
            raise UnitError(f"{value!r} has a fraction but no unit: write e.g. '{number} ether'")
        return _in_range(int(number.replace("_", "")), value)
    decimals = ETHER_UNITS.get(unit.lower())
    if decimals is None:
        known = ", ".join(sorted(set(ETHER_UNITS) - {"babbage", "lovelace", "shannon"}))
        raise UnitError(f"unknown unit {unit!r} in {value!r}: use one of {known}")
    try:
        wei = Decimal(number.replace("_", "")).scaleb(decimals)
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        raise UnitError(f"expected an amount, got {value!r}") from None
    if wei != wei.to_integral_value():
        raise UnitError(f"{value!r} is not a whole number of wei")
    return _in_range(int(wei), value)


def parse_token_amount(value: int | str) -> int:
    """An ERC20 amount in the token's raw units: an integer or an integer string."""
    _reject_non_text(value, "a raw token amount", '"1000000"')
    if isinstance(value, int):
        return _in_range(value, str(value))
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return _in_range(int(value.strip().replace("_", "")), value)
    raise UnitError(
        f"expected a raw token amount (an integer in the token's own decimals, "
        f'such as "1000000"), got {value!r}'
    )


def _in_range(amount: int, text: str) -> int:
    if amount < 0:
        raise UnitError(f"an amount cannot be negative, got {text}")
    if amount > MAX_UINT256:
        raise UnitError(f"{text} does not fit in 256 bits")
    return amount


def format_amount(wei: int) -> str:
    """An exact, readable rendering of ``wei``: ``1 ether``, ``0.5 ether``, ``10 gwei``, ``7 wei``."""
    if wei and wei % 10**14 == 0:
        return f"{format(Decimal(wei).scaleb(-18).normalize(), 'f')} ether"
    if wei and wei % 10**9 == 0:
        return f"{wei // 10**9} gwei"
    return f"{wei} wei"


_DURATION_UNITS: dict[str, int] = {}
for _names, _ms in (
    (("ms", "msec", "msecs", "millisecond", "milliseconds"), 1),
    (("s", "sec", "secs", "second", "seconds"), 1000),
    (("m", "min", "mins", "minute", "minutes"), 60_000),
    (("h", "hr", "hrs", "hour", "hours"), 3_600_000),
    (("d", "day", "days"), 86_400_000),
    (("w", "week", "weeks"), 604_800_000),
):
    for _name in _names:
        _DURATION_UNITS[_name] = _ms

_DURATION_PART = re.compile(r"\s*(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[A-Za-z]+)")
DURATION_PATTERN = r"^\s*([0-9]+(\.[0-9]+)?\s*[A-Za-z]+\s*)+$"
"""A regular expression for the JSON Schema; :func:`parse_duration` is the authority."""


def parse_duration(value: str | timedelta) -> timedelta:
    """A duration from ``10s``, ``1h30m``, ``2 hours`` and the like (or a ``timedelta``)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float):  # bool included
        raise UnitError(f"expected a duration such as 10s, 5m or 1h, got {value!r}: add a unit")
    if not isinstance(value, str):
        raise UnitError(f"expected a duration such as 10s, 5m or 1h, got {_kind(value)}")
    text = value.strip()
    pos, total = 0, Decimal(0)
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None:
            break
        unit = _DURATION_UNITS.get(match["unit"].lower())
        if unit is None:
            raise UnitError(
                f"unknown unit {match['unit']!r} in duration {value!r}: use ms, s, m, h, d or w"
            )
        total += Decimal(match["number"]) * unit
        pos = match.end()
        while pos < len(text) and text[pos] in " ,":
            pos += 1
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        raise UnitError(f"duration {value!r} has no unit: write e.g. {text}s or {text}m")
    if not text or pos != len(text):
        raise UnitError(f"expected a duration such as 10s, 5m, 1h or '30 seconds', got {value!r}")
    if total != total.to_integral_value():
        raise UnitError(f"duration {value!r} is not a whole number of milliseconds")
    return timedelta(milliseconds=int(total))


def format_duration(duration: timedelta) -> str:
    """``duration`` in the compact form :func:`parse_duration` reads: ``1h30m``, ``500ms``."""
    ms = duration // timedelta(milliseconds=1)
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)
