"""Retry policies as seed 004 bounds them, retryable statuses, retry_on_timeout, and
foreach's max_iterations: each rule at its line and column."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.lang.conftest import check, findings


def test_a_policy_within_the_seeds_bounds_is_taken() -> None:
    report = check(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                http_call: { url: "http://x.test/", retryable_status_codes: [409, 429, 503] }
                retry:
                  max_attempts: 4
                  retry_on_timeout: true
                  backoff: { strategy: exponential, delay: 100ms, multiplier: 3, max_delay: 5m }
              - id: b
                http_call: { url: "http://x.test/" }
                retry: { backoff: 10s }
        """
    )
    assert report.diagnostics == ()
    a, b = report.project.workflows["w"].steps
    assert a.retry.retry_on_timeout and a.http_call.retryable_status_codes == [409, 429, 503]
    assert a.retry.backoff.multiplier == 3 and a.retry.backoff.max_delay == timedelta(minutes=5)
    # Seed 000's shorthand: a fixed delay between attempts.
    assert (b.retry.backoff.strategy, b.retry.backoff.delay) == ("fixed", timedelta(seconds=10))
    assert b.http_call.retryable_status_codes is None  # the default statuses


def test_multiplier_and_delays_outside_the_seeds_bounds_are_refused() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                http_call: { url: "http://x.test/" }
                retry: { backoff: { multiplier: 4 } }
              - id: b
                http_call: { url: "http://x.test/" }
                retry: { backoff: { delay: 50ms } }
              - id: c
                http_call: { url: "http://x.test/" }
                retry: { backoff: { max_delay: 10m } }
              - id: d
                http_call: { url: "http://x.test/" }
                retry: { backoff: 2m }
        """
    ) == [
        "wf.yaml:7:41: error: workflows.w.steps[0].retry.backoff.multiplier: must be at most "
        "3.0, got 4",
        "wf.yaml:10:36: error: workflows.w.steps[1].retry.backoff.delay: a retry's delay must "
        "be between 100ms and 1m, got 50ms",
        "wf.yaml:13:40: error: workflows.w.steps[2].retry.backoff.max_delay: max_delay must be "
        "between 1s and 5m, got 10m",
        "wf.yaml:16:27: error: workflows.w.steps[3].retry.backoff: a retry's delay must be "
        "between 100ms and 1m, got 2m",
    ]


def test_retry_on_timeout_is_refused_where_a_timeout_is_never_retried() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            permissions: { relayers: [payout] }
            steps:
              - id: send
                send_transaction: { network: ethereum, relayer: payout, to: "0x0000000000000000000000000000000000000001", value: 1 wei }
                retry: { retry_on_timeout: true }
              - id: wait
                wait_for: { webhook: { path: /hooks/w }, timeout: 1m }
                retry: { retry_on_timeout: true }
              - id: nap
                delay: { duration: 1s }
                retry: { retry_on_timeout: true }
              - id: say
                command: { name: log, args: { message: hi } }
                retry: { retry_on_timeout: true }
        """
    ) == [
        "wf.yaml:8:36: error: workflows.w.steps[0].retry.retry_on_timeout: a send_transaction "
        "that times out is cancelled at its nonce and fails for good: it is never retried "
        "(remove retry_on_timeout)",
        "wf.yaml:11:36: error: workflows.w.steps[1].retry.retry_on_timeout: a wait_for's "
        "timeout is decided by its on_timeout, never retried (remove retry_on_timeout)",
        "wf.yaml:14:36: error: workflows.w.steps[2].retry.retry_on_timeout: a delay never "
        "times out: retry_on_timeout cannot apply (remove it)",
        "wf.yaml:17:36: error: workflows.w.steps[3].retry.retry_on_timeout: the log command "
        "never times out: retry_on_timeout cannot apply (remove it)",
    ]


def test_a_retryable_status_cannot_also_be_a_success() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                http_call: { url: "http://x.test/", expect_status: [200, 404], retryable_status_codes: [404, 503] }
              - id: b
                http_call: { url: "http://x.test/", retryable_status_codes: [202, 503] }
              - id: c
                http_call: { url: "http://x.test/", retryable_status_codes: [700] }
        """
    ) == [
        "wf.yaml:6:20: error: workflows.w.steps[0].http_call: retryable_status_codes lists 404, "
        "which expect_status counts as success: an answer cannot be both",
        "wf.yaml:8:20: error: workflows.w.steps[1].http_call: retryable_status_codes lists 202, "
        "which counts as success: an answer cannot be both",
        "wf.yaml:10:70: error: workflows.w.steps[2].http_call.retryable_status_codes[0]: must "
        "be at most 599, got 700",
    ]


def test_max_iterations_needs_a_foreach_and_caps_a_literal_list() -> None:
    assert findings(
        """\
        workflows:
          w:
            trigger: { manual: {} }
            steps:
              - id: a
                max_iterations: 2
                http_call: { url: "http://x.test/" }
              - id: b
                foreach: [1, 2, 3]
                max_iterations: 2
                http_call: { url: "http://x.test/" }
              - id: c
                foreach: [1, 2, 3]
                batch_size: 2
                max_iterations: 2
                http_call: { url: "http://x.test/" }
              - id: d
                foreach: "${{ trigger.items }}"
                max_iterations: 0
                http_call: { url: "http://x.test/" }
        """
    ) == [
        "wf.yaml:5:9: error: workflows.w.steps[0]: max_iterations only applies to a foreach step",
        "wf.yaml:9:18: error: workflows.w.steps[1].foreach: foreach gives 3 iterations, more "
        "than max_iterations (2): no iteration started",
        "wf.yaml:19:25: error: workflows.w.steps[3].max_iterations: must be at least 1, got 0",
    ]
