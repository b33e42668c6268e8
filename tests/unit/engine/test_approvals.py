"""The engine's approval decisions: rejection and on_reject, escalation at a deadline."""

from __future__ import annotations

from datetime import timedelta

from rflow.engine import (
    Execute,
    Park,
    RunStatus,
    ScheduleTimer,
    Settle,
    StepStatus,
    Unpark,
    resume,
)
from rflow.failures import FailureKind
from tests.unit.engine.driver import T0, Driver, fail, workflow


def approval(wait: str = "", approval_fields: str = "", after: str = "") -> str:
    return f"""
trigger: {{ manual: {{}} }}
steps:
  - id: ok
    wait_for:
      approval: {{ prompt: "Pay ${{{{ trigger.amount }}}}?"{approval_fields} }}
      timeout: 1h
{wait}
  - id: pay
    notify: {{ channel: ops, message: "paid" }}
{after}
finally:
  - id: audit
    notify: {{ channel: ops, message: "ended ${{{{ run.status }}}}" }}
"""


def parked(d: Driver) -> Park:
    return [e for e in d.effects if isinstance(e, Park)][-1]


def settle_of(d: Driver) -> Settle:
    [settle] = [e for e in d.effects if isinstance(e, Settle)]
    return settle


def test_a_rejection_ends_the_run_rejected_runs_finally_and_is_not_dead_lettered():
    d = Driver(workflow(approval()), trigger={"amount": 5})
    d.start()
    d.resolve(parked(d), {"decision": "reject", "by": "alice"})
    [audit] = d.pending(Execute)
    assert audit.path == "audit" and audit.action["message"] == "ended rejected"
    d.answer(audit, output={})
    assert d.state.status == RunStatus.REJECTED
    assert "pay" not in d.state.steps
    step = d.state.steps["ok"]
    assert step.status == StepStatus.REJECTED and step.status.settled
    assert (step.error.kind, step.error.message) == (FailureKind.REJECTED, "rejected by alice")
    assert step.output == {"decision": "reject", "by": "alice"}
    settle = settle_of(d)
    # on_failure (dead_letter by default) applies to failures only.
    assert (settle.status, settle.on_failure, settle.journal) == (RunStatus.REJECTED, None, {})
    assert RunStatus.REJECTED.terminal


def test_on_reject_fail_makes_the_rejection_a_failure():
    d = Driver(workflow(approval("      on_reject: fail")))
    d.start()
    d.resolve(parked(d), {"decision": "reject", "by": "alice"})
    d.run()
    assert d.state.status == RunStatus.FAILED
    assert d.state.steps["ok"].status == StepStatus.FAILED
    assert d.state.error.kind == FailureKind.REJECTED
    assert settle_of(d).on_failure == "dead_letter"


def test_on_reject_continue_goes_on_with_the_decision_as_output():
    d = Driver(workflow(approval("      on_reject: continue")))
    d.start()
    d.resolve(parked(d), {"decision": "reject", "by": "bob"})
    assert [e.path for e in d.pending(Execute)] == ["pay"]
    d.run()
    assert d.state.status == RunStatus.SUCCEEDED
    assert d.state.steps["ok"].status == StepStatus.SUCCEEDED
    assert d.state.steps["ok"].output["decision"] == "reject"


def test_on_reject_goto_jumps():
    after = """  - id: refused
    notify: { channel: ops, message: "refused" }
"""
    d = Driver(workflow(approval("      on_reject: { goto: refused }", after=after)))
    d.start()
    d.resolve(parked(d), {"decision": "reject", "by": "bob"})
    assert [e.path for e in d.pending(Execute)] == ["refused"]
    assert d.state.steps["pay"].status == StepStatus.SKIPPED
    assert d.run().status == RunStatus.SUCCEEDED


def test_an_approval_is_unaffected_by_on_reject():
    d = Driver(workflow(approval("      on_reject: fail")))
    d.start()
    d.resolve(parked(d), {"decision": "approve", "by": "alice"})
    assert d.run().status == RunStatus.SUCCEEDED


def test_a_rejected_iteration_ends_a_foreach_run_rejected():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: each
    foreach: [1, 2]
    wait_for:
      approval: { prompt: "item ${{ item }}?" }
"""
    )
    d = Driver(wf)
    d.start()
    d.resolve(parked(d), {"decision": "reject", "by": "alice"})
    assert d.state.status == RunStatus.REJECTED
    assert d.state.steps["each"].status == StepStatus.REJECTED
    assert d.state.steps["each"].error.message == "iteration 0 rejected: rejected by alice"


ESCALATE = """      on_timeout:
        escalate: { channel: ops, extend: 30m, then: reject }"""


def test_escalation_notifies_and_extends_the_deadline_once():
    d = Driver(workflow(approval(ESCALATE, ", priority: urgent")), trigger={"amount": 5})
    d.start()
    [first] = d.pending(ScheduleTimer)
    assert first.due_at == T0 + timedelta(hours=1)
    effects = d.fire(first)
    assert not any(isinstance(e, Unpark) for e in effects)  # the approval still waits
    [park] = [e for e in effects if isinstance(e, Park)]
    assert park.wait_id == parked(d).wait_id
    assert (park.timeout_at, park.escalated_at) == (T0 + timedelta(minutes=90), d.now)
    [timer] = [e for e in effects if isinstance(e, ScheduleTimer)]
    assert (timer.due_at, timer.attempt, timer.purpose) == (park.timeout_at, 2, "wait_timeout")
    [notice] = [e for e in effects if isinstance(e, Execute)]
    assert (notice.kind, notice.path, notice.attempt) == ("notify", "ok", 2)
    assert notice.key == "w:t1:ok:escalation"
    assert notice.action["channel"] == "ops" and notice.action["severity"] == "critical"
    assert (
        "Pay 5?" in notice.action["message"] and "2026-03-01T13:30:00" in notice.action["message"]
    )
    record = d.state.steps["ok"]
    assert record.status == StepStatus.WAITING and record.escalation.channel == "ops"

    # The first deadline's timer firing again is stale; the notice's result is kept.
    assert d.fire(first) == []
    d.answer(notice, output={"delivered": True})
    assert d.state.steps["ok"].escalation.delivered
    assert d.state.steps["ok"].status == StepStatus.WAITING

    # The second deadline applies escalate.then: here, a rejection.
    d.fire(timer)
    assert d.state.steps["ok"].status == StepStatus.REJECTED
    assert d.state.steps["ok"].output["escalation"]["delivered"] is True
    d.run()
    assert d.state.status == RunStatus.REJECTED


def test_an_answer_after_the_escalation_carries_it_and_the_second_deadline_fails_by_default():
    wait = "      on_timeout: { escalate: { channel: ops, extend: 30m } }"
    d = Driver(workflow(approval(wait)))
    d.start()
    d.fire(d.pending(ScheduleTimer)[0])
    d.resolve(parked(d), {"decision": "approve", "by": "alice"})
    output = d.state.steps["ok"].output
    assert output["by"] == "alice" and output["escalation"]["channel"] == "ops"
    assert d.run().status == RunStatus.SUCCEEDED

    d = Driver(workflow(approval(wait)))
    d.start()
    d.fire(d.pending(ScheduleTimer)[0])
    notice = d.pending(Execute)[0]
    d.answer(notice, error=fail("data_unavailable", "HTTP 503 from the channel"))
    assert d.state.steps["ok"].escalation.error.message == "HTTP 503 from the channel"
    timers = [t for t in d.pending(ScheduleTimer) if t.attempt == 2]
    d.fire(timers[0])
    d.run()
    assert d.state.status == RunStatus.FAILED
    assert d.state.error.kind == FailureKind.TIMEOUT
    assert d.state.error.message == "no answer before the deadline, nor before its extension"


def test_resume_reissues_an_undelivered_escalation_notice_only():
    d = Driver(workflow(approval(ESCALATE)))
    d.start()
    d.fire(d.pending(ScheduleTimer)[0])
    again = resume(d.wf, d.state)
    kinds = sorted(type(e).__name__ for e in again)
    assert kinds == ["Execute", "Park", "ScheduleTimer"]
    [park] = [e for e in again if isinstance(e, Park)]
    assert park.escalated_at is not None
    d.answer(d.pending(Execute)[0], output={"delivered": True})
    assert not any(isinstance(e, Execute) for e in resume(d.wf, d.state))
