"""Concurrency lanes: one run per group at a time, and each on_conflict mode."""

from __future__ import annotations

from rflow.engine.lanes import Lane, Waiting, arrive, leave


def waiting(*runs: str) -> tuple[Waiting, ...]:
    return tuple(Waiting(run_id=r, gate=f"g:{r}") for r in runs)


def fill(on_conflict: str, *runs: str) -> Lane:
    lane = None
    for run in runs:
        lane = arrive(lane, run, f"g:{run}", on_conflict).lane
    return lane


def test_a_free_lane_starts_the_run_and_a_busy_one_queues_in_arrival_order():
    first = arrive(None, "a", "g:a", "queue")
    assert first.start and first.lane == Lane(active="a")
    lane = fill("queue", "a", "b", "c")
    assert lane == Lane(active="a", queue=waiting("b", "c"))
    lane, following = leave(lane, "a")
    assert following == Waiting(run_id="b", gate="g:b")
    assert lane == Lane(active="b", queue=waiting("c"))
    lane, following = leave(lane, "b")
    assert following.run_id == "c" and lane == Lane(active="c")
    assert leave(lane, "c") == (None, None)


def test_a_repeated_arrival_or_a_stranger_leaving_changes_nothing():
    lane = fill("queue", "a", "b")
    again = arrive(lane, "b", "g:b", "queue")
    assert (again.lane, again.start, again.skip) == (lane, False, False)
    owner = arrive(lane, "a", "g:a", "queue")  # the owner again: its start may be lost
    assert (owner.lane, owner.start, owner.skip) == (lane, True, False)
    assert leave(lane, "b") == (lane, None)
    assert leave(None, "a") == (None, None)


def test_skip_records_the_newcomer_as_skipped_while_the_lane_is_busy():
    lane = fill("skip", "a")
    decision = arrive(lane, "b", "g:b", "skip")
    assert decision.skip and not decision.start and decision.lane == lane
    assert arrive(None, "b", "g:b", "skip").start


def test_replace_keeps_only_the_newest_waiting_run():
    lane = fill("replace", "a", "b")
    decision = arrive(lane, "c", "g:c", "replace")
    assert decision.superseded == waiting("b")
    assert decision.cancel is None
    assert decision.lane == Lane(active="a", queue=waiting("c"))


def test_cancel_in_progress_asks_the_owner_to_stop_once_and_the_newest_runs_next():
    lane = fill("cancel_in_progress", "a")
    decision = arrive(lane, "b", "g:b", "cancel_in_progress")
    assert decision.cancel == "a" and decision.superseded == ()
    assert decision.lane == Lane(active="a", queue=waiting("b"), cancelling="a")
    later = arrive(decision.lane, "c", "g:c", "cancel_in_progress")
    assert later.cancel is None  # already asked
    assert later.superseded == waiting("b")
    lane, following = leave(later.lane, "a")
    assert following.run_id == "c" and lane == Lane(active="c")
    assert arrive(lane, "d", "g:d", "cancel_in_progress").cancel == "c"
