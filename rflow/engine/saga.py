"""``try`` blocks: a failure caught as data, after the compensations of what completed.

A :class:`Saga` is the progress of one ``try`` step, kept in its record. Its steps run
in order (stage ``try``); each step that completes while carrying ``compensate`` is
remembered. When one fails for good (after its retries), the block stops, the remembered
compensations run in reverse order of completion, each once (stage ``compensate``), and
then ``catch`` runs with the failure as data (stage ``catch``). State written before the
failure stays written: nothing is rolled back but what a compensation undoes itself.

The rules, one function each:

- :func:`completed`: a step of the block completed; its compensation, if it has one,
  joins the block's list. A step in a nested ``try`` that ends well, or in a ``catch``,
  joins the nearest ``try`` around it in the same way (:func:`handed_up`).
- :func:`failed`: a step of the block failed for good (or the block was cancelled): the
  compensations start, newest first. Only a failure is caught: a rejection (an approval
  answered no) and a cancellation run the compensations and then end the block as they
  are.
- :func:`next_compensation`: which step's compensation runs next, if any.
- :func:`compensation_ended`: one compensation ran to its end, or failed; a failed one
  does not stop the others (each undoes something of its own), and is remembered.
- :func:`after_compensations`: ``catch`` runs, or the block ends.
- :func:`outcome`: how the block ends: as its steps did, caught (its error kept as data),
  or ``compensation_failed`` naming each compensation that failed.

Pure: the engine (:mod:`rflow.engine.blocks`) starts the steps these rules name and
feeds their ends back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rflow.engine.frozen import Frozen
from rflow.engine.statuses import StepStatus
from rflow.failures import FailureKind, StepError

Stage = Literal["try", "compensate", "catch"]


class Undone(Frozen):
    """A compensation that ran: the step it undid, and how it went."""

    step: str
    by: str | None = None
    """The compensation step that failed (``None``: the compensation ran to its end)."""
    error: StepError | None = None


class Saga(Frozen):
    """A try block's progress."""

    stage: Stage = "try"
    cursor: int = 0
    """The next step of the list of the stage (``try`` or ``catch``)."""
    done: tuple[str, ...] = ()
    """Steps that completed and carry a compensation, in the order they completed."""
    undo: tuple[str, ...] = ()
    """Compensations still to run (the steps they undo), the next first."""
    undoing: str | None = None
    """The step whose compensation runs now."""
    undo_cursor: int = 0
    """The next step of that compensation."""
    undone: tuple[Undone, ...] = ()
    """Compensations that ran, in the order they ran."""
    error: StepError | None = None
    """The failure that stopped the block: what ``catch`` reads as data."""
    failed_status: StepStatus | None = None
    """How the step that stopped the block ended (failed, rejected or cancelled)."""
    failed_step: str | None = None
    caught: bool = False
    """Whether catch runs (ran) for the failure."""


@dataclass(frozen=True)
class Outcome:
    """How the try step settles."""

    status: StepStatus
    error: StepError | None = None
    detail: dict[str, Any] | None = None


def completed(saga: Saga, step: str, *, compensable: bool) -> Saga:
    """``step`` of the block completed; with a compensation, it is remembered."""
    if not compensable or step in saga.done:
        return saga
    return saga.model_copy(update={"done": (*saga.done, step)})


def handed_up(saga: Saga, inner: Saga) -> Saga:
    """A nested try block ended well: what it would still compensate joins this block's
    list, in the order it completed."""
    joined = tuple(step for step in inner.done if step not in saga.done)
    return saga.model_copy(update={"done": (*saga.done, *joined)}) if joined else saga


def failed(saga: Saga, step: str | None, status: StepStatus, error: StepError) -> Saga:
    """The block stops: ``step`` ended ``status`` (``None``: the block itself was
    cancelled before its next step). The compensations start, newest first."""
    if saga.stage != "try":
        return saga
    catchable = status == StepStatus.FAILED and error.kind != FailureKind.CANCELLED
    return saga.model_copy(
        update={
            "stage": "compensate",
            "undo": tuple(reversed(saga.done)),
            "error": error,
            "failed_status": status,
            "failed_step": step,
            "caught": catchable,
        }
    )


def next_compensation(saga: Saga) -> tuple[Saga, str | None]:
    """The saga with the next compensation under way, and the step it undoes (``None``
    when none is left)."""
    if saga.undoing is not None:
        return saga, saga.undoing
    if not saga.undo:
        return saga, None
    following, *rest = saga.undo
    return saga.model_copy(
        update={"undoing": following, "undo": tuple(rest), "undo_cursor": 0}
    ), following


def compensation_ended(
    saga: Saga, *, by: str | None = None, error: StepError | None = None
) -> Saga:
    """The compensation under way ended: to its end (``by`` is ``None``), or with its
    step ``by`` failing with ``error`` (its remaining steps do not run)."""
    undone = Undone(step=saga.undoing or "", by=by, error=error)
    return saga.model_copy(
        update={"undoing": None, "undo_cursor": 0, "undone": (*saga.undone, undone)}
    )


def after_compensations(saga: Saga, *, has_catch: bool, cancelled: bool) -> Saga | None:
    """Every compensation ran: the saga in stage ``catch``, or ``None`` when the block
    ends now (nothing to catch, no catch, a compensation failed, or it is cancelled)."""
    failures = [u for u in saga.undone if u.by is not None]
    if not saga.caught or not has_catch or failures or cancelled:
        return None
    return saga.model_copy(update={"stage": "catch", "cursor": 0})


def outcome(
    saga: Saga, *, catch_error: StepError | None = None, cancelled: str | None = None
) -> Outcome:
    """How the block ends once its last stage is over. ``catch_error``: a catch step
    failed; ``cancelled``: the block was asked to stop (its run, or the race it was in)."""
    detail: dict[str, Any] = {
        "compensated": [u.step for u in saga.undone if u.by is None],
        "compensation_failed": [u.by for u in saga.undone if u.by is not None],
    }
    failures = [u for u in saga.undone if u.by is not None]
    if failures:
        what = "; ".join(
            f"compensation {u.by} of {u.step} failed ({u.error.kind}: {u.error.message})"
            if u.error is not None
            else f"compensation {u.by} of {u.step} failed"
            for u in failures
        )
        cause = f"; compensating for: {saga.error.message}" if saga.error is not None else ""
        error = StepError(kind=FailureKind.COMPENSATION_FAILED, message=what + cause)
        return Outcome(StepStatus.FAILED, error, detail)
    if saga.error is None:
        # Every step of the block completed: a stop asked for after that changes nothing.
        return Outcome(StepStatus.SUCCEEDED, None, {**detail, "caught": False})
    if cancelled is not None or saga.failed_status == StepStatus.CANCELLED:
        why = cancelled or saga.error.message
        return Outcome(
            StepStatus.CANCELLED, StepError(kind=FailureKind.CANCELLED, message=why), detail
        )
    if catch_error is not None:
        return Outcome(StepStatus.FAILED, catch_error, detail)
    if saga.stage == "catch":
        # Caught: the step succeeds, its error kept as the failure it caught.
        return Outcome(StepStatus.SUCCEEDED, saga.error, {**detail, "caught": True})
    return Outcome(saga.failed_status or StepStatus.FAILED, saga.error, detail)
