"""Running the steps inside blocks, and stopping a step: the engine's side of
:mod:`rflow.engine.fork` (parallel, race) and :mod:`rflow.engine.saga` (try).

A block's record holds its progress; every step inside it has a record of its own,
keyed by its id like any step. When a step inside a block settles, the block is queued
and then *driven*: its rules are asked what the step's end means, and what they decide
is carried out (more steps started, branches stopped, the block settled). Driving from a
queue, rather than from inside the settling step, keeps the depth of the call stack
bounded by the nesting of the definition, however long a list of steps settles at once.

Stopping a step (:meth:`Blocks.stop`) releases what it holds at once: a wait (its row),
a timer (its row), a child run (its firing retracted), a send not signed yet (withdrawn
from the relayer). An action already under way finishes: its result is recorded as what
happened, ``cancelled`` unless it went through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rflow.engine import fork as forks
from rflow.engine import keys
from rflow.engine import saga as sagas
from rflow.engine.effects import CancelTimer, Execute
from rflow.engine.state import StepRecord
from rflow.engine.statuses import StepStatus
from rflow.failures import FailureKind, StepError

if TYPE_CHECKING:
    from rflow.engine.tree import Place, Tree

_ENDS_BADLY = (StepStatus.FAILED, StepStatus.REJECTED, StepStatus.CANCELLED)


class Blocks:
    """The block rules of one run's working copy (mixed into the engine's ``_Run``)."""

    steps: dict[str, StepRecord]
    fields: dict[str, Any]
    effects: list[Any]
    queue: list[str]
    tree: Tree

    # Provided by the engine's working copy.
    def step_named(self, step_id: str) -> Any: ...
    def record(
        self, step: Any, path: str, visit: int, status: StepStatus, **extra: Any
    ) -> None: ...
    def journal(self, event: str, path: str | None, status: str, **data: Any) -> None: ...
    def settle(self, record: StepRecord, status: StepStatus, **kwargs: Any) -> None: ...
    def after_settle(self, record: StepRecord) -> None: ...
    def begin_step(self, step: Any) -> None: ...
    def unpark(self, record: StepRecord) -> None: ...
    def set_fanout(self, step: Any, **changes: Any) -> None: ...
    def maybe_settle_fanout(self, step: Any) -> None: ...
    def cancel_child_effect(self, record: StepRecord, why: str) -> Any: ...
    def withdraw_effect(self, record: StepRecord) -> Any: ...
    def move(self, steps: list[Any], to: int, at: int, target: str) -> None: ...

    # --- starting ---------------------------------------------------------------------

    def begin_block(self, step: Any, visit: int) -> None:
        """Start a parallel, race or try step: the branches all start now; a try's steps
        start one by one as it is driven."""
        self.record(step, step.id, visit, StepStatus.RUNNING)
        self.journal("step_started", step.id, "running", kind=step.kind)
        if step.kind == "try":
            self.steps[step.id] = self.steps[step.id].model_copy(update={"saga": sagas.Saga()})
            self.queue_block(step.id)
            return
        branches = step.lists()[0][1]
        started = forks.started(step.kind, tuple(b.id for b in branches))
        self.steps[step.id] = self.steps[step.id].model_copy(update={"fork": started})
        for branch in branches:
            self.begin_step(branch)
            record = self.steps.get(branch.id)
            if record is not None and record.status.settled:
                self.after_settle(record)
        self.queue_block(step.id)

    def queue_block(self, step_id: str) -> None:
        if step_id not in self.queue:
            self.queue.append(step_id)

    def drive(self, step_id: str) -> None:
        """Apply what the steps inside block ``step_id`` did since it was last driven."""
        record = self.steps.get(step_id)
        if record is None or record.status.settled:
            return
        if record.fork is not None:
            self.drive_fork(step_id)
        elif record.saga is not None:
            self.drive_saga(step_id)

    # --- inside a block ---------------------------------------------------------------

    def settled_inside(self, step: Any, record: StepRecord, place: Place) -> None:
        """A step inside a block settled: what it completed joins its try block's
        compensations, a jump moves its list, and the block that drives it is queued."""
        if record.status == StepStatus.SUCCEEDED:
            scope = self.tree.scope(step.id)
            if scope is not None:
                self.joins(scope, step, record)
            output = record.output
            if (
                isinstance(output, dict)
                and output.get("goto")
                and step.kind in ("choose", "wait_for")
                and place.role in ("try", "catch")
            ):
                self.jump_within(place, output["goto"])
        driver = place.owner if place.role != "compensate" else self.undoing(place.owner)
        if driver is not None:
            self.queue_block(driver)

    def joins(self, scope: str, step: Any, record: StepRecord) -> None:
        holder = self.steps.get(scope)
        if holder is None or holder.saga is None or holder.status.settled:
            return
        saga = sagas.completed(holder.saga, step.id, compensable=bool(step.compensate))
        if record.saga is not None:  # a try block inside that ended well
            saga = sagas.handed_up(saga, record.saga)
        if saga is not holder.saga:
            self.steps[scope] = holder.model_copy(update={"saga": saga})

    def undoing(self, step_id: str | None) -> str | None:
        """The try block running the compensation of ``step_id`` now."""
        for path, record in self.steps.items():
            saga = record.saga
            if saga is not None and saga.undoing == step_id and not record.status.settled:
                return path
        return None

    def jump_within(self, place: Place, target: str) -> None:
        """A ``goto`` inside a try or catch list: the list goes on from ``target``."""
        holder = self.steps[place.owner]
        steps = self.tree.list_of(place.owner, place.role)
        ids = [s.id for s in steps]
        if target not in ids:
            return  # validation refuses it; an unvalidated definition goes on
        to = ids.index(target)
        self.move(steps, to, place.index, target)
        saga = self.steps[place.owner].saga or holder.saga
        self.steps[place.owner] = self.steps[place.owner].model_copy(
            update={"saga": saga.model_copy(update={"cursor": to})}
        )

    def ended(self, record: StepRecord) -> forks.Ended:
        step = self.step_named(record.step)
        return forks.Ended(
            branch=record.step,
            status=record.status,
            error=record.error,
            output=record.output if record.status == StepStatus.SUCCEEDED else None,
            continue_on_error=step.continue_on_error,
        )

    def run_stopping(self, record: StepRecord) -> str | None:
        """Why the run is being cancelled, when that stops ``record``'s block (never a
        compensation, which runs whatever happens)."""
        why = self.fields["cancel_requested"]
        if why is None or record.phase != "main" or self.tree.compensating(record.step):
            return None
        return why

    def drive_fork(self, step_id: str) -> None:
        record = self.steps[step_id]
        fork = record.fork
        run_cancelled = self.run_stopping(record)
        stop = None
        for branch in fork.branches:
            found = self.steps.get(branch)
            if found is None or not found.status.settled or branch in fork.ended:
                continue
            fork, why = forks.ended(
                fork, self.ended(found), run_cancelled=run_cancelled is not None
            )
            stop = stop or why
        outside = record.cancelled or run_cancelled
        if fork.stopping is None and outside is not None:
            fork = fork.model_copy(update={"stopping": outside})
        self.steps[step_id] = record = record.model_copy(update={"fork": fork})
        if fork.stopping is not None:
            for branch in fork.branches:
                self.stop(branch, stop or fork.stopping)
            record = self.steps[step_id]
        branches = {b: self.steps.get(b) for b in fork.branches}
        if any(r is None or not r.status.settled for r in branches.values()):
            return
        ended = {b: self.ended(r) for b, r in branches.items()}
        outcome = forks.outcome(record.fork, ended, cancelled=record.cancelled)
        self.settle(
            record,
            outcome.status,
            output=outcome.output,
            error=outcome.error,
            detail=outcome.detail,
        )
        self.after_settle(self.steps[step_id])

    def drive_saga(self, step_id: str) -> None:
        step = self.step_named(step_id)
        while True:
            record = self.steps[step_id]
            saga = record.saga
            if saga.stage == "compensate":
                if not self.compensate(step, record):
                    return
                continue
            listed = step.try_ if saga.stage == "try" else step.catch
            if saga.cursor >= len(listed):
                self.end_saga(step_id)
                return
            inner = listed[saga.cursor]
            found = self.steps.get(inner.id)
            if found is None:
                why = record.cancelled or self.run_stopping(record)
                if why is not None:
                    status = StepStatus.CANCELLED if record.cancelled else StepStatus.FAILED
                    error = StepError(kind=FailureKind.CANCELLED, message=why)
                    if saga.stage == "catch":
                        self.end_saga(step_id, cancelled=why)
                        return
                    self.set_saga(step_id, sagas.failed(saga, None, status, error))
                    continue
                self.begin_step(inner)
                found = self.steps.get(inner.id)
                if found is not None and found.status.settled:
                    self.after_settle(found)
                    if self.steps[step_id].status.settled:
                        return
                continue
            if not found.status.settled:
                return
            if found.status in _ENDS_BADLY and not (
                found.status == StepStatus.FAILED and inner.continue_on_error
            ):
                error = found.error or StepError(kind=FailureKind.ASSERT_FAILED, message="failed")
                if saga.stage == "catch":
                    self.end_saga(step_id, catch_error=error)
                    return
                self.set_saga(step_id, sagas.failed(saga, inner.id, found.status, error))
                continue
            self.set_saga(step_id, saga.model_copy(update={"cursor": saga.cursor + 1}))

    def compensate(self, step: Any, record: StepRecord) -> bool:
        """One move of the compensations: False when the block must wait (or ended)."""
        saga, undoing = sagas.next_compensation(record.saga)
        self.set_saga(step.id, saga)
        if undoing is None:
            following = sagas.after_compensations(
                saga, has_catch=bool(step.catch), cancelled=record.cancelled is not None
            )
            if following is None:
                self.end_saga(step.id)
                return False
            self.set_saga(step.id, following)
            return True
        listed = self.step_named(undoing).compensate or []
        if saga.undo_cursor >= len(listed):
            self.set_saga(step.id, sagas.compensation_ended(saga))
            return True
        inner = listed[saga.undo_cursor]
        found = self.steps.get(inner.id)
        if found is None:
            self.begin_step(inner)
            found = self.steps.get(inner.id)
            if found is not None and found.status.settled:
                self.after_settle(found)
            return True
        if not found.status.settled:
            return False
        if found.status in _ENDS_BADLY and not (
            found.status == StepStatus.FAILED and inner.continue_on_error
        ):
            error = found.error or StepError(kind=FailureKind.ASSERT_FAILED, message="failed")
            self.set_saga(step.id, sagas.compensation_ended(saga, by=inner.id, error=error))
            return True
        self.set_saga(step.id, saga.model_copy(update={"undo_cursor": saga.undo_cursor + 1}))
        return True

    def set_saga(self, step_id: str, saga: sagas.Saga) -> None:
        self.steps[step_id] = self.steps[step_id].model_copy(update={"saga": saga})

    def end_saga(
        self, step_id: str, catch_error: StepError | None = None, cancelled: str | None = None
    ) -> None:
        record = self.steps[step_id]
        outcome = sagas.outcome(
            record.saga, catch_error=catch_error, cancelled=record.cancelled or cancelled
        )
        self.settle(record, outcome.status, error=outcome.error, detail=outcome.detail)
        self.after_settle(self.steps[step_id])

    # --- stopping -----------------------------------------------------------------------

    def stop(self, path: str, why: str) -> None:
        """Ask the step (or iteration) at ``path`` to stop: what it holds is released now,
        an action under way finishes first."""
        record = self.steps.get(path)
        if record is None or record.status.settled or record.cancelled is not None:
            return
        step = self.step_named(record.step)
        if record.fork is not None or record.saga is not None:
            self.steps[path] = record.model_copy(update={"cancelled": why})
            if record.fork is not None:
                for branch in record.fork.branches:
                    self.stop(branch, why)
            else:
                saga = record.saga
                listed = step.try_ if saga.stage == "try" else step.catch
                if saga.stage != "compensate" and saga.cursor < len(listed):
                    self.stop(listed[saga.cursor].id, why)
            self.queue_block(path)
            return
        if record.fanout is not None:
            self.steps[path] = record.model_copy(update={"cancelled": why})
            self.set_fanout(step, halted=True)
            for index in range(record.fanout.launched):
                self.stop(keys.step_path(step.id, index), why)
            self.maybe_settle_fanout(step)
            self.after_settle(self.steps[path])
            return
        error = StepError(kind=FailureKind.CANCELLED, message=why)
        if record.status == StepStatus.WAITING:
            self.unpark(record)
            if record.due_at is not None:
                purpose = "delay" if step.kind == "delay" else "wait_timeout"
                self.effects.append(self.cancel_timer(record, purpose))
            if step.kind == "call_workflow":
                self.effects.append(self.cancel_child_effect(record, why))
        elif record.status == StepStatus.RETRYING:
            self.effects.append(self.cancel_timer(record, "retry"))
        else:
            issued = [
                effect
                for effect in self.effects
                if isinstance(effect, Execute)
                and (effect.path, effect.visit, effect.attempt)
                == (path, record.visit, record.attempt)
            ]
            if not issued:
                # Handed out already: it finishes, and its result says what happened.
                self.steps[path] = record.model_copy(update={"cancelled": why})
                if step.kind == "send_transaction":
                    self.effects.append(self.withdraw_effect(self.steps[path]))
                return
            # Asked for in this very decision: it is never handed out.
            self.effects[:] = [e for e in self.effects if not any(e is i for i in issued)]
        self.settle(record, StepStatus.CANCELLED, error=error)
        self.after_settle(self.steps[path])

    def cancel_timer(self, record: StepRecord, purpose: str) -> CancelTimer:
        return CancelTimer(
            run_id=self.fields["run_id"],
            path=record.path,
            visit=record.visit,
            attempt=record.attempt,
            purpose=purpose,
        )

    def stopped_result(self, record: StepRecord, output: Any, error: StepError | None) -> None:
        """The result of an action asked to stop while under way: it went through (what
        happened stays recorded), or it is cancelled."""
        why = record.cancelled or "cancelled"
        if error is None:
            detail = {"stopped": why, "went_through": True}
            self.settle(record, StepStatus.SUCCEEDED, output=output, detail=detail)
            return
        if error.kind != FailureKind.CANCELLED:
            error = StepError(
                kind=FailureKind.CANCELLED, message=f"{why} ({error.kind}: {error.message})"
            )
        self.settle(record, StepStatus.CANCELLED, error=error, detail={"stopped": why})
