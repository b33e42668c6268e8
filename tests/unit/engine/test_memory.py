"""The de-duplication window: what a firing keeps once its runs began, and what a sweep
forgets when (pure: entries and ``now`` in, decisions out)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rflow.engine import memory
from rflow.engine.memory import Book, Forget, Rewrite, Settled

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
DAY = 86400.0
WEEK = timedelta(days=7)
RECORD = {
    "kind": "trigger",
    "v": 1,
    "workflow": "order-paid",
    "trigger_key": "manual:order-paid:o-1",
    "group": "acct-7",
    "source": "manual",
    "payload": {"order": "o-1", "amount": 10},
    "received_at": "2026-12-01T11:00:00Z",
}


def full(**extra) -> dict:
    return {
        **RECORD,
        "runs": ["r1"],
        "at": NOW.timestamp() - 8 * DAY,
        "digest": memory.digest(RECORD),
        **extra,
    }


def book(live=(), begun=("r1",), windows=None) -> Book:
    windows = windows or {}
    return Book(
        window=lambda name: windows.get(name, WEEK),
        live=lambda rid: rid in live,
        begun=lambda rid: rid in begun or rid in live,
    )


def test_a_digest_is_the_same_for_every_copy_of_a_firing_and_differs_for_another():
    copy = {**RECORD, "received_at": "2026-12-01T11:00:05Z"}  # sent again later
    assert memory.digest(copy) == memory.digest(RECORD)
    # Vouched for by rflow's ingress (version 2, its proof): the same firing.
    vouched = {**copy, "v": 2, "proof": "v1:k1:0f3a"}
    assert memory.digest(vouched) == memory.digest(RECORD)
    other = {**RECORD, "payload": {"order": "o-1", "amount": 11}}
    assert memory.digest(other) != memory.digest(RECORD)


def test_a_firing_whose_runs_all_began_keeps_only_what_deduplication_needs():
    compact = memory.remembered(full(), lambda rid: True)
    assert compact == {
        "runs": ["r1"],
        "at": NOW.timestamp() - 8 * DAY,
        "digest": memory.digest(RECORD),
    }
    assert memory.is_remembered(compact)
    assert memory.restored(compact, RECORD, memory.digest(RECORD)) == {**RECORD, **compact}
    assert memory.restored(compact, RECORD, "another") is None


@pytest.mark.parametrize(
    "entry",
    [
        full(held="by operator"),
        full(deferred={"r1": "rate_limit"}),
        full(matrix={"pending": [1], "active": ["r1"], "failed": False}),
        full(matrix={"pending": [], "active": ["r1"], "failed": False}),
    ],
)
def test_a_firing_still_being_admitted_keeps_its_record(entry):
    assert memory.remembered(entry, lambda rid: True) is None


def test_a_firing_with_a_run_not_begun_keeps_its_record():
    assert memory.remembered(full(runs=["r1", "r2"]), lambda rid: rid == "r1") is None
    done = full(matrix={"pending": [], "active": [], "failed": True})
    assert memory.remembered(done, lambda rid: True) is not None


def test_a_firing_past_its_window_is_forgotten_once_no_run_of_it_is_live():
    compact = memory.remembered(full(), lambda rid: True)
    assert memory.sweep("triggers", [("order-paid:k", compact)], book(), NOW) == [
        Forget("triggers", "order-paid:k", "admitted more than 7d ago")
    ]
    # Its run waits for an approval: it is remembered however long that takes.
    assert memory.sweep("triggers", [("order-paid:k", compact)], book(live=["r1"]), NOW) == []
    # Inside its window it stays.
    young = {**compact, "at": NOW.timestamp() - 6 * DAY}
    assert memory.sweep("triggers", [("order-paid:k", young)], book(), NOW) == []


def test_a_full_entry_whose_runs_began_is_compacted_or_forgotten_by_the_sweep():
    young = full(at=NOW.timestamp() - 60)
    [decision] = memory.sweep("triggers", [("order-paid:k", young)], book(), NOW)
    assert decision == Rewrite("triggers", "order-paid:k", memory.remembered(young, bool))
    [decision] = memory.sweep("triggers", [("order-paid:k", full())], book(), NOW)
    assert isinstance(decision, Forget)


def test_a_held_firing_is_never_forgotten():
    held = full(held="by operator", at=NOW.timestamp() - 400 * DAY)
    assert memory.sweep("triggers", [("order-paid:k", held)], book(begun=()), NOW) == []


def test_the_window_is_the_workflows_own():
    compact = memory.remembered(full(), lambda rid: True)
    windows = {"order-paid": timedelta(days=30)}
    assert memory.sweep("triggers", [("order-paid:k", compact)], book(windows=windows), NOW) == []
    short = {"order-paid": timedelta(seconds=2)}
    young = {**compact, "at": NOW.timestamp() - 3}
    assert memory.sweep("triggers", [("order-paid:k", young)], book(windows=short), NOW) == [
        Forget("triggers", "order-paid:k", "admitted more than 2s ago")
    ]


def test_a_retraction_of_a_firing_never_admitted_is_forgotten_after_the_window():
    retracted = {"retracted": "reorg", "at": NOW.timestamp() - 8 * DAY}
    assert memory.sweep("triggers", [("on-swap:k", retracted)], book(), NOW) == [
        Forget("triggers", "on-swap:k", "admitted more than 7d ago")
    ]


def test_a_settled_run_is_forgotten_a_window_after_it_settled():
    old = Settled("succeeded", NOW.timestamp() - 8 * DAY, "order-paid")
    young = Settled("failed", NOW.timestamp() - DAY, "order-paid")
    assert memory.sweep("settled", [("r1", old), ("r2", young)], book(), NOW) == [
        Forget("settled", "r1", "settled more than 7d ago")
    ]
    assert memory.settled_marker("succeeded", "w", NOW) == Settled(
        "succeeded", NOW.timestamp(), "w"
    )


def test_entries_written_before_the_window_get_a_time_and_old_run_markers_move():
    undated = {**RECORD, "runs": ["r1"]}
    assert memory.sweep("triggers", [("order-paid:k", undated)], book(), NOW) == [
        Rewrite("triggers", "order-paid:k", {**undated, "at": NOW.timestamp()})
    ]
    assert memory.sweep("settled", [("r1", Settled("failed", None))], book(), NOW) == [
        Rewrite("settled", "r1", Settled("failed", NOW.timestamp()))
    ]
    assert memory.sweep("runs", [("r1", "succeeded")], book(), NOW) == [
        Forget("runs", "r1", "moved to the settled table"),
        Rewrite("settled", "r1", Settled("succeeded", NOW.timestamp())),
    ]


def test_the_sweep_comes_a_tenth_of_the_shortest_window_apart_within_bounds():
    # On disk, a sweep reads only what is due: it may come often.
    assert memory.sweep_interval([WEEK]) == 60.0
    assert memory.sweep_interval([WEEK, timedelta(minutes=5)]) == 30.0
    assert memory.sweep_interval([timedelta(seconds=2)]) == 1.0
    # In memory, every entry is read each time.
    assert memory.sweep_interval([WEEK], indexed=False) == 3600.0
    assert memory.sweep_interval([WEEK, timedelta(minutes=10)], indexed=False) == 60.0


def test_an_entry_comes_due_a_window_after_its_time():
    windows = {"order-paid": timedelta(hours=1)}.get
    gate = {"runs": ["r1"], "at": 1000.0}
    assert memory.comes_due("triggers", "order-paid:k", gate, lambda w: windows(w, WEEK)) == 4600.0
    assert (
        memory.comes_due("triggers", "other:k", gate, lambda w: windows(w, WEEK))
        == 1000.0 + 7 * DAY
    )
    marker = Settled("succeeded", 1000.0, "order-paid")
    assert memory.comes_due("settled", "r1", marker, lambda w: windows(w, WEEK)) == 4600.0
    assert memory.comes_due("settled", "r1", Settled("failed", None), lambda w: WEEK) is None
