"""Concurrency lanes: runs whose group evaluates to the same key run one at a time.

A lane holds the run that owns it and the runs waiting behind it, in order of arrival.
``arrive`` decides what a new run does when it reaches its lane, by the workflow's
``on_conflict``; ``leave`` hands the lane to the next run when the owner settles. Pure:
the runner keeps lanes in a table and carries out the decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from rflow.engine.effects import Journal
from rflow.engine.events import Retry, Start
from rflow.engine.frozen import Frozen
from rflow.engine.state import RunStatus
from rflow.failures import FailureKind, StepError

OnConflict = Literal["queue", "skip", "cancel_in_progress", "replace"]


class Waiting(Frozen):
    """A run admitted to a busy lane, not started yet."""

    run_id: str
    gate: str
    """The firing it belongs to (``<workflow>:<trigger key>``), which holds its record."""


class Lane(Frozen):
    """One concurrency group of one workflow."""

    active: str | None = None
    """The run that owns the lane."""
    queue: tuple[Waiting, ...] = ()
    """Runs waiting for it, oldest first."""
    cancelling: str | None = None
    """The owner was asked to stop (cancel_in_progress): asked once only."""

    def holds(self, run_id: str) -> bool:
        """Whether ``run_id`` owns the lane or waits in it."""
        return self.active == run_id or any(w.run_id == run_id for w in self.queue)


@dataclass(frozen=True)
class Arrival:
    """What to do with a run arriving at its lane."""

    lane: Lane
    start: bool = False
    """Start the arriving run now: the lane was free."""
    skip: bool = False
    """Record the arriving run as skipped: the lane was busy (on_conflict: skip)."""
    cancel: str | None = None
    """Ask this run (the owner) to stop at its next step boundary."""
    superseded: tuple[Waiting, ...] = field(default=())
    """Waiting runs that will never start: the newer run replaced them."""


def arrive(lane: Lane | None, run_id: str, gate: str, on_conflict: OnConflict) -> Arrival:
    """Admit ``run_id`` (of firing ``gate``) to ``lane``."""
    lane = lane or Lane()
    if lane.active == run_id:
        # The owner arriving again: the lane's write may have reached the broker and the
        # run's first state not (a crash in between), so it is started again; a start of
        # a run that has a state changes nothing.
        return Arrival(lane, start=True)
    if lane.holds(run_id):
        return Arrival(lane)  # a repeated arrival of a waiting run: it waits on
    if lane.active is None:
        return Arrival(lane.model_copy(update={"active": run_id}), start=True)
    if on_conflict == "skip":
        return Arrival(lane, skip=True)
    waiting = Waiting(run_id=run_id, gate=gate)
    if on_conflict == "queue":
        return Arrival(lane.model_copy(update={"queue": (*lane.queue, waiting)}))
    # replace and cancel_in_progress: the newest run is the only one waiting.
    update: dict = {"queue": (waiting,)}
    cancel = None
    if on_conflict == "cancel_in_progress" and lane.cancelling != lane.active:
        cancel = lane.active
        update["cancelling"] = lane.active
    return Arrival(lane.model_copy(update=update), cancel=cancel, superseded=lane.queue)


def leave(lane: Lane | None, run_id: str) -> tuple[Lane | None, Waiting | None]:
    """``run_id`` settled: the lane passes to the next waiting run (returned), or empties.

    A run that does not own the lane changes nothing (a repeated settle, say).
    """
    if lane is None or lane.active != run_id:
        return lane, None
    if not lane.queue:
        return None, None
    following, *rest = lane.queue
    return Lane(active=following.run_id, queue=tuple(rest)), following


def identity(start: Start | Retry) -> dict[str, Any]:
    """What the read model records of a run before it starts: its firing and version."""
    if isinstance(start, Retry):
        previous = start.previous
        return {
            "trigger": previous.trigger,
            "matrix": previous.matrix,
            "version": previous.version,
            "trigger_key": previous.trigger_key,
            "group": previous.group,
            "source": previous.source,
            "retry_of": previous.run_id,
        }
    return {
        "trigger": start.trigger,
        "matrix": start.matrix,
        "version": start.version,
        "trigger_key": start.trigger_key,
        "group": start.group,
        "source": start.source,
    }


def pending(start: Start | Retry, reason: str, waiting_for: str, now: datetime) -> Journal:
    """The journal entry of a run admitted but not started: why, and what it waits for.

    ``reason`` is one of ``lane``, ``rate_limit``, ``paused``, ``probe`` and ``matrix``.
    """
    workflow = start.previous.workflow if isinstance(start, Retry) else start.workflow
    return Journal(
        run_id=start.run_id,
        workflow=workflow,
        at=now,
        event="run_pending",
        status=str(RunStatus.PENDING),
        data={**identity(start), "reason": reason, "waiting_for": waiting_for, "seq": 0},
    )


def never_started(
    start: Start | Retry, status: RunStatus, reason: str, now: datetime
) -> list[Journal]:
    """The journal of a run that never started: skipped (its lane was busy, or its
    workflow was paused with ``paused_firings: skip``), or superseded while waiting.

    It is recorded like any run (admitted and settled at once, never started) so it can be
    listed and inspected; it ran no step, ``finally`` included.
    """
    workflow = start.previous.workflow if isinstance(start, Retry) else start.workflow
    common = {"run_id": start.run_id, "workflow": workflow, "at": now}
    error = StepError(kind=FailureKind.CANCELLED, message=reason)
    return [
        Journal(
            **common,
            event="run_pending",  # its row, never started (``started_at`` stays empty)
            status=str(RunStatus.PENDING),
            data={**identity(start), "reason": str(status), "waiting_for": None, "seq": 1},
        ),
        Journal(
            **common,
            event="run_settled",
            status=str(status),
            data={"error": error.model_dump(mode="json"), "seq": 2},
        ),
    ]
