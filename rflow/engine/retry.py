"""The retry decision: a pure function of the step's policy, the failure and the attempt."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from rflow.engine.context import holds
from rflow.engine.keys import fraction
from rflow.failures import StepError
from rflow.lang.model.steps import Backoff, Retry


@dataclass(frozen=True)
class RetryDecision:
    """Retry after ``delay``, or settle the failure; ``reason`` says which and why."""

    retry: bool
    delay: timedelta
    reason: str


def backoff_delay(backoff: Backoff, attempt: int, seed: tuple[object, ...]) -> timedelta:
    """The wait before attempt ``attempt + 1``, with jitter of +-20% drawn from ``seed``.

    The jitter is a hash of the run, step and attempt: spread like randomness across
    runs, yet the same on every replay of one run.
    """
    if backoff.strategy == "fixed":
        delay = backoff.delay
    else:
        delay = min(backoff.max_delay, backoff.delay * (backoff.multiplier ** (attempt - 1)))
    if backoff.jitter:
        delay = delay * (0.8 + 0.4 * fraction(*seed))
    return delay


def decide(
    policy: Retry | None,
    error: StepError,
    attempt: int,
    context: Mapping[str, Any],
    seed: tuple[object, ...],
) -> RetryDecision:
    """Whether a failed attempt is retried: only retryable kinds, within ``max_attempts``,
    and only when ``retry_if`` (evaluated with ``error`` in the context) holds."""
    none = timedelta(0)
    if policy is None:
        return RetryDecision(False, none, "the step has no retry policy")
    if not error.retryable:
        return RetryDecision(False, none, f"{error.kind} is never retried")
    if attempt >= policy.max_attempts:
        return RetryDecision(False, none, f"{attempt} of {policy.max_attempts} attempts used")
    if policy.retry_if is not None:
        with_error = {**context, "error": error.model_dump(mode="json")}
        if not holds(policy.retry_if, with_error):
            return RetryDecision(False, none, "retry_if does not hold")
    delay = backoff_delay(policy.backoff, attempt, seed)
    return RetryDecision(True, delay, f"attempt {attempt + 1} of {policy.max_attempts}")
