"""The in-process sliding window: at most max starts in any per."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rflow.ratelimit import SlidingWindow

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_window_grants_max_starts_then_says_when_it_has_room():
    window = SlidingWindow(2, timedelta(seconds=10))
    assert window.claim(at(0)) is None
    assert window.claim(at(1)) is None
    assert window.claim(at(2)) == at(10)
    assert window.claim(at(9.9)) == at(10)
    # The window slides: the start at 0 leaves it at 10, the one at 1 at 11.
    assert window.claim(at(10)) is None
    assert window.claim(at(10.5)) == at(11)
    assert window.claim(at(11)) is None


def test_any_interval_of_per_holds_at_most_max_granted_starts():
    window = SlidingWindow(3, timedelta(seconds=5))
    granted = [t / 10 for t in range(0, 300) if window.claim(at(t / 10)) is None]
    for start in granted:
        assert len([g for g in granted if start <= g < start + 5]) <= 3
    assert len(granted) == 18  # three per five seconds over thirty seconds
