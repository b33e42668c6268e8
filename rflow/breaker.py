"""Circuit breakers: the state machine, pure (the runner keeps it in Postgres).

closed: terminal failures are counted; ``max_failures`` of them inside ``window`` trip it.
open: the workflow is paused (``on_trip: pause``); after a full window with no new
failure it turns half_open. half_open: exactly one run, the probe, is admitted for the
whole workflow; its success closes the circuit and clears the count, its failure trips
it again at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

State = Literal["closed", "open", "half_open"]


@dataclass(frozen=True)
class Circuit:
    """One workflow's circuit."""

    state: State = "closed"
    failures: tuple[datetime, ...] = field(default=())
    """Times of the latest terminal failures (at most ``max_failures``)."""
    probe: str | None = None
    """The run admitted while half_open."""


@dataclass(frozen=True)
class Rule:
    max_failures: int
    window: timedelta


def failed(circuit: Circuit, run_id: str, now: datetime, rule: Rule) -> tuple[Circuit, bool]:
    """A run failed terminally: the new circuit, and whether it tripped just now."""
    if circuit.state == "half_open":
        if circuit.probe != run_id:
            return circuit, False
        return Circuit("open", (now,)), True
    if circuit.state == "open":
        # A run admitted before the trip failed late: the quiet window starts again.
        return replace(circuit, failures=(*circuit.failures, now)[-rule.max_failures :]), False
    recent = tuple(t for t in (*circuit.failures, now) if t > now - rule.window)
    recent = recent[-rule.max_failures :]
    if len(recent) >= rule.max_failures:
        return Circuit("open", recent), True
    return Circuit("closed", recent), False


def succeeded(circuit: Circuit, run_id: str) -> Circuit:
    """A run succeeded: the probe's success closes the circuit."""
    if circuit.state == "half_open" and circuit.probe == run_id:
        return Circuit()
    return circuit


def let_go(circuit: Circuit, run_id: str) -> Circuit:
    """A run ended without verdict (cancelled, skipped, rejected): a probe frees its place."""
    if circuit.state == "half_open" and circuit.probe == run_id:
        return replace(circuit, probe=None)
    return circuit


def tick(circuit: Circuit, now: datetime, rule: Rule) -> Circuit:
    """An open circuit turns half_open after a full window without a new failure."""
    if circuit.state != "open":
        return circuit
    last = max(circuit.failures) if circuit.failures else None
    if last is None or last + rule.window <= now:
        return Circuit("half_open", circuit.failures)
    return circuit


def admit(circuit: Circuit, run_id: str) -> tuple[Circuit, bool]:
    """May ``run_id`` start? While half_open only the probe may; the first to ask is it."""
    if circuit.state != "half_open":
        return circuit, True
    if circuit.probe is None:
        return replace(circuit, probe=run_id), True
    return circuit, circuit.probe == run_id
