"""Branches started together: ``parallel`` (every branch ends, then the step) and
``race`` (the first branch to end wins, the others are cancelled).

A :class:`Fork` is the progress of one such step, kept in its record; each branch is a
step of its own, with its own record, retries, timeout and idempotency key. The rules,
one function each:

- :func:`started`: every branch starts at once, in the order written.
- :func:`ended`: a branch ended. In a race the first one wins and the others are asked
  to stop; in a parallel a branch that fails (not ``continue_on_error``) stops the others.
  Branches that end in the same decision are taken in the order written.
- :func:`outcome`: once every branch has settled (the stopped ones included: each
  releases what it holds first, a running action finishes), the step ends: a race as its
  winner did, a parallel with every branch's output, or with the failure that stopped it.

Pure: the engine (:mod:`rflow.engine.blocks`) reads the branches' records, asks these
rules, and carries out what they decide (stopping branches, settling the step).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rflow.engine.frozen import Frozen
from rflow.engine.statuses import StepStatus
from rflow.failures import FailureKind, StepError

Kind = Literal["parallel", "race"]


class Fork(Frozen):
    """The branches of a parallel or race step, and what has happened to them."""

    kind: Kind
    branches: tuple[str, ...]
    """The branch ids, in the order written."""
    ended: tuple[str, ...] = ()
    """Branches taken as ended, in the order they ended."""
    winner: str | None = None
    """A race: the branch that ended first."""
    failed: str | None = None
    """A parallel: the branch whose failure stopped the others."""
    stopping: str | None = None
    """Why the branches still running were asked to stop (``None``: none was)."""


@dataclass(frozen=True)
class Ended:
    """A branch that settled: how, and whether its failure is data."""

    branch: str
    status: StepStatus
    error: StepError | None = None
    output: Any = None
    continue_on_error: bool = False

    @property
    def stopped(self) -> bool:
        """Whether it was stopped before it ended (cancelled)."""
        return self.status == StepStatus.CANCELLED or (
            self.status == StepStatus.FAILED
            and self.error is not None
            and self.error.kind == FailureKind.CANCELLED
        )

    @property
    def failure(self) -> bool:
        """Whether it ended in a failure that stops its fork (``continue_on_error`` makes a
        failure data; a branch stopped by its fork is not a failure of its own)."""
        return (
            self.status in (StepStatus.FAILED, StepStatus.REJECTED) and not self.continue_on_error
        )


@dataclass(frozen=True)
class Outcome:
    """How the fork's step settles."""

    status: StepStatus
    output: Any = None
    error: StepError | None = None
    detail: Mapping[str, Any] | None = None
    """What the read model shows of the fork: the winner and the cancelled branches."""


def started(kind: Kind, branches: tuple[str, ...]) -> Fork:
    """A fork whose branches all start now."""
    return Fork(kind=kind, branches=branches)


def ended(fork: Fork, branch: Ended, *, run_cancelled: bool = False) -> tuple[Fork, str | None]:
    """``branch`` ended: the fork, and why the other branches must stop (``None``: they go
    on). ``run_cancelled``: the run is being cancelled, so a branch that ended for that
    reason neither wins nor fails the fork on its own account."""
    if branch.branch in fork.ended:
        return fork, None
    fork = fork.model_copy(update={"ended": (*fork.ended, branch.branch)})
    if fork.stopping is not None:
        return fork, None
    if branch.status == StepStatus.CANCELLED or (run_cancelled and branch.stopped):
        why = branch.error.message if branch.error is not None else "cancelled"
        return fork.model_copy(update={"stopping": why}), why
    if fork.kind == "race":
        why = f"the race was won by {branch.branch}"
        return fork.model_copy(update={"winner": branch.branch, "stopping": why}), why
    if branch.failure:
        why = f"branch {branch.branch} failed"
        return fork.model_copy(update={"failed": branch.branch, "stopping": why}), why
    return fork, None


def outcome(fork: Fork, branches: Mapping[str, Ended], *, cancelled: str | None = None) -> Outcome:
    """How the fork's step ends, once every branch has settled. ``cancelled``: the step
    itself was asked to stop (it lost a race, its run was cancelled...)."""
    stopped = [b for b in fork.branches if branches[b].stopped]
    detail: dict[str, Any] = {"cancelled": stopped}
    if fork.kind == "race":
        detail["winner"] = fork.winner
    if fork.kind == "race" and fork.winner is not None:
        won = branches[fork.winner]
        if won.failure:
            error = _named(won, f"branch {won.branch} won the race and")
            return Outcome(won.status, won.output, error, detail)
        return Outcome(StepStatus.SUCCEEDED, won.output, None, detail)
    if fork.kind == "parallel" and fork.failed is not None:
        failed = branches[fork.failed]
        return Outcome(
            failed.status,
            _outputs(fork, branches),
            _named(failed, f"branch {failed.branch}"),
            detail,
        )
    if stopped and (cancelled is not None or fork.stopping is not None):
        why = cancelled or fork.stopping or "cancelled"
        error = StepError(kind=FailureKind.CANCELLED, message=why)
        return Outcome(StepStatus.CANCELLED, _outputs(fork, branches), error, detail)
    return Outcome(StepStatus.SUCCEEDED, _outputs(fork, branches), None, detail)


def _outputs(fork: Fork, branches: Mapping[str, Ended]) -> dict[str, Any]:
    return {b: branches[b].output for b in fork.branches}


def _named(branch: Ended, who: str) -> StepError:
    """``branch``'s failure, its message saying which branch it was."""
    error = branch.error or StepError(kind=FailureKind.ASSERT_FAILED, message="failed")
    verb = "was rejected" if branch.status == StepStatus.REJECTED else "failed"
    return error.model_copy(update={"message": f"{who} {verb}: {error.message}"})
