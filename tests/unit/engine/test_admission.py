"""Admission's rules, table by table, and replays of recorded event sequences (no Kafka)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rflow.engine import admission
from rflow.engine.admission import (
    Admitted,
    Begin,
    Book,
    Cancel,
    Defer,
    Firing,
    Ignored,
    NeverStarted,
    Pending,
    Policy,
    Run,
    SetGate,
    SetHeld,
    SetLane,
    Start,
)
from rflow.engine.lanes import Lane, Waiting
from rflow.engine.state import RunStatus

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
ACCEPTED = {"kind": "trigger", "workflow": "wf", "n": 1}


def firing(n: int = 1, *, group: str | None = None, runs: int = 1, retry: bool = False) -> Firing:
    gate = f"wf:key-{n}"
    return Firing(
        gate=gate,
        workflow="wf",
        group=group,
        runs=tuple(Run(f"r{n}" + (f".{i}" if runs > 1 else ""), {"i": i}) for i in range(runs)),
        record={"kind": "retry" if retry else "trigger", "workflow": "wf", "n": n},
        retry=retry,
        digest=f"d{n}",
    )


@dataclass
class Tables:
    """The runner's tables in memory: a Book reads them, ``apply`` writes decisions."""

    gates: dict[str, dict[str, Any]] = field(default_factory=dict)
    lanes: dict[tuple[str, str], Lane] = field(default_factory=dict)
    held: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    log: list[Any] = field(default_factory=list)

    def book(self) -> Book:
        return Book(
            gate=self.gates.get,
            lane=lambda w, g: self.lanes.get((w, g)),
            held=lambda w, p: list(self.held.get((w, p), ())),
            started=lambda rid: rid in self.started,
        )

    def apply(self, decisions: list[admission.Decision]) -> list[admission.Decision]:
        for d in decisions:
            match d:
                case SetGate(gate=gate, entry=entry):
                    self.gates[gate] = entry
                case SetLane(workflow=w, group=g, lane=lane):
                    if lane is None:
                        self.lanes.pop((w, g), None)
                    else:
                        self.lanes[(w, g)] = lane
                case SetHeld(workflow=w, partition=p, gates=gates):
                    self.held[(w, p)] = gates
                case Start(run_id=rid) | Begin(run_id=rid):
                    self.started.add(rid)
        self.log += decisions
        return decisions


def kinds(decisions: list[admission.Decision]) -> list[str]:
    return [type(d).__name__ for d in decisions]


# --- fired -------------------------------------------------------------------------------


def test_a_new_firing_is_gated_and_its_run_begins():
    tables = Tables()
    decisions = admission.fired(
        firing(), Policy(), tables.book(), paused=None, partition=0, now=NOW
    )
    assert decisions == [
        SetGate(
            "wf:key-1",
            {
                "kind": "trigger",
                "workflow": "wf",
                "n": 1,
                "runs": ["r1"],
                "at": NOW.timestamp(),
                "digest": "d1",
            },
        ),
        Admitted("wf:key-1"),
        Begin("r1", "wf:key-1"),
    ]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            Policy(paused_firings="hold"),
            ["SetGate", "SetHeld", "Pending"],
        ),
        (
            Policy(paused_firings="skip"),
            ["SetGate", "NeverStarted"],
        ),
    ],
)
def test_a_paused_workflows_firing_is_held_or_skipped(policy, expected):
    tables = Tables(held={("wf", 3): ("wf:key-0",)})
    decisions = admission.fired(
        firing(), policy, tables.book(), paused="by operator: audit", partition=3, now=NOW
    )
    assert kinds(decisions) == expected
    gate = decisions[0].entry
    if policy.paused_firings == "hold":
        assert gate["held"] == "by operator: audit"
        assert decisions[1] == SetHeld("wf", 3, ("wf:key-0", "wf:key-1"))  # arrival order
        assert decisions[2].reason == "paused" and "resumed" in decisions[2].waiting_for
    else:
        assert gate["skipped"] == "workflow paused: by operator: audit"
        assert decisions[1].status == RunStatus.SKIPPED


@pytest.mark.parametrize(
    ("admitted", "started", "expected"),
    [
        ({**ACCEPTED, "runs": ["r1"]}, {"r1"}, ["Ignored"]),  # a repeated delivery
        # The gate survived a crash, the start not.
        ({**ACCEPTED, "runs": ["r1"]}, set(), ["Begin"]),
        ({**ACCEPTED, "runs": ["r1"], "held": "paused"}, set(), ["Ignored"]),
        ({**ACCEPTED, "runs": ["r1"], "skipped": "paused"}, set(), ["Ignored"]),
        ({"retracted": "reorg"}, set(), ["Ignored"]),
        ({**ACCEPTED, "runs": ["r1"], "deferred": {"r1": "rate_limit"}}, set(), ["Ignored"]),
        # Compact (every run had begun): a repeat is ignored ...
        ({"runs": ["r1"], "at": 1.0, "digest": "d1"}, {"r1"}, ["Ignored"]),
        # ... unless a crash lost the start: the repeat is the record as accepted ...
        ({"runs": ["r1"], "at": 1.0, "digest": "d1"}, set(), ["SetGate", "Begin"]),
        # ... which a repeat with another record is not.
        ({"runs": ["r1"], "at": 1.0, "digest": "other"}, set(), ["Ignored"]),
    ],
)
def test_a_repeated_firing_starts_only_a_run_that_lost_its_start(admitted, started, expected):
    tables = Tables(gates={"wf:key-1": admitted}, started=started)
    decisions = admission.fired(
        firing(), Policy(), tables.book(), paused=None, partition=0, now=NOW
    )
    assert kinds(decisions) == expected


def test_a_repeated_retry_does_nothing():
    tables = Tables(gates={"wf:key-1": {"runs": ["r1"]}})
    retry = firing(retry=True)
    assert admission.fired(retry, Policy(), tables.book(), paused=None, partition=0, now=NOW) == []


def test_a_matrix_begins_max_parallel_runs_and_the_rest_wait():
    tables = Tables()
    policy = Policy(matrix=True, max_parallel=2)
    decisions = admission.fired(
        firing(runs=4), policy, tables.book(), paused=None, partition=0, now=NOW
    )
    assert decisions[0].entry["matrix"] == {
        "pending": [2, 3],
        "active": ["r1.0", "r1.1"],
        "failed": False,
    }
    assert kinds(decisions[1:]) == ["Admitted", "Pending", "Pending", "Begin", "Begin"]
    assert [d.run_id for d in decisions if isinstance(d, Pending)] == ["r1.2", "r1.3"]
    assert all(d.reason == "matrix" for d in decisions if isinstance(d, Pending))


# --- lanes -------------------------------------------------------------------------------

BUSY = Lane(active="r0", queue=(Waiting(run_id="r9", gate="wf:key-9"),))


@pytest.mark.parametrize(
    ("on_conflict", "expected"),
    [
        ("queue", ["SetLane", "Pending"]),
        ("skip", ["SetLane", "NeverStarted"]),
        ("replace", ["SetLane", "NeverStarted", "Pending"]),
        ("cancel_in_progress", ["SetLane", "NeverStarted", "Cancel", "Pending"]),
    ],
)
def test_a_run_arriving_at_a_busy_lane(on_conflict, expected):
    tables = Tables(lanes={("wf", "acct"): BUSY})
    fire = firing(group="acct")
    decisions = admission.begun(fire.runs[0], fire, Policy(on_conflict=on_conflict), tables.book())
    assert kinds(decisions) == expected
    if on_conflict == "skip":
        assert decisions[1] == NeverStarted(
            "r1", "wf:key-1", RunStatus.SKIPPED, "concurrency group 'acct' busy with run r0"
        )
    if on_conflict in ("replace", "cancel_in_progress"):
        assert decisions[1].run_id == "r9" and decisions[1].status == RunStatus.CANCELLED
    if on_conflict == "cancel_in_progress":
        assert decisions[2] == Cancel(
            "r0", "superseded by run r1 (on_conflict: cancel_in_progress)"
        )


def test_a_free_lane_is_taken_and_the_owner_arriving_again_does_not_start_twice():
    tables = Tables()
    fire = firing(group="acct")
    first = admission.begun(fire.runs[0], fire, Policy(on_conflict="queue"), tables.book())
    assert first == [SetLane("wf", "acct", Lane(active="r1")), Begin("r1", "wf:key-1")]
    tables.apply(first)
    again = admission.begun(fire.runs[0], fire, Policy(on_conflict="queue"), tables.book())
    assert kinds(again) == ["SetLane"]


# --- start or defer ----------------------------------------------------------------------


def test_a_half_open_circuit_defers_every_run_but_its_probe():
    tables = Tables(gates={"wf:key-1": {"runs": ["r1"]}})
    decisions = admission.start_or_defer(
        Begin("r1", "wf:key-1"),
        tables.book(),
        probe_admits=False,
        room_at=None,
        rate_limit=None,
        attempt=0,
        now=NOW,
    )
    assert decisions[0] == Defer("r1", "wf:key-1", NOW + admission.PROBE_WAIT, 1, "probe")
    assert decisions[1].entry["deferred"] == {"r1": "probe"}
    assert decisions[2].reason == "probe"


def test_a_rate_limited_run_waits_on_a_timer_and_gets_one_pending_row():
    tables = Tables(gates={"wf:key-1": {"runs": ["r1"]}})
    later = NOW + timedelta(minutes=5)

    def ask(attempt: int, room_at: datetime | None) -> list:
        return tables.apply(
            admission.start_or_defer(
                Begin("r1", "wf:key-1"),
                tables.book(),
                probe_admits=True,
                room_at=room_at,
                rate_limit="10 starts per 1h",
                attempt=attempt,
                now=NOW,
            )
        )

    first = ask(0, later)
    assert kinds(first) == ["Defer", "SetGate", "Pending"]
    assert first[2].waiting_for == "room in the rate limit (10 starts per 1h)"
    assert kinds(ask(1, later)) == ["Defer"]  # the same reason again: no second row
    started = ask(2, None)
    assert kinds(started) == ["SetGate", "Start"]
    assert started[0].entry["deferred"] == {}


# --- settled -----------------------------------------------------------------------------


def test_a_settled_run_passes_its_lane_to_the_next_waiting():
    tables = Tables(lanes={("wf", "acct"): BUSY})
    decisions = admission.settled(
        "r0",
        RunStatus.SUCCEEDED,
        None,
        Policy(on_conflict="queue"),
        tables.book(),
        workflow="wf",
        group="acct",
        retried=False,
    )
    assert decisions == [SetLane("wf", "acct", Lane(active="r9")), Begin("r9", "wf:key-9")]


def matrix_tables(policy: Policy, runs: int = 4) -> tuple[Tables, Firing]:
    tables = Tables()
    fire = firing(runs=runs)
    tables.apply(admission.fired(fire, policy, tables.book(), paused=None, partition=0, now=NOW))
    return tables, fire


def test_a_matrix_starts_its_next_combination_when_one_settles():
    policy = Policy(matrix=True, max_parallel=2)
    tables, fire = matrix_tables(policy)
    decisions = admission.settled(
        "r1.0",
        RunStatus.SUCCEEDED,
        fire,
        policy,
        tables.book(),
        workflow="wf",
        group=None,
        retried=False,
    )
    assert decisions[0].entry["matrix"] == {
        "pending": [3],
        "active": ["r1.1", "r1.2"],
        "failed": False,
    }
    assert decisions[1:] == [Begin("r1.2", "wf:key-1")]


def test_fail_fast_cancels_the_running_combinations_and_never_starts_the_pending():
    policy = Policy(matrix=True, max_parallel=2, fail_fast=True)
    tables, fire = matrix_tables(policy)
    decisions = admission.settled(
        "r1.0",
        RunStatus.FAILED,
        fire,
        policy,
        tables.book(),
        workflow="wf",
        group=None,
        retried=False,
    )
    assert kinds(decisions) == ["SetGate", "Cancel", "NeverStarted", "NeverStarted"]
    assert decisions[1] == Cancel("r1.1", "fail_fast: r1.0 failed")
    assert [d.run_id for d in decisions[2:]] == ["r1.2", "r1.3"]


def test_a_combination_retried_on_its_own_does_not_move_its_matrix():
    policy = Policy(matrix=True, max_parallel=2)
    tables, fire = matrix_tables(policy)
    decisions = admission.settled(
        "r1.0",
        RunStatus.FAILED,
        fire,
        policy,
        tables.book(),
        workflow="wf",
        group=None,
        retried=True,
    )
    assert decisions == []


# --- released, retracted -----------------------------------------------------------------


def test_held_firings_begin_in_arrival_order_when_resumed():
    tables = Tables()
    book = tables.book()
    for n in (1, 2):
        tables.apply(
            admission.fired(
                firing(n), Policy(), tables.book(), paused="by operator", partition=5, now=NOW
            )
        )
    decisions = admission.released(
        [(firing(1), Policy()), (firing(2), Policy())], book, workflow="wf", partition=5
    )
    assert [d for d in decisions if isinstance(d, Begin)] == [
        Begin("r1", "wf:key-1"),
        Begin("r2", "wf:key-2"),
    ]
    assert decisions[0] == SetHeld("wf", 5, ())
    assert all("held" not in d.entry for d in decisions if isinstance(d, SetGate))


def test_a_retraction_cancels_the_runs_or_bars_a_late_firing():
    tables = Tables()
    early = admission.retracted("wf:key-1", "reorg", tables.book(), now=NOW)
    assert early == [SetGate("wf:key-1", {"retracted": "reorg", "at": NOW.timestamp()})]
    tables.apply(early)
    late = admission.fired(firing(), Policy(), tables.book(), paused=None, partition=0, now=NOW)
    assert kinds(late) == ["Ignored"]
    tables = Tables(gates={"wf:key-1": {"runs": ["r1"]}})
    decisions = admission.retracted("wf:key-1", "reorg", tables.book(), now=NOW)
    assert decisions[1] == Cancel("r1", "trigger retracted: reorg")


# --- replays -----------------------------------------------------------------------------


def replay_queue_lane(tables: Tables) -> list[str]:
    """Three firings of one group, a duplicate, then each owner settles: which runs
    begin, in order."""
    policy = Policy(on_conflict="queue")
    for n in (1, 2, 3):
        tables.apply(
            admission.fired(
                firing(n, group="acct"), policy, tables.book(), paused=None, partition=0, now=NOW
            )
        )
    tables.apply(
        admission.fired(
            firing(2, group="acct"), policy, tables.book(), paused=None, partition=0, now=NOW
        )
    )
    for n in (1, 2, 3):
        tables.apply(
            admission.settled(
                f"r{n}",
                RunStatus.SUCCEEDED,
                None,
                policy,
                tables.book(),
                workflow="wf",
                group="acct",
                retried=False,
            )
        )
    return [d.run_id for d in tables.log if isinstance(d, Begin)]


def test_a_replayed_lane_starts_its_runs_once_each_in_arrival_order():
    first, second = Tables(), Tables()
    assert replay_queue_lane(first) == ["r1", "r2", "r3"]
    assert replay_queue_lane(second) == ["r1", "r2", "r3"]
    assert first.log == second.log  # the same decisions, every time
    assert ("wf", "acct") not in first.lanes  # the lane is free at the end
    assert any(isinstance(d, Ignored) for d in first.log)  # the duplicate changed nothing
