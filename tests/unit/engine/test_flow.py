"""choose/goto, delay, wait_for, cancellation, inline commands and workflow state."""

from __future__ import annotations

from datetime import timedelta

from rflow.engine import Execute, Journal, Park, RunStatus, ScheduleTimer, StepStatus, Unpark
from rflow.engine.context import compare
from tests.unit.engine.driver import T0, Driver, fail, workflow

LOOP = """
trigger: { manual: {} }
steps:
  - id: poll
    http_call: { url: "http://x.test/status" }
  - id: decide
    choose:
      branches:
        - when: { value: "${{ steps.poll.output.state }}", op: equals, to: done }
          goto: report
        - when: "${{ steps.poll.output.state == 'pending' }}"
          goto: poll
      default: continue
  - id: odd
    notify: { channel: ops, message: "unexpected ${{ steps.poll.output.state }}" }
  - id: report
    notify: { channel: ops, message: finished }
"""


def test_choose_jumps_back_and_revisits_get_fresh_keys():
    d = Driver(workflow(LOOP))
    states = iter(["pending", "pending", "done"])
    state = d.run(lambda e: {"state": next(states)} if e.path == "poll" else {})
    assert state.status == RunStatus.SUCCEEDED
    polls = [e.key for e in d.effects if isinstance(e, Execute) and e.path == "poll"]
    assert polls == ["w:t1:poll", "w:t1:poll#2", "w:t1:poll#3"]
    assert state.steps["odd"].status == StepStatus.SKIPPED  # jumped over
    assert state.steps["report"].status == StepStatus.SUCCEEDED
    assert len(state.history) == 4  # two archived visits of poll and decide


def test_choose_default_continue_falls_through():
    d = Driver(workflow(LOOP))
    state = d.run(lambda e: {"state": "weird"} if e.path == "poll" else {})
    odd = next(e for e in d.effects if isinstance(e, Execute) and e.path == "odd")
    assert odd.action["message"] == "unexpected weird"
    assert state.steps["decide"].output == {"branch": "default", "goto": None}


def test_an_endless_goto_loop_is_stopped():
    d = Driver(workflow(LOOP))
    state = d.run(lambda e: {"state": "pending"} if e.path == "poll" else {}, limit=100_000)
    assert state.status == RunStatus.FAILED
    assert "goto loop" in state.error.message
    assert len(state.history) == 100  # bounded; the journal has every visit


def test_choose_operators_compare_like_the_seeds_say():
    assert compare("greater_than", "100", 99)
    assert compare("less_equal", 5, "5")
    assert compare("contains", ["a", "b"], "a") and compare("not_contains", "abc", "z")
    assert compare("starts_with", "0xabc", "0x") and compare("ends_with", "file.json", ".json")
    assert compare("is_empty", "") and compare("is_empty", None) and compare("is_not_empty", [1])
    assert compare("equals", 1, 1) and compare("not_equals", "1", 1)


DELAY = """
trigger: { manual: {} }
steps:
  - id: nap
    delay: { duration: 2h }
  - id: wake
    notify: { channel: ops, message: "woke" }
"""


def test_delay_is_a_durable_timer():
    d = Driver(workflow(DELAY))
    d.start()
    [timer] = d.pending(ScheduleTimer)
    assert timer.purpose == "delay" and timer.due_at == T0 + timedelta(hours=2)
    assert d.state.status == RunStatus.WAITING
    assert d.pending(Execute) == []
    d.fire(timer)
    assert [e.path for e in d.pending(Execute)] == ["wake"]


def test_a_parked_step_is_journaled_waiting_as_its_run_is():
    """One word for a step that waits: the read model's step says ``waiting`` from its
    start, as the live state and the run do, never ``running``."""
    d = Driver(workflow(DELAY))
    d.start()
    started = [j for j in d.effects if isinstance(j, Journal) and j.event == "step_started"]
    assert [(j.path, j.status) for j in started] == [("nap", "waiting")]
    assert d.state.steps["nap"].status == StepStatus.WAITING
    assert d.state.status == RunStatus.WAITING


def test_delay_until_reads_the_time_zone():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: nap
    delay: { until: "2026-03-02T09:00:00", timezone: Europe/Paris }
"""
    )
    d = Driver(wf)
    d.start()
    [timer] = d.pending(ScheduleTimer)
    assert timer.due_at.isoformat() == "2026-03-02T09:00:00+01:00"


APPROVAL = """
trigger: { manual: {} }
steps:
  - id: ok
    wait_for:
      approval: { prompt: "Send ${{ trigger.amount }}?" }
      timeout: 1h
      on_timeout: reject
  - id: go
    notify: { channel: ops, message: "approved by ${{ steps.ok.output.by }}" }
"""


def test_an_approval_parks_and_resumes_exactly_once():
    d = Driver(workflow(APPROVAL), trigger={"amount": 5})
    d.start()
    [park] = [e for e in d.effects if isinstance(e, Park)]
    assert park.wait["approval"]["prompt"] == "Send 5?"
    assert park.timeout_at == T0 + timedelta(hours=1)
    d.resolve(park, {"decision": "approve", "by": "alice"})
    assert [e.path for e in d.pending(Execute)] == ["go"]
    assert any(isinstance(e, Unpark) for e in d.effects)
    before = d.state
    assert d.resolve(park, {"decision": "approve", "by": "mallory"}) == []
    assert d.state == before


def test_a_rejection_ends_the_run_rejected():
    d = Driver(workflow(APPROVAL), trigger={"amount": 5})
    d.start()
    [park] = [e for e in d.effects if isinstance(e, Park)]
    d.resolve(park, {"decision": "reject", "by": "bob"})
    assert d.state.status == RunStatus.REJECTED
    assert d.state.steps["ok"].status == StepStatus.REJECTED
    assert d.state.steps["ok"].error.message == "rejected by bob"


def test_a_wait_timeout_applies_on_timeout():
    d = Driver(workflow(APPROVAL), trigger={"amount": 5})
    d.start()
    [timer] = d.pending(ScheduleTimer)
    assert timer.purpose == "wait_timeout"
    d.fire(timer)
    assert d.state.steps["ok"].status == StepStatus.REJECTED
    assert d.state.status == RunStatus.REJECTED
    assert d.state.steps["ok"].output == {"timed_out": True, "decision": "reject"}
    [park] = [e for e in d.effects if isinstance(e, Park)]
    assert d.resolve(park, {"decision": "approve"}) == []  # too late


def test_cancel_stops_a_parked_run_at_once_and_runs_finally():
    wf = workflow(
        DELAY.strip()
        + """
finally:
  - id: cleanup
    notify: { channel: ops, message: "status ${{ run.status }}" }
"""
    )
    d = Driver(wf)
    d.start()
    d.cancel("superseded by a newer run")
    cleanup = d.pending(Execute)
    assert [e.path for e in cleanup] == ["cleanup"]
    assert cleanup[0].action["message"] == "status cancelled"
    d.answer(cleanup[0], output={})
    assert d.state.status == RunStatus.CANCELLED
    assert "wake" not in d.state.steps


def test_cancel_waits_for_a_running_action_to_finish():
    d = Driver(
        workflow(DELAY.replace("delay: { duration: 2h }", 'http_call: { url: "http://x.test" }'))
    )
    d.start()
    [running] = d.pending(Execute)
    d.cancel()
    assert d.state.status != RunStatus.CANCELLED  # the action in flight is not cut off
    d.answer(running, output={"sent": True})
    assert d.state.status == RunStatus.CANCELLED
    assert d.state.steps["nap"].status == StepStatus.SUCCEEDED
    assert "wake" not in d.state.steps


def test_inline_commands_assert_and_fail():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: check
    command: { name: assert, args: { that: "${{ trigger.n > 1 }}", message: "n too small" } }
  - id: log
    command: { name: log, args: { message: "n=${{ trigger.n }}" } }
"""
    )
    assert Driver(wf, trigger={"n": 2}).run().steps["log"].output == {"message": "n=2"}
    state = Driver(wf, trigger={"n": 1}).run()
    assert state.status == RunStatus.FAILED
    assert state.error.kind == "assert_failed" and state.error.message == "n too small"


def test_state_steps_update_the_runs_view_of_state():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: save
    state_set: { last: "${{ trigger.n }}" }
  - id: use
    notify: { channel: ops, message: "last=${{ state.last }}" }
"""
    )
    d = Driver(wf, trigger={"n": 7}, state={"last": 1})
    d.start()
    [save] = d.pending(Execute)
    assert save.kind == "state_set" and save.action == {"last": 7}
    d.answer(save, output={"state": {"last": 7}})
    [use] = d.pending(Execute)
    assert use.action["message"] == "last=7"


def test_retrying_steps_are_cancelled_too():
    d = Driver(
        workflow(
            DELAY.replace(
                "delay: { duration: 2h }",
                'http_call: { url: "http://x.test" }\n    retry: { max_attempts: 3 }',
            )
        )
    )
    d.start()
    d.answer(d.pending(Execute)[0], error=fail("rate_limited"))
    d.cancel()
    assert d.state.status == RunStatus.CANCELLED


def test_a_hyphenated_step_id_is_read_by_steps_dot_id_as_github_actions_does():
    d = Driver(
        workflow(
            """
trigger: { manual: {} }
steps:
  - id: fetch-price
    http_call: { url: "http://x.test/price" }
  - id: use-it
    if: "${{ steps.fetch-price.status == 'succeeded' and steps.fetch-price.output.p - 1 > 0 }}"
    notify: { channel: ops, message: "price ${{ steps.fetch-price.output.p }}" }
"""
        )
    )
    state = d.run(lambda e: {"p": 5} if e.path == "fetch-price" else {})
    assert state.status == RunStatus.SUCCEEDED
    notify = next(e for e in d.effects if isinstance(e, Execute) and e.path == "use-it")
    assert notify.action["message"] == "price 5"
