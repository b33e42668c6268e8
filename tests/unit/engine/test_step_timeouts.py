"""A step's timeout where the engine honours it: a send's deadline, a wait's on_timeout."""

from __future__ import annotations

from datetime import timedelta

from rflow.engine import Execute, Park, RunStatus, ScheduleTimer, StepStatus, resume
from rflow.lang import validate_text
from rflow.lang.model import Workflow
from tests.unit.engine.driver import T0, Driver, fail

PROJECT = """
networks:
  local: { chain_id: 31337 }
relayers:
  payout: { key_env: PAYOUT_KEY, networks: [local] }
workflows:
  w:
    trigger: { manual: {} }
    permissions: { relayers: [payout] }
    steps:
"""


def workflow(steps: str) -> Workflow:
    report = validate_text(PROJECT + steps, {"PAYOUT_KEY": "0x01"})
    assert report.ok, "\n".join(str(d) for d in report.diagnostics)
    return report.project.workflows["w"]


SEND = """
      - id: pay
        timeout: 2m
        retry: { max_attempts: 2, backoff: 10s }
        send_transaction: { network: local, relayer: payout, to: "0x000000000000000000000000000000000000dEaD", value: 1 wei }
"""


def test_a_send_carries_the_deadline_of_its_attempt():
    d = Driver(workflow(SEND))
    d.start()
    [first] = d.pending(Execute)
    assert first.deadline == T0 + timedelta(minutes=2)
    # A resumed run hands the relayer the same deadline, whatever the time now.
    d.advance_clock(timedelta(seconds=30))
    assert [e for e in resume(d.wf, d.state) if isinstance(e, Execute)] == [first]

    # A retried attempt gets a deadline of its own, from when it starts.
    d.answer(first, error=fail("rpc_timeout"))
    [timer] = d.pending(ScheduleTimer)
    d.fire(timer)
    [second] = d.pending(Execute)
    assert second.attempt == 2 and second.key == first.key
    assert second.deadline == timer.due_at + timedelta(minutes=2)


def test_a_send_without_a_timeout_has_no_deadline_even_after_a_retry():
    d = Driver(workflow(SEND.replace("        timeout: 2m\n", "")))
    d.start()
    [first] = d.pending(Execute)
    assert first.deadline is None
    d.answer(first, error=fail("rpc_timeout"))
    d.fire(d.pending(ScheduleTimer)[0])
    assert d.pending(Execute)[0].deadline is None


def test_a_send_that_timed_out_fails_the_step_with_kind_timeout():
    d = Driver(workflow(SEND))
    d.start()
    [send] = d.pending(Execute)
    d.answer(send, error=fail("timeout", "cancelled at its deadline"))
    assert d.state.status == RunStatus.FAILED
    assert d.state.steps["pay"].error.kind == "timeout"
    assert d.pending(ScheduleTimer) == []  # a timeout is never retried


def test_an_other_action_has_no_deadline():
    d = Driver(
        workflow(
            """
      - id: call
        timeout: 5s
        http_call: { url: "http://x.test/a" }
"""
        )
    )
    d.start()
    [call] = d.pending(Execute)
    assert (call.timeout, call.deadline) == (5.0, None)


WAIT = """
      - id: hook
        timeout: 10m
        wait_for:
          webhook: { path: /hooks/in, auth: { type: none } }
          on_timeout: continue
      - id: after
        http_call: { url: "http://x.test/after" }
"""


def test_a_step_timeout_on_a_wait_fires_its_on_timeout():
    d = Driver(workflow(WAIT))
    d.start()
    [park] = [e for e in d.effects if isinstance(e, Park)]
    [timer] = d.pending(ScheduleTimer)
    assert (timer.purpose, timer.due_at) == ("wait_timeout", T0 + timedelta(minutes=10))
    assert park.timeout_at == timer.due_at
    d.fire(timer)
    assert d.state.steps["hook"].status == StepStatus.SUCCEEDED
    assert d.state.steps["hook"].output == {"timed_out": True}
    assert [e.path for e in d.pending(Execute)] == ["after"]


def test_a_step_timeout_on_a_wait_that_fails_says_how_long_it_waited():
    d = Driver(workflow(WAIT.replace("on_timeout: continue", "on_timeout: fail")))
    d.start()
    d.fire(d.pending(ScheduleTimer)[0])
    error = d.state.steps["hook"].error
    assert (error.kind, error.message) == ("timeout", "no answer within 0:10:00")
