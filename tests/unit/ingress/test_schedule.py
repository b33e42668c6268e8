"""Cron schedules in time zones: fire times across DST changes, the missed-fire policy, keys."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from rflow.ingress.schedule import Due, due, fire_key, fire_times, next_fire, parse, payload
from rflow.lang.units import UnitError

PARIS = "Europe/Paris"
NEW_YORK = "America/New_York"
LORD_HOWE = "Australia/Lord_Howe"  # half-hour DST shifts


def local(zone: str, *fields: int, fold: int = 0) -> datetime:
    return datetime(*fields, tzinfo=ZoneInfo(zone), fold=fold)


def utc(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)


def instants(fires: list[datetime]) -> list[datetime]:
    # Same-zone datetimes compare by wall time (PEP 495): compare instants in UTC.
    return [fire.astimezone(UTC) for fire in fires]


def isoformats(fires: list[datetime]) -> list[str]:
    return [fire.isoformat() for fire in fires]


def test_every_minute_is_strictly_after_and_up_to_including_until():
    fires = fire_times("* * * * *", "UTC", utc(2026, 1, 1, 0, 0, 30), utc(2026, 1, 1, 0, 3))
    assert instants(fires) == [utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 2), utc(2026, 1, 1, 0, 3)]
    assert fire_times("* * * * *", "UTC", utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 1)) == []


def test_results_are_in_the_schedule_zone_whatever_the_bounds_zone():
    fires = fire_times("0 9 * * *", PARIS, utc(2026, 1, 5), local(NEW_YORK, 2026, 1, 6))
    assert isoformats(fires) == ["2026-01-05T09:00:00+01:00"]
    assert fires[0].tzinfo == ZoneInfo(PARIS)


def test_daily_at_nine_in_paris_across_the_spring_forward_change():
    fires = fire_times("0 9 * * *", PARIS, utc(2026, 3, 27, 12), utc(2026, 3, 31, 12))
    assert isoformats(fires) == [
        "2026-03-28T09:00:00+01:00",
        "2026-03-29T09:00:00+02:00",
        "2026-03-30T09:00:00+02:00",
        "2026-03-31T09:00:00+02:00",
    ]
    # One fire on the day of the change (croniter alone, zone-aware, gives two).
    assert instants(fires)[:2] == [utc(2026, 3, 28, 8), utc(2026, 3, 29, 7)]


def test_daily_at_nine_in_paris_across_the_fall_back_change():
    fires = fire_times("0 9 * * *", PARIS, utc(2026, 10, 23, 12), utc(2026, 10, 27, 12))
    assert isoformats(fires) == [
        "2026-10-24T09:00:00+02:00",
        "2026-10-25T09:00:00+01:00",
        "2026-10-26T09:00:00+01:00",
        "2026-10-27T09:00:00+01:00",
    ]


def test_half_past_two_in_paris_on_the_european_spring_forward_day():
    # Clocks jump 02:00 -> 03:00: 02:30 does not exist and fires at 03:00.
    fires = fire_times("30 2 * * *", PARIS, utc(2026, 3, 28), utc(2026, 3, 30, 12))
    assert isoformats(fires) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]


def test_half_past_two_in_new_york_on_the_us_spring_forward_day():
    fires = fire_times("30 2 * * *", NEW_YORK, utc(2026, 3, 6, 12), utc(2026, 3, 10, 12))
    assert isoformats(fires) == [
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]
    assert instants(fires)[1] == utc(2026, 3, 8, 7)


def test_half_past_one_in_new_york_on_the_us_fall_back_day_fires_once():
    fires = fire_times("30 1 * * *", NEW_YORK, utc(2026, 10, 30, 12), utc(2026, 11, 3, 12))
    assert isoformats(fires) == [
        "2026-10-31T01:30:00-04:00",
        "2026-11-01T01:30:00-04:00",  # the first of the two 01:30s
        "2026-11-02T01:30:00-05:00",
        "2026-11-03T01:30:00-05:00",
    ]


def test_wall_times_moved_onto_the_same_instant_fire_once():
    fires = fire_times("0,30 2 * * *", PARIS, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12))
    assert isoformats(fires) == ["2026-03-29T03:00:00+02:00"]
    fires = fire_times("30 2,3 * * *", PARIS, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12))
    assert isoformats(fires) == ["2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"]


def test_midnight_skipped_by_a_change_at_midnight_fires_at_one():
    # Brazil moved clocks from 00:00 to 01:00 on 4 November 2018.
    fires = fire_times("@daily", "America/Sao_Paulo", utc(2018, 11, 3, 12), utc(2018, 11, 5, 12))
    assert isoformats(fires) == ["2018-11-04T01:00:00-02:00", "2018-11-05T00:00:00-02:00"]


def test_every_fifteen_minutes_keeps_its_cadence_through_the_repeated_hour():
    fires = fire_times(
        "*/15 * * * *",
        NEW_YORK,
        local(NEW_YORK, 2026, 11, 1, 0, 50),
        local(NEW_YORK, 2026, 11, 1, 2, 0),
    )
    assert isoformats(fires) == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:15:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:45:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:15:00-05:00",
        "2026-11-01T01:30:00-05:00",
        "2026-11-01T01:45:00-05:00",
        "2026-11-01T02:00:00-05:00",
    ]
    times = instants(fires)
    assert all(b - a == timedelta(minutes=15) for a, b in pairwise(times))
    assert [fire.fold for fire in fires[4:8]] == [1, 1, 1, 1]


def test_every_fifteen_minutes_skips_the_wall_times_that_do_not_exist():
    fires = fire_times(
        "*/15 * * * *",
        NEW_YORK,
        local(NEW_YORK, 2026, 3, 8, 1, 40),
        local(NEW_YORK, 2026, 3, 8, 3, 20),
    )
    assert isoformats(fires) == [
        "2026-03-08T01:45:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:15:00-04:00",
    ]


def test_a_wildcard_hour_follows_real_time_in_the_gap():
    # An interval schedule does not move 02:30 to 03:00: there is no such instant.
    fires = fire_times("30 * * * *", PARIS, utc(2026, 3, 28, 23, 45), utc(2026, 3, 29, 2, 0))
    assert isoformats(fires) == [
        "2026-03-29T01:30:00+01:00",
        "2026-03-29T03:30:00+02:00",
    ]


@pytest.mark.parametrize(
    ("after", "until", "expected"),
    [
        (
            local(NEW_YORK, 2026, 11, 1, 0, 30),
            local(NEW_YORK, 2026, 11, 1, 3, 30),
            [
                "2026-11-01T01:00:00-04:00",
                "2026-11-01T01:00:00-05:00",
                "2026-11-01T02:00:00-05:00",
                "2026-11-01T03:00:00-05:00",
            ],
        ),
        (
            local(NEW_YORK, 2026, 3, 8, 0, 30),
            local(NEW_YORK, 2026, 3, 8, 4, 30),
            ["2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"],
        ),
    ],
)
def test_hourly_fires_on_every_real_hour(after, until, expected):
    fires = fire_times("@hourly", NEW_YORK, after, until)
    assert isoformats(fires) == expected
    times = instants(fires)
    assert all(b - a == timedelta(hours=1) for a, b in pairwise(times))


def test_half_hour_shifts_in_lord_howe():
    # 5 Apr 2026: 02:00 -> 01:30 (01:30-01:59 twice); 4 Oct 2026: 02:00 -> 02:30.
    fall = fire_times("45 1 * * *", LORD_HOWE, utc(2026, 4, 4, 0), utc(2026, 4, 5, 0))
    assert isoformats(fall) == ["2026-04-05T01:45:00+11:00"]
    spring = fire_times("15 2 * * *", LORD_HOWE, utc(2026, 10, 3, 0), utc(2026, 10, 4, 0))
    assert isoformats(spring) == ["2026-10-04T02:30:00+11:00"]


def test_weekdays_at_nine_in_paris():
    # Monday 23 to Sunday 29 March 2026, the week of the change.
    fires = fire_times("0 9 * * mon-fri", PARIS, utc(2026, 3, 22), utc(2026, 3, 30))
    assert [fire.strftime("%a %d %H:%M%z") for fire in fires] == [
        "Mon 23 09:00+0100",
        "Tue 24 09:00+0100",
        "Wed 25 09:00+0100",
        "Thu 26 09:00+0100",
        "Fri 27 09:00+0100",
    ]
    assert fire_times("0 9 * * 1-5", PARIS, utc(2026, 3, 22), utc(2026, 3, 30)) == fires


@pytest.mark.parametrize("sunday", ["0", "7", "sun"])
def test_sunday_has_three_spellings(sunday):
    fires = fire_times(f"0 9 * * {sunday}", PARIS, utc(2026, 3, 22, 12), utc(2026, 4, 6))
    assert isoformats(fires) == ["2026-03-29T09:00:00+02:00", "2026-04-05T09:00:00+02:00"]


def test_day_of_month_and_day_of_week_combine_as_either():
    # As in Vixie cron: the 13th of the month, and every Friday.
    fires = fire_times("0 12 13 * fri", "UTC", utc(2026, 3, 1), utc(2026, 3, 31))
    assert [fire.day for fire in fires] == [6, 13, 20, 27]
    fires = fire_times("0 12 13 * *", "UTC", utc(2026, 3, 1), utc(2026, 3, 31))
    assert [fire.day for fire in fires] == [13]


@pytest.mark.parametrize(
    "cron",
    ["* * * * *", "*/7 * * * *", "5 */3 * * *", "0 9 * * mon-fri", "0 0 1,15 * *", "@weekly"],
)
def test_without_dst_it_agrees_with_croniter(cron):
    start, end = datetime(2026, 2, 20), datetime(2026, 3, 6)
    walls = croniter(parse(cron, "UTC").fields, start)
    expected = []
    while (wall := walls.get_next(datetime)) <= end:
        expected.append(wall.replace(tzinfo=UTC))
    assert (
        instants(fire_times(cron, "UTC", start.replace(tzinfo=UTC), end.replace(tzinfo=UTC)))
        == expected
    )


@pytest.mark.parametrize(
    ("zone", "transitions"),
    [
        (PARIS, [utc(2026, 3, 29, 1), utc(2026, 10, 25, 1)]),
        (NEW_YORK, [utc(2026, 3, 8, 7), utc(2026, 11, 1, 6)]),
        (LORD_HOWE, [utc(2026, 4, 4, 15), utc(2026, 10, 3, 15, 30)]),
    ],
)
def test_interval_schedules_fire_at_exactly_the_matching_real_instants(zone, transitions):
    tz = ZoneInfo(zone)
    for change in transitions:
        start, end = change - timedelta(hours=6), change + timedelta(hours=6)
        oracle = []
        moment = start + timedelta(minutes=1)
        while moment <= end:
            if moment.astimezone(tz).minute % 15 == 0:
                oracle.append(moment)
            moment += timedelta(minutes=1)
        assert instants(fire_times("*/15 * * * *", zone, start, end)) == oracle


@pytest.mark.parametrize("zone", [PARIS, NEW_YORK, LORD_HOWE])
@pytest.mark.parametrize("cron", ["30 2 * * *", "45 1 * * *", "0 2 * * *"])
def test_fixed_schedules_fire_once_every_local_day_of_the_year(zone, cron):
    tz = ZoneInfo(zone)
    minute, hour = (int(field) for field in cron.split()[:2])
    fires = fire_times(cron, zone, local(zone, 2025, 12, 31, 12), local(zone, 2026, 12, 31, 12))
    assert len(fires) == 365
    assert len({fire.date() for fire in fires}) == 365
    for fire in fires:
        if (fire.hour, fire.minute) == (hour, minute):
            assert fire.fold == 0  # the first occurrence when the wall time repeats
            continue
        # Otherwise the wall time did not exist that day and the fire is the gap's end.
        wall = datetime.combine(fire.date(), time(hour, minute))
        assert wall.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) != wall
        just_before = fire.astimezone(UTC) - timedelta(seconds=1)
        assert just_before.astimezone(tz).utcoffset() != fire.utcoffset()


def test_next_fire():
    assert (
        next_fire("0 9 * * *", PARIS, utc(2026, 3, 28, 8)).isoformat()
        == "2026-03-29T09:00:00+02:00"
    )
    assert next_fire("30 1 * * *", NEW_YORK, local(NEW_YORK, 2026, 11, 1, 1, 30)).isoformat() == (
        "2026-11-02T01:30:00-05:00"
    )
    assert next_fire("0 0 29 2 *", "UTC", utc(2026, 1, 1)) == utc(2028, 2, 29)


def test_a_schedule_that_never_fires_has_no_next_fire():
    assert next_fire("0 0 30 2 *", "UTC", utc(2026, 1, 1)) is None
    assert fire_times("0 0 30 2 *", "UTC", utc(2026, 1, 1), utc(2027, 1, 1)) == []
    assert due("0 0 30 2 *", "UTC", utc(2026, 1, 1), utc(2026, 6, 1)) == Due(None, utc(2026, 1, 1))


def test_naive_datetimes_and_bad_definitions_are_refused():
    with pytest.raises(ValueError, match="aware"):
        fire_times("* * * * *", "UTC", datetime(2026, 1, 1), utc(2026, 1, 2))
    with pytest.raises(ValueError, match="aware"):
        due("* * * * *", "UTC", None, datetime(2026, 1, 1))
    with pytest.raises(UnitError, match="fields"):
        parse("* * * * * *", "UTC")
    with pytest.raises(UnitError, match="time zone"):
        parse("* * * * *", "Europe/Pariss")


@pytest.mark.parametrize(
    ("cron", "fixed"),
    [
        ("30 2 * * *", True),
        ("0 9 * * mon-fri", True),
        ("0,30 1-3 * * *", True),
        ("@daily", True),
        ("@weekly", True),
        ("*/15 * * * *", False),
        ("30 * * * *", False),
        ("* 2 * * *", False),
        ("@hourly", False),
    ],
)
def test_fixed_time_or_interval(cron, fixed):
    assert parse(cron, "UTC").fixed is fixed


# The missed-fire policy.


def test_first_sight_fires_nothing_and_starts_at_now():
    assert due("* * * * *", "UTC", None, utc(2026, 1, 1, 12, 0, 30)) == Due(
        None, utc(2026, 1, 1, 12, 0, 30)
    )


def test_one_due_fire_moves_the_cursor_to_it():
    fire, cursor = due("0 9 * * *", PARIS, utc(2026, 3, 28, 8), utc(2026, 3, 29, 7, 0, 1))
    assert fire.isoformat() == "2026-03-29T09:00:00+02:00"
    assert cursor == utc(2026, 3, 29, 7)
    assert due("0 9 * * *", PARIS, cursor, utc(2026, 3, 29, 7, 0, 2)) == Due(None, cursor)


def test_a_fire_at_now_is_due_and_one_at_the_cursor_is_not():
    assert due("0 * * * *", "UTC", utc(2026, 1, 1, 9), utc(2026, 1, 1, 10)).fire == utc(
        2026, 1, 1, 10
    )
    assert due("0 * * * *", "UTC", utc(2026, 1, 1, 10), utc(2026, 1, 1, 10, 59)).fire is None


def test_down_for_three_hours_fires_exactly_once_on_return():
    cursor = utc(2026, 1, 1, 9, 0)
    back = utc(2026, 1, 1, 12, 0, 20)
    assert len(fire_times("* * * * *", "UTC", cursor, back)) == 180
    fire, moved = due("* * * * *", "UTC", cursor, back)
    assert fire == utc(2026, 1, 1, 12, 0)
    assert moved == fire
    assert due("* * * * *", "UTC", moved, back) == Due(None, moved)
    assert due("* * * * *", "UTC", moved, back + timedelta(seconds=40)).fire == utc(
        2026, 1, 1, 12, 1
    )


def test_down_for_days_fires_the_latest_daily_fire_once():
    fire, _ = due("30 1 * * *", NEW_YORK, utc(2026, 10, 20), utc(2026, 11, 1, 7))
    assert fire.isoformat() == "2026-11-01T01:30:00-04:00"
    fire, _ = due("0 0 1 1 *", "UTC", utc(2020, 6, 1), utc(2026, 6, 1))
    assert fire == utc(2026, 1, 1)


def test_down_through_the_repeated_hour_fires_its_second_occurrence():
    cursor = local(NEW_YORK, 2026, 11, 1, 0, 50)
    fire, moved = due("*/15 * * * *", NEW_YORK, cursor, local(NEW_YORK, 2026, 11, 1, 1, 20, fold=1))
    assert fire.isoformat() == "2026-11-01T01:15:00-05:00"
    assert moved == utc(2026, 11, 1, 6, 15)


def test_a_cursor_ahead_of_now_never_moves_back():
    cursor = utc(2026, 1, 1, 12)
    assert due("* * * * *", "UTC", cursor, utc(2026, 1, 1, 11)) == Due(None, cursor)


@settings(max_examples=60, deadline=None)
@given(
    cron=st.sampled_from(
        ["*/15 * * * *", "30 1 * * *", "30 2 * * *", "@hourly", "0 9 * * mon-fri"]
    ),
    zone=st.sampled_from([NEW_YORK, PARIS]),
    steps=st.lists(st.integers(min_value=1, max_value=6 * 3600), min_size=1, max_size=60),
)
def test_ticks_at_any_times_fire_each_fire_time_at_most_once(cron, zone, steps):
    """Whatever the tick times: fires are real fire times, strictly increasing (no key
    twice), and a tick fires exactly when a fire time passed since the previous one —
    the latest of them."""
    now = utc(2026, 10, 31, 20)
    _, cursor = due(cron, zone, None, now)
    produced = []
    for seconds in steps:
        previous, now = now, now + timedelta(seconds=seconds)
        fire, cursor = due(cron, zone, cursor, now)
        passed = fire_times(cron, zone, previous, now)
        if passed:
            assert fire.astimezone(UTC) == passed[-1].astimezone(UTC)
            produced.append(fire_key(fire))
        else:
            assert fire is None
    assert produced == sorted(set(produced))


# Keys and payloads.


def test_the_key_is_the_utc_fire_time_whatever_the_zone_it_is_given_in():
    fire = fire_times("30 2 * * *", NEW_YORK, utc(2026, 3, 8), utc(2026, 3, 9))[0]
    assert fire_key(fire) == "schedule:2026-03-08T07:00:00Z"
    assert fire_key(fire.astimezone(UTC)) == fire_key(fire.astimezone(ZoneInfo("Asia/Tokyo")))


def test_two_schedulers_compute_the_same_key_for_the_same_fire():
    cursor = utc(2026, 11, 1, 5, 20)
    first = due("*/15 * * * *", NEW_YORK, cursor, utc(2026, 11, 1, 6, 16))
    second = due("*/15 * * * *", NEW_YORK, cursor, utc(2026, 11, 1, 6, 29, 59))
    assert fire_key(first.fire) == fire_key(second.fire) == "schedule:2026-11-01T06:15:00Z"
    assert first.cursor == second.cursor


def test_the_two_occurrences_of_a_repeated_wall_time_have_different_keys():
    fires = fire_times("*/30 * * * *", NEW_YORK, utc(2026, 11, 1, 5, 15), utc(2026, 11, 1, 6, 45))
    assert [fire_key(fire) for fire in fires] == [
        "schedule:2026-11-01T05:30:00Z",
        "schedule:2026-11-01T06:00:00Z",
        "schedule:2026-11-01T06:30:00Z",
    ]


def test_payload():
    fire = local(NEW_YORK, 2026, 11, 1, 1, 30, fold=1)
    assert payload("30 1 * * *", NEW_YORK, fire) == {
        "cron": "30 1 * * *",
        "timezone": NEW_YORK,
        "fire_time": "2026-11-01T01:30:00-05:00",
        "fire_time_utc": "2026-11-01T06:30:00Z",
    }
    assert payload("@Daily", "UTC", utc(2026, 1, 1))["cron"] == "@daily"


def test_each_schedule_of_a_workflow_has_keys_of_its_own():
    fire = utc(2026, 3, 8, 7)
    assert fire_key(fire, "schedule") == "schedule:2026-03-08T07:00:00Z"
    assert fire_key(fire, "schedule-2") == "schedule@schedule-2:2026-03-08T07:00:00Z"
    assert fire_key(fire, "nightly") == "schedule@nightly:2026-03-08T07:00:00Z"
