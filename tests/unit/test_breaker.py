"""The circuit breaker's state machine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rflow.breaker import Circuit, Rule, admit, failed, let_go, succeeded, tick

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RULE = Rule(max_failures=3, window=timedelta(minutes=10))


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def fail_at(circuit: Circuit, *minutes: float, run: str = "r") -> tuple[Circuit, list[bool]]:
    trips = []
    for minute in minutes:
        circuit, tripped = failed(circuit, run, at(minute), RULE)
        trips.append(tripped)
    return circuit, trips


def test_max_failures_inside_the_window_trip_it_and_older_ones_do_not_count():
    circuit, trips = fail_at(Circuit(), 0, 5, 11)
    assert trips == [False, False, False] and circuit.state == "closed"  # 0 left the window
    circuit, trips = fail_at(circuit, 12)
    assert trips == [True] and circuit.state == "open"


def test_open_turns_half_open_after_a_full_quiet_window_and_admits_one_probe():
    circuit, _ = fail_at(Circuit(), 0, 1, 2)
    assert tick(circuit, at(11.9), RULE).state == "open"
    # A late failure while open restarts the quiet window.
    circuit, tripped = failed(circuit, "late", at(5), RULE)
    assert not tripped
    assert tick(circuit, at(14.9), RULE).state == "open"
    circuit = tick(circuit, at(15), RULE)
    assert circuit.state == "half_open" and circuit.probe is None
    circuit, probe = admit(circuit, "p")
    assert probe and circuit.probe == "p"
    assert admit(circuit, "q") == (circuit, False)
    assert admit(circuit, "p") == (circuit, True)  # asking again changes nothing


def test_the_probe_closes_the_circuit_or_trips_it_again():
    half_open = Circuit("half_open", (at(0),), probe="p")
    assert succeeded(half_open, "p") == Circuit()
    assert succeeded(half_open, "other") == half_open
    reopened, tripped = failed(half_open, "p", at(20), RULE)
    assert tripped and reopened == Circuit("open", (at(20),))
    assert failed(half_open, "other", at(20), RULE) == (half_open, False)


def test_a_probe_without_verdict_frees_the_place_and_closed_admits_everyone():
    half_open = Circuit("half_open", (), probe="p")
    assert let_go(half_open, "p").probe is None
    assert admit(Circuit(), "x") == (Circuit(), True)
    assert admit(Circuit("open", (at(0),)), "x")[1]
