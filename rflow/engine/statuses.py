"""Where a run and a step are: the statuses, without the models of run state (a reader
of statuses alone, such as ``rflow runs list``, does not build those)."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is. Every status but ``pending``, ``running`` and ``waiting`` is terminal."""

    PENDING = "pending"
    """Admitted, not started: behind its concurrency lane, a rate limit, a pause or a
    half-open circuit's probe (the read model's status; the engine never holds it)."""
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    """Never started: its concurrency group was busy (``on_conflict: skip``)."""
    REJECTED = "rejected"
    """Ended by a rejected approval: a decision, so never dead-lettered and never counted
    by a circuit breaker."""

    @property
    def terminal(self) -> bool:
        return self not in (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING)


class StepStatus(StrEnum):
    """Where one step (or one foreach iteration) is."""

    RUNNING = "running"
    RETRYING = "retrying"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    REJECTED = "rejected"
    """An approval answered no (``on_reject: end``, the default)."""
    CANCELLED = "cancelled"
    """Stopped before it ended: a race branch that lost, a branch beside one that failed
    in a parallel, a block whose run or block was cancelled."""

    @property
    def settled(self) -> bool:
        return self not in (StepStatus.RUNNING, StepStatus.RETRYING, StepStatus.WAITING)
