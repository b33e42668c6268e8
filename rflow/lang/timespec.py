"""Cron expressions, time zones and instants, checked the way the scheduler will read them."""

from __future__ import annotations

import functools
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from rflow.lang.units import UnitError

CRON_MACRO_FIELDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""Each cron macro and the five fields it stands for."""

CRON_MACROS = frozenset(CRON_MACRO_FIELDS)


def parse_cron(expression: str) -> str:
    """``expression`` normalised to single spaces if it is a five-field cron or a macro.

    Six- and seven-field forms (seconds, years) are refused: the scheduler fires at
    minute granularity and a seconds field would silently be read as something else.
    """
    if not isinstance(expression, str):
        raise UnitError(f"expected a cron expression such as '0 * * * *', got {expression!r}")
    text = " ".join(expression.split())
    if text.startswith("@"):
        if text.lower() not in CRON_MACROS:
            raise UnitError(
                f"unknown cron macro {text!r}: use one of {', '.join(sorted(CRON_MACROS))}"
            )
        return text.lower()
    fields = text.split(" ")
    if len(fields) != 5:
        raise UnitError(
            f"cron expression {expression!r} has {len(fields)} fields; "
            "use five: minute hour day-of-month month day-of-week"
        )
    from croniter import croniter  # only projects with schedules pay for importing it

    if not croniter.is_valid(text):
        raise UnitError(f"cron expression {expression!r} does not parse: {_cron_problem(text)}")
    return text


def cron_fields(expression: str) -> str:
    """The five fields of a valid cron ``expression`` (a macro expanded), single-spaced:
    two expressions with the same fields fire at the same times."""
    text = parse_cron(expression)
    return CRON_MACRO_FIELDS.get(text, text)


_CRON_RANGES = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)


def _cron_problem(text: str) -> str:
    from croniter import croniter

    for index, ((name, low, high), field) in enumerate(
        zip(_CRON_RANGES, text.split(" "), strict=True)
    ):
        probe = ["*"] * 5
        probe[index] = field
        if not croniter.is_valid(" ".join(probe)):
            return f"the {name} field {field!r} is not valid (range {low}-{high})"
    return "the fields do not combine"


def parse_timezone(name: str) -> str:
    """``name`` if it is an IANA time zone such as ``UTC`` or ``Europe/Paris``."""
    if not isinstance(name, str) or not name:
        raise UnitError(f"expected a time zone such as 'UTC' or 'Europe/Paris', got {name!r}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        import difflib  # only a problem's message needs it

        close = difflib.get_close_matches(name, _zones(), n=1)
        hint = f" — did you mean {close[0]!r}?" if close else ""
        raise UnitError(f"unknown time zone {name!r}{hint}") from None
    return name


@functools.cache
def _zones() -> tuple[str, ...]:
    return tuple(sorted(available_timezones()))


def parse_instant(text: str) -> datetime:
    """An ISO 8601 date or date-time such as ``2025-01-31T09:00:00``."""
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise UnitError(
            f"expected an ISO 8601 date-time such as 2025-01-31T09:00:00, got {text!r}"
        ) from None
