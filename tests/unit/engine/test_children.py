"""call_workflow (child runs) and signals, decided by the pure engine."""

from __future__ import annotations

from datetime import timedelta

from rflow.engine import (
    Execute,
    Park,
    RunStatus,
    ScheduleTimer,
    Start,
    StepStatus,
    Unpark,
    WaitResolved,
    resume,
)
from rflow.engine.children import child_run_id, trigger_key
from rflow.engine.effects import CancelChild, CancelTimer, Settle, StartChild
from rflow.engine.events import SignalReceived
from rflow.engine.keys import run_id
from rflow.engine.state import ParentLink
from tests.unit.engine.driver import SETTLE, Driver, workflow

PARENT = """
trigger: { manual: {} }
steps:
  - id: flow
    try:
      - id: child
        call_workflow: { workflow: settle, inputs: { amount: "${{ trigger.amount }}" } }
        timeout: 1h
    catch:
      - id: tell
        notify: { channel: ops, message: "child failed: ${{ steps.flow.error.message }}" }
"""


def child_answer(start: StartChild, status: str, **fields) -> WaitResolved:
    return WaitResolved(
        run_id=start.run_id,
        path=start.path,
        wait_id=start.wait_id,
        payload={"run_id": start.child_run_id, "status": status, **fields},
    )


def test_a_child_run_has_its_own_id_and_a_trigger_key_naming_its_parent_step():
    d = Driver(workflow(PARENT, others={"settle": SETTLE}), trigger={"amount": 5})
    started = d.start()
    [start] = [e for e in started if isinstance(e, StartChild)]
    assert (start.child, start.trigger_key, start.inputs) == ("settle", "run1/child", {"amount": 5})
    assert (
        start.child_run_id == run_id("settle", "run1/child") == child_run_id("settle", "run1/child")
    )
    assert start.wait_id == "w:t1:child"
    assert d.state.steps["child"].status == StepStatus.WAITING
    assert any(isinstance(e, ScheduleTimer) and e.purpose == "wait_timeout" for e in started)
    # Resumed after a restart, it asks again for the same child (its firing key dedups).
    assert [e for e in resume(d.wf, d.state) if isinstance(e, StartChild)] == [start]
    done = d.feed(child_answer(start, "succeeded", outputs={"paid": 5}))
    assert any(isinstance(e, Unpark) for e in done)
    assert any(isinstance(e, CancelTimer) for e in done)
    assert d.state.steps["child"].output == {"paid": 5}
    assert d.state.status == RunStatus.SUCCEEDED


def test_a_child_that_fails_is_caught_by_its_parent():
    d = Driver(workflow(PARENT, others={"settle": SETTLE}), trigger={"amount": 5})
    [start] = [e for e in d.start() if isinstance(e, StartChild)]
    failure = {"kind": "reverted", "message": "transfer reverted"}
    caught = d.feed(child_answer(start, "failed", error=failure))
    [tell] = [e for e in caught if isinstance(e, Execute)]
    assert tell.action["message"] == (
        f"child failed: child run {start.child_run_id} of settle failed: transfer reverted"
    )
    assert d.state.steps["child"].error.kind == "reverted"
    d.answer(tell, {})
    assert d.state.status == RunStatus.SUCCEEDED


def test_a_child_past_its_timeout_is_cancelled():
    d = Driver(workflow(PARENT, others={"settle": SETTLE}), trigger={"amount": 5})
    started = d.start()
    [timer] = [e for e in started if isinstance(e, ScheduleTimer)]
    timed_out = d.fire(timer)
    [cancel] = [e for e in timed_out if isinstance(e, CancelChild)]
    assert (cancel.child, cancel.trigger_key) == ("settle", "run1/child")
    assert d.state.steps["child"].error.kind == "timeout"


def test_cancelling_the_parent_cancels_its_child():
    d = Driver(workflow(PARENT, others={"settle": SETTLE}), trigger={"amount": 5})
    d.start()
    cancelled = d.cancel("operator")
    [cancel] = [e for e in cancelled if isinstance(e, CancelChild)]
    assert cancel.trigger_key == "run1/child"
    assert "operator" in cancel.reason
    assert d.state.status == RunStatus.CANCELLED


def test_a_retried_call_starts_a_new_child():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: child
    call_workflow: { workflow: settle }
    retry: { max_attempts: 2, backoff: 1s }
""",
        others={"settle": SETTLE},
    )
    d = Driver(wf)
    [first] = [e for e in d.start() if isinstance(e, StartChild)]
    retrying = d.feed(child_answer(first, "failed", error={"kind": "rpc_timeout", "message": "x"}))
    [timer] = [e for e in retrying if isinstance(e, ScheduleTimer) and e.purpose == "retry"]
    [second] = [e for e in d.fire(timer) if isinstance(e, StartChild)]
    assert second.trigger_key == trigger_key("run1", "child", 1, 2) == "run1/child~2"
    assert second.wait_id == "w:t1:child~2"
    d.feed(child_answer(second, "succeeded", outputs={}))
    assert d.state.status == RunStatus.SUCCEEDED


def test_a_child_settles_with_its_outputs_for_its_parent():
    wf = workflow(
        """
trigger: { manual: { inputs: [amount] } }
steps:
  - id: pay
    http_call: { url: "http://pay.test/${{ inputs.amount }}" }
outputs:
  paid: "${{ inputs.amount }}"
  tx: "${{ steps.pay.output.tx }}"
"""
    )
    parent = ParentLink(run_id="p1", workflow="treasury", path="child", wait_id="k")
    d = Driver(wf, trigger={"amount": 7}, parent=parent)
    d.run(lambda e: {"tx": "0x1"})
    [settle] = [e for e in d.effects if isinstance(e, Settle)]
    assert settle.parent == parent
    assert settle.outputs == {"paid": 7, "tx": "0x1"}
    assert isinstance(d.events[0][0], Start)


SIGNAL = """
trigger: { manual: {} }
signals: { go: { buffer: true } }
steps:
  - id: first
    wait_for: { signal: { name: go, timeout: 1d } }
  - id: second
    wait_for: { signal: { name: go } }
  - id: stop
    wait_for: { signal: { name: halt } }
"""


def signal(name: str, ident: str, data=None) -> SignalReceived:
    return SignalReceived(
        run_id="run1", name=name, signal_id=ident, payload={"signal": name, "data": data}
    )


def test_a_signal_during_the_wait_answers_it_and_one_before_is_kept_when_buffered():
    d = Driver(workflow(SIGNAL))
    started = d.start()
    [park] = [e for e in started if isinstance(e, Park)]
    assert park.wait["signal"] == {"name": "go", "timeout": "1d"}
    # During: the waiting step takes it (its timer is released).
    during = d.feed(signal("go", "s1", {"n": 1}))
    assert any(isinstance(e, CancelTimer) for e in during)
    assert d.state.steps["first"].output == {"signal": "go", "data": {"n": 1}}
    # The second wait parked; a duplicate of the first signal is taken once.
    assert d.feed(signal("go", "s1", {"n": 1})) == []
    assert d.state.steps["second"].status == StepStatus.WAITING
    d.feed(signal("go", "s2", {"n": 2}))
    assert d.state.steps["second"].output["data"] == {"n": 2}
    # Not buffered, not waited for yet: ignored (the API refused it already).
    d.feed(signal("halt", "s3"))
    assert d.state.signals == {}


def test_a_buffered_signal_sent_before_the_wait_is_taken_at_once():
    wf = workflow(
        """
trigger: { manual: {} }
signals: { go: { buffer: true } }
steps:
  - id: work
    http_call: { url: "http://w.test" }
  - id: wait
    wait_for: { signal: { name: go } }
"""
    )
    d = Driver(wf)
    started = d.start()
    d.feed(signal("go", "early", "before"))
    assert d.state.signals == {"go": [{"signal": "go", "data": "before"}]}
    after = d.answer(next(e for e in started if isinstance(e, Execute)), {})
    assert not any(isinstance(e, Park) for e in after)
    assert d.state.steps["wait"].output == {"signal": "go", "data": "before"}
    assert d.state.signals == {}
    assert d.state.status == RunStatus.SUCCEEDED


def test_a_signal_wait_times_out_like_any_wait():
    d = Driver(workflow(SIGNAL))
    started = d.start()
    [timer] = [e for e in started if isinstance(e, ScheduleTimer)]
    d.advance_clock(timedelta(days=1))
    d.fire(timer)
    assert d.state.steps["first"].error.kind == "timeout"
    assert d.state.status == RunStatus.FAILED


def test_replaying_the_same_events_gives_the_same_effects():
    d = Driver(workflow(PARENT, others={"settle": SETTLE}), trigger={"amount": 5})
    [start] = [e for e in d.start() if isinstance(e, StartChild)]
    d.feed(child_answer(start, "failed", error={"kind": "reverted", "message": "no"}))
    d.answer(d.pending(Execute)[0], {})
    replay = Driver(workflow(PARENT, others={"settle": SETTLE}), trigger={"amount": 5})
    for event, at in d.events:
        replay.now = at
        replay.feed(event)
    assert replay.effects == d.effects
    assert replay.state == d.state


def test_a_child_its_lane_never_started_still_answers_its_parent():
    from rflow.engine.children import never_started

    parent = ParentLink(run_id="p1", workflow="w", path="child", wait_id="k")
    start = Start(
        run_id="c1", workflow="settle", version="v", trigger_key="p1/child", parent=parent
    )
    settle = never_started(start, RunStatus.SKIPPED, "its concurrency group was busy")
    assert (settle.parent, settle.status, settle.error.kind) == (parent, "skipped", "cancelled")
    detached = start.model_copy(update={"parent": parent.model_copy(update={"wait_id": None})})
    assert never_started(detached, RunStatus.SKIPPED, "busy") is None
