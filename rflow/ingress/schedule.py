"""Cron schedules in a time zone: their fire times, and which fire is due now.

Everything here is pure: no clock, no I/O. ``now`` is always an argument, so the
scheduler, its tests and a replay all get the same answers.

Wall times and instants
    A cron expression names wall-clock times ("09:00 on weekdays"); the time zone turns
    each into an instant. Twice a year a daylight-saving change breaks the one-to-one
    mapping, and the rules below are those of Vixie cron (``man 8 cron``, shared by
    cronie and Debian's cron), which is what people who write crontabs expect:

    - A **fixed-time** schedule (neither the minute nor the hour field starts with
      ``*``; ``@daily``, ``@weekly``, ``@monthly`` and ``@yearly`` are fixed) fires once
      per wall time. A wall time skipped by a spring-forward change (02:30 on the day
      clocks jump from 02:00 to 03:00) fires once, at the first instant after the gap
      (03:00 local): skipping it would lose a daily job for the day, and firing at the
      gap's end rather than at the normalised 03:30 keeps it ahead of jobs due after the
      change, as Vixie cron runs skipped jobs "soon after the change". A wall time that
      a fall-back change repeats (01:30 in New York on the first Sunday of November)
      fires once, at its first occurrence.
    - An **interval** schedule (the minute or the hour field starts with ``*``, as in
      ``*/15 * * * *``; also ``@hourly``) follows the instants that really occur: a
      skipped wall time does not fire, and a repeated one fires at each occurrence, so
      ``*/15 * * * *`` keeps firing every 15 minutes of real time through the repeated
      hour. These are Vixie cron's "jobs specified with wildcards", which it runs
      "based on the new time immediately".

    Several wall times that land on the same instant (``0,30 2`` in a gap both move to
    03:00) fire once.

    croniter is used on naive wall times only. Given zone-aware datetimes, croniter
    5.0 fires ``0 9 * * *`` twice in Paris on 29 March 2026 (08:00 and 09:00 CEST),
    moves ``30 1 * * *`` to 02:30 the day after a fall-back, and drops the repeated
    hour of ``*/15``; the tests pin the behaviour described above instead.

Missed fires and the cursor
    A schedule's cursor is the instant up to which it has been handled: every fire time
    at or before it was produced (or deliberately passed over). :func:`due` implements
    the policy: the fire times in ``(cursor, now]`` are due, and only the most recent of
    them fires, once; the cursor then moves to that fire time. A scheduler that was down
    for three hours therefore fires one catch-up run on return, not 180. A schedule seen
    for the first time has no cursor and fires nothing: its cursor starts at ``now``, so
    a new or restored schedule never replays the past. Because the new cursor is the fire
    time itself (not the caller's clock reading), two schedulers handling the same fire
    store the same cursor, and each fire time maps to one key, :func:`fire_key`.

Comparing the datetimes returned here
    Fire times come back as aware datetimes in the schedule's zone, with ``fold`` set on
    the second occurrence of a repeated wall time. Python compares and subtracts two
    datetimes of the *same* zone by wall time, ignoring ``fold`` (PEP 495): convert to
    UTC (``.astimezone(UTC)``) before comparing fire times across a fall-back change.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from rflow.lang.model.triggers import key_prefix
from rflow.lang.timespec import CRON_MACRO_FIELDS, parse_cron, parse_timezone

# How far ahead a zone's offsets are sampled to find the earliest wall time that can
# still fire after a given instant: a fall-back change within this span sets the wall
# clock back below the current reading (tzdb's largest shifts are a day).
_LOOKAHEAD = timedelta(hours=26)
# The span :func:`due` looks back first; it doubles until it reaches the cursor, so a
# long outage costs a few searches rather than one per missed fire.
_FIRST_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class Schedule:
    """A parsed cron schedule in a time zone."""

    cron: str
    """The expression as written (normalised)."""
    timezone: str
    """The IANA zone name."""
    zone: ZoneInfo
    fields: str
    """The five-field form (macros expanded), which croniter iterates."""
    fixed: bool
    """True for a fixed time of day (DST-adjusted), False for an interval schedule."""


@functools.lru_cache(maxsize=512)
def parse(cron: str, timezone: str) -> Schedule:
    """The schedule for ``cron`` in ``timezone``.

    Raises :class:`~rflow.lang.units.UnitError` (a ``ValueError``) for an expression or
    zone the workflow language would refuse.
    """
    cron = parse_cron(cron)
    timezone = parse_timezone(timezone)
    fields = CRON_MACRO_FIELDS.get(cron, cron)
    minute, hour = fields.split(" ")[:2]
    fixed = not (minute.startswith("*") or hour.startswith("*"))
    return Schedule(cron, timezone, ZoneInfo(timezone), fields, fixed)


def fire_times(cron: str, timezone: str, after: datetime, until: datetime) -> list[datetime]:
    """The fire times strictly after ``after`` and up to and including ``until``.

    Both bounds must be aware (any zone); the results are aware datetimes in the
    schedule's zone, in real-time order.
    """
    schedule = parse(cron, timezone)
    limit = _as_utc(until, "until")
    found = []
    for instant in _fires(schedule, _as_utc(after, "after")):
        if instant > limit:
            break
        found.append(instant.astimezone(schedule.zone))
    return found


def next_fire(cron: str, timezone: str, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after``; ``None`` if the schedule never fires
    again (``0 0 30 2 *``)."""
    schedule = parse(cron, timezone)
    instant = next(_fires(schedule, _as_utc(after, "after")), None)
    return None if instant is None else instant.astimezone(schedule.zone)


class Due(NamedTuple):
    """What :func:`due` decided: the fire to produce (if any) and the cursor to store."""

    fire: datetime | None
    """The fire time to produce now, in the schedule's zone; ``None`` when nothing is due."""
    cursor: datetime
    """The cursor once ``fire`` has been produced (UTC); never earlier than the old one."""


def due(cron: str, timezone: str, cursor: datetime | None, now: datetime) -> Due:
    """The fire due at ``now`` for a schedule handled up to ``cursor``.

    - no cursor (first sight): nothing fires, the cursor starts at ``now``;
    - otherwise the most recent fire time in ``(cursor, now]`` fires and becomes the
      cursor; older fire times in that span are passed over (missed while down, they
      fire once, as the latest);
    - nothing in that span (or a cursor ahead of ``now``): nothing fires, the cursor
      stays.
    """
    now = _as_utc(now, "now")
    if cursor is None:
        return Due(None, now)
    cursor = _as_utc(cursor, "cursor")
    schedule = parse(cron, timezone)
    window = _FIRST_WINDOW
    while cursor < now:
        start = max(cursor, now - window)
        latest = None
        for instant in _fires(schedule, start):
            if instant > now:
                break
            latest = instant
        if latest is not None:
            return Due(latest.astimezone(schedule.zone), latest)
        if start == cursor:
            break
        window *= 2
    return Due(None, cursor)


def fire_key(fire: datetime, trigger_id: str = "schedule") -> str:
    """The trigger key of a fire time: ``schedule:<UTC ISO 8601>``, the same on every
    scheduler, so a repeated production of one fire is recognised downstream. A
    workflow's schedule triggers other than its ``schedule`` one begin their keys with
    ``schedule@<id>``: two schedules of a workflow firing at one instant start two runs."""
    prefix = key_prefix("schedule", trigger_id)
    return f"{prefix}:" + _as_utc(fire, "fire").strftime("%Y-%m-%dT%H:%M:%SZ")


def payload(cron: str, timezone: str, fire: datetime) -> dict[str, Any]:
    """The trigger payload of a fire (``${{ trigger.* }}``): the schedule and the fire
    time, local with its offset and in UTC."""
    schedule = parse(cron, timezone)
    instant = _as_utc(fire, "fire")
    return {
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "fire_time": instant.astimezone(schedule.zone).isoformat(),
        "fire_time_utc": instant.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _as_utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {moment!r}")
    return moment.astimezone(UTC)


def _fires(schedule: Schedule, after: datetime) -> Iterator[datetime]:
    """The fire instants (UTC) strictly after ``after`` (UTC), in order, without repeats.

    Wall times come from croniter in wall order; their instants are in real-time order
    except for the second occurrences of a repeated hour, which belong after the whole
    first occurrence. A heap holds instants until no later wall time can map before them:
    every instant of a wall time at or after ``w`` is at or after ``_lower_bound(w)``.
    """
    zone = schedule.zone
    hours = range(int(_LOOKAHEAD / timedelta(hours=1)) + 1)
    lowest = min((after + timedelta(hours=h)).astimezone(zone).utcoffset() for h in hours)
    start = (after + lowest).replace(tzinfo=None) - timedelta(minutes=1)
    walls = croniter(schedule.fields, start)
    pending: list[datetime] = []
    last = after
    while True:
        try:
            wall = walls.get_next(datetime)
        except (CroniterBadDateError, OverflowError):
            wall = None
        bound = None if wall is None else _lower_bound(wall, zone)
        while pending and (bound is None or pending[0] <= bound):
            instant = heapq.heappop(pending)
            if instant > last:
                last = instant
                yield instant
        if wall is None:
            return
        for instant in _instants(wall, zone, schedule.fixed):
            heapq.heappush(pending, instant)


def _lower_bound(wall: datetime, zone: ZoneInfo) -> datetime:
    # For a repeated wall time fold=0 is the earlier instant; for a skipped one fold=1
    # (the offset after the change) lands before the gap.
    return min(
        wall.replace(tzinfo=zone, fold=0).astimezone(UTC),
        wall.replace(tzinfo=zone, fold=1).astimezone(UTC),
    )


def _instants(wall: datetime, zone: ZoneInfo, fixed: bool) -> tuple[datetime, ...]:
    """The UTC instants a matching wall time fires at (see the module's rules)."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return (first,)
    if first < second:  # repeated by a fall-back change
        return (first,) if fixed else (first, second)
    # Skipped by a spring-forward change (PEP 495: fold=0 reads it with the offset
    # before the change, so ``first`` lies after the gap and ``second`` before it).
    return (_change_instant(zone, second, first),) if fixed else ()


def _change_instant(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The instant in ``(before, after]`` where ``zone``'s offset changes: the end of a gap."""
    offset = before.astimezone(zone).utcoffset()
    low, high = int(before.timestamp()), int(after.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == offset:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)
