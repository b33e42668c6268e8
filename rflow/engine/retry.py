"""The retry decision: a pure function of the step's policy, the failure and the attempt."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from rflow.engine.context import holds
from rflow.engine.keys import fraction
from rflow.failures import FailureKind, StepError
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


def retry_delay(
    backoff: Backoff, attempt: int, seed: tuple[object, ...], retry_after: float | None
) -> tuple[timedelta, str]:
    """The wait before attempt ``attempt + 1`` and where it comes from: the backoff, or
    the service's ``Retry-After`` when it asks for longer, honoured up to ``max_delay``."""
    delay = backoff_delay(backoff, attempt, seed)
    if retry_after is None:
        return delay, "backoff"
    asked = timedelta(seconds=retry_after)
    honoured = min(asked, backoff.max_delay)
    if honoured <= delay:
        return delay, "backoff"
    if honoured < asked:
        return honoured, f"Retry-After {retry_after:g}s, cut to max_delay"
    return honoured, f"Retry-After {retry_after:g}s"


def decide(
    policy: Retry | None,
    error: StepError,
    attempt: int,
    context: Mapping[str, Any],
    seed: tuple[object, ...],
) -> RetryDecision:
    """Whether a failed attempt is retried: only retryable kinds (``timeout`` too with
    ``retry_on_timeout``) that nothing marked ``non_retryable``, within ``max_attempts``,
    and only when ``retry_if`` (evaluated with ``error`` in the context) holds."""
    none = timedelta(0)
    if policy is None:
        return RetryDecision(False, none, "the step has no retry policy")
    if error.non_retryable:
        return RetryDecision(False, none, f"this {error.kind} failure is not retryable")
    timeout = error.kind == FailureKind.TIMEOUT and policy.retry_on_timeout
    if not (error.retryable or timeout):
        return RetryDecision(False, none, f"{error.kind} is never retried")
    if attempt >= policy.max_attempts:
        return RetryDecision(False, none, f"{attempt} of {policy.max_attempts} attempts used")
    if policy.retry_if is not None:
        with_error = {**context, "error": error.view()}
        if not holds(policy.retry_if, with_error):
            return RetryDecision(False, none, "retry_if does not hold")
    delay, source = retry_delay(policy.backoff, attempt, seed, error.retry_after)
    return RetryDecision(
        True, delay, f"attempt {attempt + 1} of {policy.max_attempts} after {source}"
    )
