"""Steps in order, if:, results by id, continue_on_error, finally and on_failure."""

from __future__ import annotations

from rflow.engine import Execute, Journal, RunState, RunStatus, Settle, StepStatus
from tests.unit.engine.driver import Driver, fail, workflow

THREE = """
trigger: { manual: {} }
steps:
  - id: a
    http_call: { url: "http://x.test/a" }
  - id: b
    http_call: { url: "http://x.test/b", method: POST, body: { prev: "${{ steps.a.output.n }}" } }
  - id: c
    notify: { channel: ops, message: "done ${{ steps.b.output.n }}" }
"""


def test_steps_run_strictly_in_order_and_see_earlier_results():
    d = Driver(workflow(THREE))
    effects = d.start()
    assert [e.path for e in effects if isinstance(e, Execute)] == ["a"]
    effects = d.answer(d.pending(Execute)[0], output={"n": 1})
    [b] = [e for e in effects if isinstance(e, Execute)]
    assert b.path == "b" and b.action["body"] == {"prev": 1}
    effects = d.answer(b, output={"n": 2})
    [c] = [e for e in effects if isinstance(e, Execute)]
    assert c.action["message"] == "done 2"
    d.answer(c, output={"sent": True})
    assert d.state.status == RunStatus.SUCCEEDED
    assert d.state.settled
    settle = [e for e in d.effects if isinstance(e, Settle)]
    assert len(settle) == 1 and settle[0].status == RunStatus.SUCCEEDED


def test_idempotency_keys_name_workflow_trigger_and_step():
    d = Driver(workflow(THREE))
    d.run()
    keys = [e.key for e in d.effects if isinstance(e, Execute)]
    assert keys == ["w:t1:a", "w:t1:b", "w:t1:c"]


def test_if_false_skips_the_step_and_the_run_goes_on():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: a
    if: "${{ trigger.go == true }}"
    http_call: { url: "http://x.test/a" }
  - id: b
    http_call: { url: "http://x.test/b" }
"""
    )
    d = Driver(wf, trigger={"go": False})
    state = d.run()
    assert state.steps["a"].status == StepStatus.SKIPPED
    assert state.steps["b"].status == StepStatus.SUCCEEDED
    assert [e.path for e in d.effects if isinstance(e, Execute)] == ["b"]


def test_a_terminal_failure_fails_the_run_and_later_steps_never_run():
    d = Driver(workflow(THREE))
    state = d.run(lambda e: fail("reverted") if e.path == "b" else {"n": 0})
    assert state.status == RunStatus.FAILED
    assert state.error.kind == "reverted"
    assert "c" not in state.steps
    [settle] = [e for e in d.effects if isinstance(e, Settle)]
    assert settle.on_failure == "dead_letter"
    assert settle.journal["steps"]["b"]["error"]["kind"] == "reverted"


def test_continue_on_error_turns_the_failure_into_data():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: a
    http_call: { url: "http://x.test/a" }
    continue_on_error: true
  - id: b
    notify: { channel: ops, message: "a was ${{ steps.a.status }}: ${{ steps.a.error.kind }}" }
"""
    )
    d = Driver(wf)
    state = d.run(lambda e: fail("assert_failed") if e.path == "a" else None)
    assert state.status == RunStatus.SUCCEEDED
    b = next(e for e in d.effects if isinstance(e, Execute) and e.path == "b")
    assert b.action["message"] == "a was failed: assert_failed"


def test_finally_runs_on_success_and_failure_and_sees_run_status():
    body = """
trigger: { manual: {} }
steps:
  - id: a
    http_call: { url: "http://x.test/a" }
finally:
  - id: audit
    http_call: { url: "${AUDIT_URL}", method: POST, body: { run: "${{ run.id }}", status: "${{ run.status }}" } }
"""
    for outcome, expected in ((None, "succeeded"), (fail("reverted"), "failed")):
        d = Driver(workflow(body))
        state = d.run(lambda e, outcome=outcome: outcome if e.path == "a" else {})
        audit = next(e for e in d.effects if isinstance(e, Execute) and e.path == "audit")
        assert audit.action["body"] == {"run": "run1", "status": expected}
        # The value is filled in by the executor, never in the run's own record of it.
        assert audit.action["url"] == "${AUDIT_URL}"
        assert state.status == expected


def test_a_finally_failure_is_journaled_but_does_not_change_the_outcome():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: a
    http_call: { url: "http://x.test/a" }
finally:
  - id: f1
    http_call: { url: "http://x.test/f1" }
  - id: f2
    http_call: { url: "http://x.test/f2" }
"""
    )
    d = Driver(wf)
    state = d.run(lambda e: fail("data_unavailable") if e.path == "f1" else {})
    assert state.status == RunStatus.SUCCEEDED
    assert state.steps["f1"].status == StepStatus.FAILED
    assert state.steps["f2"].status == StepStatus.SUCCEEDED


def test_on_failure_drop_and_halt_are_reported():
    for policy in ("drop", "halt"):
        wf = workflow(
            f"""
trigger: {{ manual: {{}} }}
on_failure: {policy}
steps:
  - id: a
    http_call: {{ url: "http://x.test/a" }}
"""
        )
        d = Driver(wf)
        d.run(lambda e: fail("reverted"))
        [settle] = [e for e in d.effects if isinstance(e, Settle)]
        assert settle.on_failure == policy
        # Not dead-lettered, but its final state is kept: a retry continues from it.
        assert RunState.model_validate(settle.journal) == d.state


def test_duplicate_and_stale_results_are_ignored():
    d = Driver(workflow(THREE))
    d.start()
    a = d.pending(Execute)[0]
    d.answer(a, output={"n": 1})
    before = d.state
    assert d.answer(a, output={"n": 999}) == []
    assert d.state == before
    assert d.state.steps["a"].output == {"n": 1}


def test_a_duplicate_start_changes_nothing():
    d = Driver(workflow(THREE))
    d.start()
    before = d.state
    assert d.start() == []
    assert d.state == before


def test_events_after_settlement_are_ignored():
    d = Driver(workflow(THREE))
    state = d.run()
    a = next(e for e in d.effects if isinstance(e, Execute))
    assert d.answer(a, output={"late": True}) == []
    assert d.state == state


def test_journal_tells_the_story():
    d = Driver(workflow(THREE))
    d.run()
    events = [(j.event, j.path, j.status) for j in d.effects if isinstance(j, Journal)]
    assert events[0] == ("run_started", None, "running")
    assert ("step_started", "a", "running") in events
    assert ("step_settled", "c", "succeeded") in events
    assert events[-1] == ("run_settled", None, "succeeded")


def test_expression_errors_at_run_time_fail_with_invalid_input():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: a
    http_call: { url: "http://x.test/a", method: POST, body: { n: "${{ trigger.n + 'x' }}" } }
"""
    )
    state = Driver(wf, trigger={"n": 1}).run()
    assert state.status == RunStatus.FAILED
    assert state.error.kind == "invalid_input"
