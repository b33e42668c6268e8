"""parallel and race, decided by the pure engine: feed events, expect effects."""

from __future__ import annotations

from datetime import timedelta

from rflow.engine import (
    Execute,
    Park,
    RunStatus,
    ScheduleTimer,
    StepStatus,
    TimerFired,
    Unpark,
    resume,
)
from rflow.engine.effects import CancelTimer, Withdraw
from rflow.engine.events import SignalReceived
from tests.unit.engine.driver import Driver, fail, workflow

QUOTES = """
trigger: { manual: {} }
steps:
  - id: quotes
    parallel:
      - id: uni
        http_call: { url: "http://a.test/quote" }
        retry: { max_attempts: 3, backoff: 1s }
      - id: curve
        http_call: { url: "http://b.test/quote" }
  - id: best
    notify:
      channel: ops
      message: "${{ steps.quotes.branches.uni.output.price }} ${{ steps.quotes.output.curve.price }}"
"""


def executes(effects, path=None):
    return [e for e in effects if isinstance(e, Execute) and (path is None or e.path == path)]


def test_a_parallel_starts_every_branch_at_once_and_joins_after_a_retried_one():
    d = Driver(workflow(QUOTES))
    started = d.start()
    assert [e.path for e in executes(started)] == ["uni", "curve"]
    assert [e.key for e in executes(started)] == ["w:t1:uni", "w:t1:curve"]
    curve = executes(started, "curve")[0]
    d.answer(curve, {"price": 2})
    assert d.state.steps["quotes"].status == StepStatus.RUNNING  # uni still out
    uni = executes(started, "uni")[0]
    retried = d.answer(uni, error=fail("rpc_timeout"))
    [timer] = [e for e in retried if isinstance(e, ScheduleTimer)]
    again = d.fire(timer)
    [second] = executes(again, "uni")
    assert (second.attempt, second.key) == (2, "w:t1:uni")  # a retry keeps the key
    joined = d.answer(second, {"price": 1})
    assert d.state.steps["quotes"].status == StepStatus.SUCCEEDED
    assert d.state.steps["quotes"].output == {"uni": {"price": 1}, "curve": {"price": 2}}
    [best] = executes(joined, "best")
    assert best.action["message"] == "1 2"


FAILING = """
trigger: { manual: {} }
steps:
  - id: legs
    parallel:
      - id: pay
        send_transaction: { network: local, relayer: payout, to: "0x0000000000000000000000000000000000000001", value: 1 }
      - id: watch
        wait_for: { webhook: { path: /hooks/watch, auth: { type: none } }, timeout: 1h }
      - id: quote
        http_call: { url: "http://a.test/quote" }
permissions: { relayers: [payout] }
"""


def test_a_failed_branch_stops_the_others_each_releasing_what_it_holds():
    d = Driver(workflow(FAILING))
    started = d.start()
    [park] = [e for e in started if isinstance(e, Park)]
    stopped = d.answer(executes(started, "quote")[0], error=fail("assert_failed", "no quote"))
    # The wait's row and its timer go at once; the send, handed to the relayer, is
    # withdrawn (never signed if not signed yet) and the block waits for its answer.
    assert any(isinstance(e, Unpark) and e.wait_id == park.wait_id for e in stopped)
    assert any(isinstance(e, CancelTimer) and e.path == "watch" for e in stopped)
    [withdraw] = [e for e in stopped if isinstance(e, Withdraw)]
    assert (withdraw.path, withdraw.key) == ("pay", "w:t1:pay")
    assert d.state.steps["watch"].status == StepStatus.CANCELLED
    assert d.state.steps["legs"].status == StepStatus.RUNNING
    d.answer(executes(started, "pay")[0], error=fail("cancelled", "withdrawn before it was signed"))
    legs = d.state.steps["legs"]
    assert legs.status == StepStatus.FAILED
    assert legs.error.kind == "assert_failed"
    assert legs.error.message == "branch quote failed: no quote"
    assert d.state.steps["pay"].status == StepStatus.CANCELLED
    assert d.state.status == RunStatus.FAILED


def test_a_stopped_send_that_went_through_is_recorded_as_sent():
    d = Driver(workflow(FAILING))
    started = d.start()
    d.answer(executes(started, "quote")[0], error=fail("assert_failed", "no quote"))
    d.answer(executes(started, "pay")[0], {"tx": {"hash": "0xabc"}})
    pay = d.state.steps["pay"]
    assert (pay.status, pay.output) == (StepStatus.SUCCEEDED, {"tx": {"hash": "0xabc"}})
    assert d.state.steps["legs"].status == StepStatus.FAILED


RACE = """
trigger: { manual: {} }
steps:
  - id: answer
    race:
      - id: human
        wait_for: { approval: { prompt: "Pay?" } }
      - id: deadline
        delay: { duration: 1h }
  - id: after
    command: { name: log, args: { message: "won by ${{ steps.answer.winner }}" } }
"""


def test_a_race_won_by_the_human_cancels_the_deadline():
    d = Driver(workflow(RACE))
    started = d.start()
    [park] = [e for e in started if isinstance(e, Park)]
    decided = d.resolve(park, {"decision": "approve", "by": "treasury"})
    assert any(isinstance(e, CancelTimer) and e.purpose == "delay" for e in decided)
    state = d.state
    assert state.steps["answer"].fork.winner == "human"
    assert state.steps["deadline"].status == StepStatus.CANCELLED
    assert state.steps["deadline"].error.message == "the race was won by human"
    assert state.steps["answer"].output == {"decision": "approve", "by": "treasury"}
    assert state.steps["after"].output == {"message": "won by human"}
    assert state.status == RunStatus.SUCCEEDED


def test_a_race_won_by_the_deadline_releases_the_approval():
    d = Driver(workflow(RACE))
    started = d.start()
    [park] = [e for e in started if isinstance(e, Park)]
    [delay] = [e for e in started if isinstance(e, ScheduleTimer) and e.purpose == "delay"]
    fired = d.fire(delay)
    assert any(isinstance(e, Unpark) and e.wait_id == park.wait_id for e in fired)
    assert d.state.steps["answer"].fork.winner == "deadline"
    assert d.state.steps["human"].status == StepStatus.CANCELLED
    assert d.state.steps["after"].output == {"message": "won by deadline"}
    # The approval's answer arriving late changes nothing.
    late = d.resolve(park, {"decision": "approve", "by": "treasury"})
    assert late == []


SEND_RACE = """
trigger: { manual: {} }
signals: { go: { buffer: true } }
steps:
  - id: hold
    wait_for: { approval: { prompt: "hold" } }
  - id: either
    race:
      - id: pay
        send_transaction: { network: local, relayer: payout, to: "0x0000000000000000000000000000000000000001", value: 1 }
      - id: go
        wait_for: { signal: { name: go } }
permissions: { relayers: [payout] }
"""


def test_a_send_cancelled_in_the_decision_that_asked_for_it_is_never_handed_out():
    d = Driver(workflow(SEND_RACE))
    started = d.start()
    d.feed(SignalReceived(run_id="run1", name="go", signal_id="s1", payload={"data": 1}))
    [park] = [e for e in started if isinstance(e, Park)]
    raced = d.resolve(park, {"decision": "approve", "by": "x"})
    # The kept signal wins at once: the send was asked for and stopped in one decision.
    assert executes(raced) == []
    assert not [e for e in raced if isinstance(e, Withdraw)]
    assert d.state.steps["pay"].status == StepStatus.CANCELLED
    assert d.state.steps["either"].fork.winner == "go"
    assert d.state.status == RunStatus.SUCCEEDED


def test_a_race_whose_winner_fails_fails_with_its_failure():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: either
    race:
      - id: a
        http_call: { url: "http://a.test" }
      - id: b
        delay: { duration: 1h }
"""
    )
    d = Driver(wf)
    started = d.start()
    d.answer(executes(started, "a")[0], error=fail("data_unavailable", "down"))
    either = d.state.steps["either"]
    assert either.status == StepStatus.FAILED
    assert either.error.message == "branch a won the race and failed: down"
    assert d.state.status == RunStatus.FAILED


def test_resume_withdraws_again_a_send_asked_to_stop():
    d = Driver(workflow(FAILING))
    started = d.start()
    d.answer(executes(started, "quote")[0], error=fail("assert_failed", "no quote"))
    pending = resume(d.wf, d.state)
    kinds = [type(e).__name__ for e in pending if getattr(e, "path", None) == "pay"]
    assert kinds == ["Withdraw", "Execute"]


def test_cancelling_the_run_stops_every_branch():
    d = Driver(workflow(RACE))
    d.start()
    d.advance_clock(timedelta(minutes=5))
    cancelled = d.cancel("operator")
    assert any(isinstance(e, Unpark) for e in cancelled)
    assert d.state.status == RunStatus.CANCELLED
    assert d.state.steps["answer"].status.settled
    late = d.feed(
        TimerFired(
            run_id="run1",
            path="deadline",
            visit=1,
            attempt=1,
            purpose="delay",
            due_at=d.now,
        )
    )
    assert late == []
