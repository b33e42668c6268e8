"""Retries: only retryable kinds, retry_if, max_attempts, deterministic backoff with jitter."""

from __future__ import annotations

from datetime import timedelta

from rflow.engine import Execute, RunStatus, ScheduleTimer
from rflow.engine.retry import backoff_delay
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
