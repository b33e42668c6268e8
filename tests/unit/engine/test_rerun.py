"""Retrying a failed run: settled steps keep their results and keys, the rest runs again."""

from __future__ import annotations

import pytest

from rflow.engine import Execute, Journal, Park, Retry, RunStatus, StepStatus, advance, rerun
from tests.unit.engine.driver import T0, Driver, fail, workflow
from tests.unit.engine.test_foreach import payout

THREE = """
trigger: { manual: {} }
permissions: { relayers: [payout] }
steps:
  - id: pay
    send_transaction: { network: local, relayer: payout, to: "0x0000000000000000000000000000000000000001", value: 1 }
  - id: report
    http_call: { url: "http://x.test/report", method: POST, body: { tx: "${{ steps.pay.tx.hash }}" } }
  - id: done
    http_call: { url: "http://x.test/done" }
finally:
  - id: audit
    http_call: { url: "http://x.test/audit" }
"""

SENT = {"tx": {"hash": "0xabc", "to": "0x01", "value": 1, "status": "success"}}


def failed_run(body: str = THREE, answer=None, trigger=None) -> Driver:
    d = Driver(workflow(body), trigger=trigger)
    d.run(answer or (lambda e: SENT if e.path == "pay" else fail("reverted", "no")))
    assert d.state.status == RunStatus.FAILED
    return d


def retried(d: Driver, from_step: str | None = None) -> Driver:
    """A driver for the run retrying ``d``'s failed run."""
    r = Driver(d.wf)
    r.feed(Retry(run_id="run2", previous=d.state, from_step=from_step))
    return r


def keys(d: Driver) -> list[tuple[str, str]]:
    return [(e.path, e.key) for e in d.effects if isinstance(e, Execute)]


def test_a_retry_runs_again_from_the_failed_step_under_new_keys():
    d = failed_run()
    assert [p for p, _ in keys(d)] == ["pay", "report", "audit"]
    r = retried(d)
    # The send is kept, never asked for again; the failed step gets a new visit.
    assert keys(r) == [("report", "w:t1:report#2")]
    assert r.state.steps["pay"] == d.state.steps["pay"]
    assert (r.state.run_id, r.state.retry_of, r.state.trigger_key) == ("run2", "run1", "t1")
    # The kept step's output still feeds later steps.
    assert r.pending(Execute)[0].action["body"] == {"tx": "0xabc"}
    state = r.run(lambda e: {"ok": e.path})
    assert state.status == RunStatus.SUCCEEDED
    assert [p for p, _ in keys(r)] == ["report", "done", "audit"]
    # finally runs again, under a key of its own: the audit of the retried outcome.
    assert ("audit", "w:t1:audit#2") in keys(r)


def test_the_retried_run_journals_its_link_and_the_steps_it_keeps():
    r = retried(failed_run())
    entries = [e for e in r.effects if isinstance(e, Journal)]
    started = entries[0]
    assert (started.event, started.data["retry_of"]) == ("run_started", "run1")
    kept = [e for e in entries if e.event == "step_settled" and e.data.get("kept_from")]
    assert [(e.path, e.status, e.data["output"]) for e in kept] == [("pay", "succeeded", SENT)]
    # A kept step keeps its timings: the read model shows when it ran, not when it was kept.
    pay = failed_run().state.steps["pay"]
    assert kept[0].data["started_at"] == pay.started_at.isoformat()
    assert kept[0].data["settled_at"] == pay.settled_at.isoformat()


def test_a_failed_foreach_keeps_its_settled_iterations():
    # Five payouts, the fourth fails: a retry pays the fourth and fifth only.
    def pay(e):
        return fail("reverted") if e.path == "pay[3]" else {"paid": e.path}

    d = failed_run(payout(), pay, trigger={"recipients": ["a", "b", "c", "d", "e"]})
    assert d.state.steps["pay"].fanout.launched == 4
    r = retried(d)
    assert keys(r) == [("pay[3]", "w:t1:pay[3]#2")]
    state = r.run(lambda e: {"paid": e.path})
    assert state.status == RunStatus.SUCCEEDED
    paths = [p for p, _ in keys(r)]
    assert paths == ["pay[3]", "pay[4]", "after"]
    assert state.steps["pay"].output == [{"paid": f"pay[{i}]"} for i in range(5)]
    for i in range(3):
        assert state.steps[f"pay[{i}]"] == d.state.steps[f"pay[{i}]"]


def test_a_parallel_foreach_retry_runs_only_the_unsettled_iterations():
    def pay(e):
        return fail("reverted") if e.path in ("pay[1]", "pay[4]") else {"paid": e.path}

    d = failed_run(payout("    max_parallel: 3"), pay, trigger={"recipients": list(range(8))})
    settled = {
        p for p, rec in d.state.steps.items() if p != "pay" and rec.status == StepStatus.SUCCEEDED
    }
    r = retried(d)
    state = r.run(lambda e: {"paid": e.path})
    ran = {p for p, _ in keys(r) if p.startswith("pay[")}
    assert ran == {f"pay[{i}]" for i in range(8)} - settled
    assert state.steps["pay"].output == [
        d.state.steps[f"pay[{i}]"].output if f"pay[{i}]" in settled else {"paid": f"pay[{i}]"}
        for i in range(8)
    ]


def test_from_an_earlier_step_lists_and_sends_again():
    d = failed_run()
    plan = rerun.plan(d.wf, d.state, "pay")
    assert [r.path for r in plan.resent] == ["pay"]
    assert rerun.plan(d.wf, d.state).resent == ()
    r = retried(d, from_step="pay")
    assert keys(r) == [("pay", "w:t1:pay#2")]
    assert "pay" not in r.state.steps or r.state.steps["pay"].status == StepStatus.RUNNING


@pytest.mark.parametrize(
    ("from_step", "message"),
    [
        ("done", "comes after 'report'"),
        ("nope", "has no step 'nope'"),
        ("audit", "is a finally step"),
    ],
)
def test_a_retry_that_cannot_be_done_says_why(from_step, message):
    d = failed_run()
    with pytest.raises(rerun.RerunError, match=message):
        rerun.plan(d.wf, d.state, from_step)
    # The engine ignores such a request rather than starting a broken run.
    assert advance(d.wf, None, Retry(run_id="run2", previous=d.state, from_step=from_step), T0) == (
        None,
        [],
    )


def test_only_a_failed_run_can_be_retried():
    d = Driver(workflow(THREE))
    d.run()
    with pytest.raises(rerun.RerunError, match="only a failed run"):
        rerun.plan(d.wf, d.state)


def test_a_redelivered_retry_changes_nothing():
    r = retried(failed_run())
    state, effects = advance(r.wf, r.state, Retry(run_id="run2", previous=r.state), T0)
    assert (state, effects) == (r.state, [])


APPROVE = """
trigger: { manual: {} }
steps:
  - id: ok
    wait_for: { approval: { prompt: "go?" } }
  - id: after
    http_call: { url: "http://x.test/after" }
"""


def test_a_run_that_parks_and_moves_on_journals_its_status():
    d = Driver(workflow(APPROVE))
    d.start()
    [status] = [e for e in d.effects if isinstance(e, Journal) and e.event == "run_status"]
    assert status.status == "waiting"
    assert status.data["waiting_for"].startswith("an approval at step ok until ")
    assert d.state.status == RunStatus.WAITING
    [park] = d.pending(Park) or [e for e in d.effects if isinstance(e, Park)]
    moved = d.resolve(park, {"decision": "approve"})
    assert [
        (e.event, e.status) for e in moved if isinstance(e, Journal) and e.event == "run_status"
    ] == [("run_status", "running")]
    # A run that never parks journals no status change at all.
    plain = Driver(workflow(THREE))
    plain.run()
    assert not [e for e in plain.effects if isinstance(e, Journal) and e.event == "run_status"]


BLOCK = """
trigger: { manual: {} }
permissions: { relayers: [payout] }
steps:
  - id: flow
    try:
      - id: pay
        send_transaction: { network: local, relayer: payout, to: "0x0000000000000000000000000000000000000001", value: 1 }
      - id: bridge
        http_call: { url: "http://x.test/bridge" }
"""


def test_a_block_runs_again_whole_and_its_sends_are_named_as_sent_again():
    d = failed_run(BLOCK, answer=lambda e: SENT if e.path == "pay" else fail("reverted", "no"))
    plan = rerun.plan(d.wf, d.state)
    assert plan.rerun == ("flow",)
    assert "pay" not in plan.kept and "bridge" not in plan.kept
    assert [r.path for r in plan.resent] == ["pay"]
    r = retried(d)
    [pay] = [e for e in r.effects if isinstance(e, Execute) and e.path == "pay"]
    assert pay.key == "w:t1:pay#2"  # a new visit: a new key for what runs again
