"""Retries: only retryable kinds, retry_if, max_attempts, deterministic backoff with jitter."""

from __future__ import annotations

from datetime import timedelta

from rflow.engine import Execute, RunStatus, ScheduleTimer
from rflow.engine.retry import backoff_delay, decide
from rflow.failures import FailureKind, StepError
from rflow.lang.model.steps import Backoff
from tests.unit.engine.driver import Driver, fail, workflow


def flaky(kind: str, failures: int):
    calls = {"n": 0}

    def answer(execute: Execute):
        calls["n"] += 1
        return fail(kind, f"attempt {execute.attempt}") if calls["n"] <= failures else {"ok": True}

    return answer, calls


RETRYING = """
trigger: { manual: {} }
steps:
  - id: a
    http_call: { url: "http://x.test/a" }
    retry: { max_attempts: 3, backoff: 10s }
"""


def test_a_retryable_failure_is_retried_after_the_backoff_with_the_same_key():
    d = Driver(workflow(RETRYING))
    answer, calls = flaky("rate_limited", 2)
    state = d.run(answer)
    assert state.status == RunStatus.SUCCEEDED
    assert calls["n"] == 3
    executes = [e for e in d.effects if isinstance(e, Execute)]
    assert [e.attempt for e in executes] == [1, 2, 3]
    assert {e.key for e in executes} == {"w:t1:a"}
    timers = [e for e in d.effects if isinstance(e, ScheduleTimer)]
    assert [t.purpose for t in timers] == ["retry", "retry"]
    assert state.steps["a"].attempt == 3


def test_attempts_are_bounded():
    d = Driver(workflow(RETRYING))
    answer, calls = flaky("rpc_timeout", 99)
    state = d.run(answer)
    assert state.status == RunStatus.FAILED
    assert calls["n"] == 3
    assert state.error.kind == "rpc_timeout"


def test_non_retryable_kinds_are_never_retried():
    for kind in (
        "reverted",
        "insufficient_funds",
        "timeout",
        "simulation_failed",
        "nonce_conflict",
    ):
        d = Driver(workflow(RETRYING))
        answer, calls = flaky(kind, 99)
        assert d.run(answer).status == RunStatus.FAILED
        assert calls["n"] == 1, kind


def test_retry_if_narrows_the_retryable_kinds():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: a
    http_call: { url: "http://x.test/a" }
    retry:
      max_attempts: 5
      retry_if: "${{ error.kind in ['rpc_timeout'] }}"
"""
    )
    d = Driver(wf)
    answer, calls = flaky("rate_limited", 99)
    d.run(answer)
    assert calls["n"] == 1
    d = Driver(wf)
    answer, calls = flaky("rpc_timeout", 2)
    assert d.run(answer).status == RunStatus.SUCCEEDED
    assert calls["n"] == 3


def test_backoff_is_exponential_capped_and_jitter_is_deterministic():
    backoff = Backoff(
        strategy="exponential",
        delay=timedelta(seconds=1),
        multiplier=2.0,
        max_delay=timedelta(seconds=5),
        jitter=False,
    )
    assert [backoff_delay(backoff, n, ("r",)).total_seconds() for n in range(1, 6)] == [
        1,
        2,
        4,
        5,
        5,
    ]
    jittered = Backoff(strategy="fixed", delay=timedelta(seconds=10), jitter=True)
    first = backoff_delay(jittered, 1, ("run1", "a", 1, 1))
    assert first == backoff_delay(jittered, 1, ("run1", "a", 1, 1))
    assert timedelta(seconds=8) <= first <= timedelta(seconds=12)
    spread = {backoff_delay(jittered, 1, (f"run{i}", "a", 1, 1)) for i in range(50)}
    assert len(spread) > 40


def test_the_retry_timer_is_due_after_the_backoff():
    d = Driver(workflow(RETRYING))
    d.start()
    d.answer(d.pending(Execute)[0], error=fail("rate_limited"))
    [timer] = d.pending(ScheduleTimer)
    # A fixed 10 s backoff with the default jitter of +-20%, the same on every replay.
    assert timedelta(seconds=8) <= timer.due_at - d.now <= timedelta(seconds=12)
    assert d.pending(Execute) == []


def retry_after_failure(seconds: float):
    def answer(execute: Execute):
        if execute.attempt == 1:
            return StepError(kind=FailureKind.RATE_LIMITED, message="429", retry_after=seconds)
        return {"ok": True}

    return answer


HONOURING = """
trigger: { manual: {} }
steps:
  - id: a
    http_call: { url: "http://x.test/a" }
    retry:
      max_attempts: 3
      backoff: { strategy: exponential, delay: 1s, max_delay: 30s, jitter: false }
"""


def test_retry_after_is_honoured_when_it_asks_for_longer_than_the_backoff():
    d = Driver(workflow(HONOURING))
    d.start()
    d.answer(d.pending(Execute)[0], error=retry_after_failure(12)(d.pending(Execute)[0]))
    [timer] = d.pending(ScheduleTimer)
    assert timer.due_at - d.now == timedelta(seconds=12)


def test_retry_after_is_cut_to_max_delay_and_never_shortens_the_backoff():
    d = Driver(workflow(HONOURING))
    d.start()
    d.answer(d.pending(Execute)[0], error=retry_after_failure(3600)(d.pending(Execute)[0]))
    [timer] = d.pending(ScheduleTimer)
    assert timer.due_at - d.now == timedelta(seconds=30)
    d = Driver(workflow(HONOURING))
    d.start()
    d.answer(d.pending(Execute)[0], error=retry_after_failure(0.2)(d.pending(Execute)[0]))
    [timer] = d.pending(ScheduleTimer)
    assert timer.due_at - d.now == timedelta(seconds=1)  # the backoff's own delay


def test_the_decision_says_where_the_delay_comes_from():
    policy = workflow(HONOURING).steps[0].retry
    error = StepError(kind=FailureKind.RATE_LIMITED, message="429", retry_after=90)
    decision = decide(policy, error, 1, {}, ("r", "a", 1, 1))
    assert decision.retry and decision.delay == timedelta(seconds=30)
    assert decision.reason == "attempt 2 of 3 after Retry-After 90s, cut to max_delay"


def test_a_failure_marked_non_retryable_is_not_retried_whatever_its_kind():
    d = Driver(workflow(RETRYING))

    def answer(execute: Execute):
        return StepError(kind=FailureKind.DATA_UNAVAILABLE, message="503", non_retryable=True)

    state = d.run(answer)
    assert state.status == RunStatus.FAILED
    assert len([e for e in d.effects if isinstance(e, Execute)]) == 1
    assert state.steps["a"].error.non_retryable


def test_a_timeout_is_retried_only_with_retry_on_timeout():
    d = Driver(workflow(RETRYING))
    answer, calls = flaky("timeout", 2)
    assert d.run(answer).status == RunStatus.FAILED
    assert calls["n"] == 1
    d = Driver(
        workflow(
            """
trigger: { manual: {} }
steps:
  - id: a
    http_call: { url: "http://x.test/a" }
    timeout: 2s
    retry: { max_attempts: 3, backoff: 1s, retry_on_timeout: true }
"""
        )
    )
    answer, calls = flaky("timeout", 2)
    assert d.run(answer).status == RunStatus.SUCCEEDED
    assert calls["n"] == 3


def test_backoff_10s_keeps_its_meaning_a_fixed_delay_between_attempts():
    policy = workflow(RETRYING).steps[0].retry
    assert (policy.backoff.strategy, policy.backoff.delay) == ("fixed", timedelta(seconds=10))
    delays = {backoff_delay(policy.backoff, n, ("r", "a", 1, n)) for n in (1, 2, 3, 4)}
    assert all(timedelta(seconds=8) <= d <= timedelta(seconds=12) for d in delays)


def test_retry_if_sees_what_the_service_said_about_trying_again():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: a
    http_call: { url: "http://x.test/a" }
    retry:
      max_attempts: 5
      retry_if: "${{ error.retry_after != null && !error.non_retryable }}"
"""
    )
    said = [
        StepError(kind=FailureKind.RATE_LIMITED, message="429", retry_after=1),
        fail("rate_limited"),
    ]
    calls = {"n": 0}

    def answer(execute: Execute):
        calls["n"] += 1
        return said[calls["n"] - 1]

    state = Driver(wf).run(answer)
    # Retried after the 429 that said when, not after the one that said nothing.
    assert calls["n"] == 2
    assert state.status == RunStatus.FAILED
    assert state.error.retry_after is None
