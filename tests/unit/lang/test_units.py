"""Amounts, durations, cron expressions and time zones."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rflow.lang.timespec import parse_cron, parse_instant, parse_timezone
from rflow.lang.units import (
    UnitError,
    format_amount,
    format_duration,
    parse_amount,
    parse_duration,
    parse_token_amount,
)

ETHER = 10**18


@pytest.mark.parametrize(
    ("text", "wei"),
    [
        ("1 ether", ETHER),
        ("0.5 ether", ETHER // 2),
        ("10 gwei", 10 * 10**9),
        ("1000 wei", 1000),
        ("1.5ETH", 3 * ETHER // 2),
        ("0.000000001 ether", 10**9),
        (1000, 1000),
        ("1000000", 1_000_000),
        ("1_000_000", 1_000_000),
        (
            "115792089237316195423570985008687907853269984665640564039457584007913129639935",
            2**256 - 1,
        ),
    ],
)
def test_amounts_parse_to_exact_integers(text: str | int, wei: int) -> None:
    assert parse_amount(text) == wei
    assert type(parse_amount(text)) is int


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1e18, "got the floating-point number 1e+18; floats are not exact"),
        ("1e18", "expected an amount such as 1 ether, 10 gwei or 1000, got '1e18'"),
        ("0.0000000001 gwei", "'0.0000000001 gwei' is not a whole number of wei"),
        ("1.5", "'1.5' has a fraction but no unit: write e.g. '1.5 ether'"),
        ("1 dollar", "unknown unit 'dollar' in '1 dollar'"),
        ("-1 ether", "an amount cannot be negative, got '-1 ether'"),
        (-5, "an amount cannot be negative, got -5"),
        (True, "expected an amount such as 1 ether, 10 gwei or 1000, got true"),
        (str(2**256), "does not fit in 256 bits"),
    ],
)
def test_amounts_that_do_not_parse(value: object, message: str) -> None:
    with pytest.raises(UnitError) as caught:
        parse_amount(value)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_token_amounts_are_raw_units_only() -> None:
    assert parse_token_amount("1000000") == 1_000_000
    assert parse_token_amount(42) == 42
    with pytest.raises(UnitError, match="raw token amount"):
        parse_token_amount("1 ether")
    with pytest.raises(UnitError, match="floats are not exact"):
        parse_token_amount(1.0)


@pytest.mark.parametrize(
    ("wei", "text"),
    [
        (ETHER, "1 ether"),
        (ETHER // 2, "0.5 ether"),
        (10 * 10**9, "10 gwei"),
        (7, "7 wei"),
        (0, "0 wei"),
    ],
)
def test_format_amount(wei: int, text: str) -> None:
    assert format_amount(wei) == text
    assert parse_amount(text) == wei


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10s", timedelta(seconds=10)),
        ("10m", timedelta(minutes=10)),
        ("1h", timedelta(hours=1)),
        ("24h", timedelta(hours=24)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        ("500ms", timedelta(milliseconds=500)),
        ("30 seconds", timedelta(seconds=30)),
        ("2 hours", timedelta(hours=2)),
        ("1 minute", timedelta(minutes=1)),
        ("1h30m", timedelta(minutes=90)),
        ("1 hour, 30 minutes", timedelta(minutes=90)),
        ("1.5h", timedelta(minutes=90)),
        (timedelta(seconds=3), timedelta(seconds=3)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("10", "duration '10' has no unit: write e.g. 10s or 10m"),
        (10, "got 10: add a unit"),
        ("soon", "expected a duration such as 10s, 5m, 1h or '30 seconds', got 'soon'"),
        ("10 parsecs", "unknown unit 'parsecs' in duration '10 parsecs'"),
        ("0.5ms", "is not a whole number of milliseconds"),
        ("", "got ''"),
    ],
)
def test_durations_that_do_not_parse(value: object, message: str) -> None:
    with pytest.raises(UnitError) as caught:
        parse_duration(value)  # type: ignore[arg-type]
    assert message in str(caught.value)


@pytest.mark.parametrize("text", ["500ms", "10s", "1h30m", "1d", "2d3h4m5s6ms"])
def test_format_duration_round_trips(text: str) -> None:
    assert format_duration(parse_duration(text)) == text


@pytest.mark.parametrize(
    "text", ["0 * * * *", "*/5 9-17 * * mon-fri", "@hourly", "@DAILY", "0  9 * * 1"]
)
def test_cron_accepts_five_fields_and_macros(text: str) -> None:
    assert parse_cron(text) in (" ".join(text.split()), text.lower())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("61 * * * *", "the minute field '61' is not valid (range 0-59)"),
        ("0 25 * * *", "the hour field '25' is not valid (range 0-23)"),
        ("* * * *", "has 4 fields; use five: minute hour day-of-month month day-of-week"),
        ("0 0 * * * *", "has 6 fields"),
        ("@fortnightly", "unknown cron macro '@fortnightly'"),
    ],
)
def test_cron_errors(text: str, message: str) -> None:
    with pytest.raises(UnitError) as caught:
        parse_cron(text)
    assert message in str(caught.value)


def test_time_zones() -> None:
    assert parse_timezone("Europe/Paris") == "Europe/Paris"
    with pytest.raises(
        UnitError, match=r"unknown time zone 'Europe/Pari' — did you mean 'Europe/Paris'\?"
    ):
        parse_timezone("Europe/Pari")


def test_instants() -> None:
    assert parse_instant("2025-01-31T09:00:00").hour == 9
    with pytest.raises(UnitError, match="ISO 8601"):
        parse_instant("next tuesday")
