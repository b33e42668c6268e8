"""The run engine: ``advance(workflow, state, event, now) -> (state, effects)``.

Pure: no I/O, no clock (``now`` is given), no randomness. Steps run strictly in order;
each step either settles at once (``choose``, a skipped ``if``, the ``log``/``assert``/
``fail`` commands) or asks for an effect and waits for the event that reports it.
Every event names its run, step path, visit and attempt, so a duplicate or stale event
is recognised and ignored.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from rflow.engine import children, keys, signals
from rflow.engine.blocks import Blocks
from rflow.engine.context import (
    WAIT_URL,
    compare,
    holds,
    mentions,
    render,
    render_input,
    run_context,
)
from rflow.engine.effects import (
    CancelChild,
    Effect,
    Execute,
    Journal,
    Park,
    ScheduleTimer,
    Settle,
    StartChild,
    Unpark,
    Withdraw,
)
from rflow.engine.events import (
    CancelRequested,
    Event,
    Retry,
    SignalReceived,
    Start,
    StepResult,
    TimerFired,
    WaitResolved,
)
from rflow.engine.rerun import RerunError
from rflow.engine.rerun import plan as rerun_plan
from rflow.engine.retry import decide
from rflow.engine.state import Escalated, Fanout, RunState, RunStatus, StepRecord, StepStatus
from rflow.engine.tree import tree
from rflow.failures import FailureKind, RflowError, StepError
from rflow.lang.envsubst import display
from rflow.lang.model import Escalate, Workflow
from rflow.lang.model.resources import Config
from rflow.lang.timespec import parse_instant

MAX_EXECUTIONS = 10_000
"""Step starts one run may make; a ``goto`` loop past this fails the run."""

MAX_HISTORY = 100
"""Archived records (earlier visits of revisited steps) kept in the run state; the read
model has every one through the journal effects."""

STATE_KINDS = frozenset({"state_set", "list_add", "list_remove"})
INLINE_COMMANDS = frozenset({"log", "assert", "fail"})
EFFECT_KINDS = frozenset({"http_call", "notify", "command", "send_transaction", "read", "query"})
"""Actions whose input an executor hands to the world: rendered with :func:`render_input`,
so ``${VAR}`` placeholders are filled in there and only there. State changes are stored,
waits and delays read by the engine: they render run data as it is."""


def resume(
    workflow: Workflow, state: RunState | None, config: Config | None = None
) -> list[Effect]:
    """The effects an unsettled run is waiting on, to issue again after a restart or a
    rebalance: every in-flight action (same idempotency key and attempt), every pending
    timer and wait. Each is idempotent where it lands, so re-issuing is always safe."""
    if state is None or state.settled:
        return []
    return _Run(workflow, state, state.updated_at, config or Config()).pending_effects()


def advance(
    workflow: Workflow,
    state: RunState | None,
    event: Event,
    now: datetime,
    config: Config | None = None,
) -> tuple[RunState | None, list[Effect]]:
    """Apply ``event`` to the run ``state`` of ``workflow``; return the new state and effects.

    ``config`` is the project's engine-wide configuration (the default approval timeout).
    """
    config = config or Config()
    if isinstance(event, Start | Retry):
        if state is not None:
            return state, []  # a redelivered start
        if isinstance(event, Start):
            run = _Run.start(workflow, event, now, config)
        else:
            try:
                run = _Run.retry(workflow, event, now, config)
            except RerunError:
                return None, []  # checked before it was asked for; a stale request
    else:
        if state is None or state.settled:
            return state, []  # a late or duplicate event for a run that is over
        run = _Run(workflow, state, now, config)
        run.apply(event)
    run.proceed()
    return run.freeze(), run.effects


class _Run(Blocks):
    """A mutable working copy of one run for the duration of one ``advance``."""

    def __init__(self, workflow: Workflow, state: RunState, now: datetime, config: Config) -> None:
        self.workflow = workflow
        self.config = config
        self.now = now
        # The run's fields as they are (nested models stay models): read and changed here,
        # then put back together unvalidated by :meth:`snapshot`.
        self.fields = {k: v for k, v in state.__dict__.items() if k not in _COLLECTIONS}
        self.steps: dict[str, StepRecord] = dict(state.steps)
        self.history: list[StepRecord] = list(state.history)
        self.visits: dict[str, int] = dict(state.visits)
        self.values: dict[str, Any] = dict(state.state)
        self.effects: list[Effect] = []
        self.key = keys.run_key(state.workflow, state.trigger_key, state.matrix)
        self.tree = tree(workflow)
        self.queue: list[str] = []
        """Blocks to drive: a step inside each settled since (:mod:`rflow.engine.blocks`)."""

    @classmethod
    def start(cls, workflow: Workflow, event: Start, now: datetime, config: Config) -> _Run:
        state = RunState(
            run_id=event.run_id,
            workflow=event.workflow,
            version=event.version,
            trigger_key=event.trigger_key,
            matrix=event.matrix,
            group=event.group,
            source=event.source,
            trigger=event.trigger,
            state=event.state,
            parent=event.parent,
            created_at=now,
            updated_at=now,
        )
        run = cls(workflow, state, now, config)
        parent = event.parent.model_dump(mode="json") if event.parent is not None else None
        run.journal_started(**({"parent": parent} if parent else {}))
        return run

    @classmethod
    def retry(cls, workflow: Workflow, event: Retry, now: datetime, config: Config) -> _Run:
        """The new run continuing failed run ``event.previous`` (:mod:`rflow.engine.rerun`)."""
        previous = event.previous
        plan = rerun_plan(workflow, previous, event.from_step)
        visits = dict(previous.visits)
        places = tree(workflow)
        rerun = set(plan.rerun) | {step.id for step in (*workflow.finally_, *workflow.on_error)}
        rerun |= {inner for step_id in list(rerun) for inner in places.within(step_id)}
        for path, record in previous.steps.items():
            if record.step in rerun and path == record.step:
                # A new visit: new idempotency keys for everything that runs again.
                visits[record.step] = max(visits.get(record.step, 1), record.visit) + 1
        kept = dict(plan.kept)
        if plan.resumed_foreach is not None:
            parent = previous.steps[plan.resumed_foreach]
            kept[parent.path] = parent.model_copy(
                update={
                    "status": StepStatus.RUNNING,
                    "visit": visits[parent.step],
                    "output": None,
                    "error": None,
                    "settled_at": None,
                    "started_at": now,
                    "fanout": Fanout(items=parent.fanout.items),
                }
            )
        state = RunState(
            run_id=event.run_id,
            workflow=previous.workflow,
            version=previous.version,
            trigger_key=previous.trigger_key,
            matrix=previous.matrix,
            group=previous.group,
            source=previous.source,
            trigger=previous.trigger,
            state=event.state,
            cursor=plan.restart,
            steps=kept,
            history=previous.history,
            visits=visits,
            executions=previous.executions,
            retry_of=previous.run_id,
            parent=previous.parent,
            created_at=now,
            updated_at=now,
        )
        run = cls(workflow, state, now, config)
        run.journal_started(retry_of=previous.run_id, from_step=event.from_step)
        for path, record in plan.kept.items():
            data: dict[str, Any] = {
                "attempt": record.attempt,
                "visit": record.visit,
                "input": record.input,
                "output": record.output,
                "kept_from": previous.run_id,
                "started_at": record.started_at.isoformat(),
            }
            if record.settled_at is not None:
                data["settled_at"] = record.settled_at.isoformat()
            if record.error is not None:
                data["error"] = record.error.model_dump(mode="json")
            run.journal("step_settled", path, str(record.status), **data)
        if plan.resumed_foreach is not None:
            step = run.step_named(plan.resumed_foreach)
            run.journal("step_started", step.id, "running", kind=step.kind, foreach=True)
            run.launch(step)
            run.after_settle(run.steps[step.id])
        return run

    def journal_started(self, **extra: Any) -> None:
        """The ``run_started`` entry: the firing and version the read model records."""
        fields = self.fields
        self.journal(
            "run_started",
            None,
            "running",
            trigger=fields["trigger"],
            matrix=fields["matrix"],
            version=fields["version"],
            trigger_key=fields["trigger_key"],
            group=fields["group"],
            source=fields["source"],
            **extra,
        )

    # --- the snapshot the rest of the engine reads -------------------------------

    def snapshot(self) -> RunState:
        return RunState(
            **self.fields,
            steps=self.steps,
            history=self.history,
            visits=self.visits,
            state=self.values,
        )

    def freeze(self) -> RunState:
        if self.fields["phase"] == "main" and not RunStatus(self.fields["status"]).terminal:
            parked = [r for r in self.steps.values() if r.status == StepStatus.WAITING]
            status = RunStatus.WAITING if parked else RunStatus.RUNNING
            if status != self.fields["status"]:
                self.fields["status"] = status
                self.journal("run_status", None, str(status), waiting_for=self.waiting_for(parked))
        self.fields["updated_at"] = self.now
        return self.snapshot()

    def waiting_for(self, parked: list[StepRecord]) -> str | None:
        """What a parked run waits for, in words: the read model shows it."""
        found = []
        for record in sorted(parked, key=lambda r: r.path):
            step = self.step_named(record.step)
            if step.kind == "delay":
                what = "a delay"
            elif step.kind == "call_workflow":
                what = f"child run {record.input.get('run_id')} of {step.call_workflow.workflow}"
            elif step.wait_for.signal is not None:
                what = f"signal {step.wait_for.signal.name!r}"
            elif step.wait_for.approval is not None:
                what = "an approval"
            elif step.wait_for.webhook is not None:
                what = "a webhook request"
            else:
                what = "a chain event"
            due = f" until {record.due_at.isoformat()}" if record.due_at is not None else ""
            found.append(f"{what} at step {record.path}{due}")
        return "; ".join(found) or None

    def context(self, **extra: Any) -> dict[str, Any]:
        return run_context(_View(self), env=self.workflow.env, **extra)

    @property
    def run_id(self) -> str:
        return self.fields["run_id"]

    def step_list(self, phase: str | None = None) -> list[Any]:
        phase = phase or self.fields["phase"]
        return self.tree.list_of(None, phase)

    def step_named(self, step_id: str) -> Any:
        return self.tree.step(step_id)

    def journal(self, event: str, path: str | None, status: str, **data: Any) -> None:
        if path is not None and path in self.steps:
            data.setdefault("visit", self.steps[path].visit)
            place = self.tree.places.get(path)
            if place is not None and place.owner is not None:
                # Where the step sits, for the read model to draw blocks as blocks.
                data.setdefault("parent", place.owner)
                data.setdefault("role", place.role)
        self.fields["journaled"] += 1
        data["seq"] = self.fields["journaled"]
        self.effects.append(
            Journal(
                run_id=self.run_id,
                workflow=self.fields["workflow"],
                event=event,
                path=path,
                status=status,
                at=self.now,
                data=data,
            )
        )

    # --- events ---------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        if isinstance(event, StepResult):
            self.on_result(event)
        elif isinstance(event, TimerFired):
            self.on_timer(event)
        elif isinstance(event, WaitResolved):
            self.on_wait_resolved(event)
        elif isinstance(event, SignalReceived):
            self.on_signal(event)
        elif isinstance(event, CancelRequested):
            self.on_cancel(event)

    def current(
        self, path: str, visit: int, attempt: int | None, status: StepStatus
    ) -> StepRecord | None:
        record = self.steps.get(path)
        if record is None or record.visit != visit or record.status != status:
            return None
        if attempt is not None and record.attempt != attempt:
            return None
        return record

    def on_result(self, event: StepResult) -> None:
        record = self.current(event.path, event.visit, event.attempt, StepStatus.RUNNING)
        if record is None:
            self.on_escalation_notice(event)
            return
        if record.cancelled is not None:
            self.stopped_result(record, event.output, event.error)
        elif event.error is None:
            output = event.output
            step = self.step_named(record.step)
            if step.kind in STATE_KINDS and isinstance(output, dict):
                self.values.update(output.get("state") or {})
            self.settle(record, StepStatus.SUCCEEDED, output=output)
        else:
            self.failed_attempt(record, event.error)
        self.after_settle(record)

    def on_timer(self, event: TimerFired) -> None:
        if event.purpose == "retry":
            record = self.current(event.path, event.visit, event.attempt, StepStatus.RETRYING)
            if record is None:
                return
            step = self.step_named(record.step)
            attempt = record.attempt + 1
            self.steps[record.path] = record.model_copy(
                update={"status": StepStatus.RUNNING, "attempt": attempt}
            )
            self.begin_action(step, record.path, record.visit, attempt, self.item_context(record))
            self.after_settle(self.steps[record.path])
            return
        record = self.current(event.path, event.visit, event.attempt, StepStatus.WAITING)
        if record is None:
            return
        step = self.step_named(record.step)
        if event.purpose == "delay" and step.kind == "delay":
            self.settle(record, StepStatus.SUCCEEDED, output={"until": event.due_at.isoformat()})
        elif event.purpose == "wait_timeout" and step.kind == "wait_for":
            self.wait_timed_out(step, record)
        elif event.purpose == "wait_timeout" and step.kind == "call_workflow":
            self.child_timed_out(step, record)
        self.after_settle(record)

    def on_wait_resolved(self, event: WaitResolved) -> None:
        record = self.steps.get(event.path)
        if record is None or record.status != StepStatus.WAITING or record.wait_id != event.wait_id:
            return
        self.unpark(record)
        payload = event.payload
        step = self.step_named(record.step)
        if step.kind == "call_workflow":
            self.child_answered(step, record, payload)
        elif (
            step.wait_for.approval is not None
            and isinstance(payload, dict)
            and payload.get("decision") == "reject"
        ):
            by = payload.get("by") or "an approver"
            self.rejected(step, record, payload, f"rejected by {by}")
        else:
            self.settle(record, StepStatus.SUCCEEDED, output=self.answered(record, payload))
        self.after_settle(record)

    def on_signal(self, event: SignalReceived) -> None:
        """A signal no wait row took: the step waiting for it now takes it, or the run
        keeps it when its workflow buffers that signal (:mod:`rflow.engine.signals`)."""
        seen, new = signals.fresh(self.fields["signals_seen"], event.signal_id)
        if not new:
            return
        self.fields["signals_seen"] = seen
        waiting = []
        for record in self.steps.values():
            if record.status != StepStatus.WAITING:
                continue
            step = self.step_named(record.step)
            wanted = step.wait_for.signal if step.kind == "wait_for" else None
            if wanted is not None and wanted.name == event.name:
                waiting.append((record.path, record.started_at))
        path = signals.waiter(waiting)
        if path is not None:
            record = self.steps[path]
            self.unpark(record)
            if record.due_at is not None:
                self.effects.append(self.cancel_timer(record, "wait_timeout"))
            self.settle(record, StepStatus.SUCCEEDED, output=event.payload)
            self.after_settle(self.steps[path])
            return
        spec = self.workflow.signals.get(event.name)
        if spec is None or not spec.buffer:
            return  # refused where it was sent: nothing here waits for it
        # Past signals.MAX_KEPT of a name, one more is dropped (documented with buffer).
        self.fields["signals"], _ = signals.keep(self.fields["signals"], event.name, event.payload)

    def on_cancel(self, event: CancelRequested) -> None:
        if self.fields["cancel_requested"] is not None or self.fields["phase"] != "main":
            return
        self.fields["cancel_requested"] = event.reason
        # A fan-out starts nothing new; parked steps hold nothing in flight, so they stop
        # now. A running action (a send handed to the relayer, say) finishes first and
        # the run stops at that boundary.
        for record in list(self.steps.values()):
            if record.fanout is not None and not record.status.settled:
                self.set_fanout(self.step_named(record.step), halted=True)
        for record in list(self.steps.values()):
            if (
                record.phase == "main"
                and record.status in (StepStatus.WAITING, StepStatus.RETRYING)
                and not self.tree.compensating(record.step)  # a compensation runs on
                and self.steps[record.path].status == record.status
            ):
                self.unpark(record)
                step = self.step_named(record.step)
                if step.kind == "call_workflow" and record.status == StepStatus.WAITING:
                    self.effects.append(self.cancel_child_effect(record, event.reason))
                error = StepError(kind=FailureKind.CANCELLED, message=event.reason)
                self.settle(record, StepStatus.FAILED, error=error)
                self.after_settle(record)
        for record in list(self.steps.values()):
            if (record.fork is not None or record.saga is not None) and not record.status.settled:
                self.queue_block(record.path)  # each stops what is left of it
        for record in list(self.steps.values()):
            if record.fanout is not None and not record.status.settled:
                step = self.step_named(record.step)
                self.maybe_settle_fanout(step)
                self.after_settle(self.steps[step.id])

    # --- moving on --------------------------------------------------------------------

    def proceed(self) -> None:
        while True:
            while self.queue:
                self.drive(self.queue.pop(0))
            if self.fields["phase"] == "done":
                return
            steps = self.step_list()
            cursor = self.fields["cursor"]
            if cursor >= len(steps):
                self.end_phase()
                continue
            step = steps[cursor]
            record = self.steps.get(step.id)
            if record is not None:
                if not record.status.settled:
                    if self.queue:
                        continue
                    return
                self.fields["cursor"] = cursor + 1
                continue
            if self.fields["phase"] == "main" and self.fields["cancel_requested"] is not None:
                self.finish_main(
                    RunStatus.CANCELLED,
                    StepError(kind=FailureKind.CANCELLED, message=self.fields["cancel_requested"]),
                )
                continue
            self.begin_step(step)
            record = self.steps.get(step.id)
            if record is not None and record.status.settled:
                self.after_settle(record)

    def end_phase(self) -> None:
        if self.fields["phase"] == "main":
            status = RunStatus(self.fields["status"])
            if status.terminal:
                self.finish_main(status, self.fields["error"])
                return
            try:
                self.fields["outputs"] = self.outputs()
            except RflowError as exc:
                self.finish_main(RunStatus.FAILED, exc.as_data())
                return
            self.finish_main(RunStatus.SUCCEEDED, self.fields["error"])
            return
        if self.fields["phase"] == "on_error":
            self.fields["phase"], self.fields["cursor"] = "finally", 0
            return
        self.fields["phase"] = "done"
        status = RunStatus(self.fields["status"])
        error = self.fields["error"]
        error = StepError.model_validate(error) if isinstance(error, dict) else error
        on_failure = self.workflow.on_failure if status == RunStatus.FAILED else None
        self.journal(
            "run_settled", None, str(status), error=error.model_dump(mode="json") if error else None
        )
        # A failed run's final state: the DLQ keeps it, and a retry continues from it.
        journal = self.freeze().model_dump(mode="json") if status == RunStatus.FAILED else {}
        self.effects.append(
            Settle(
                run_id=self.run_id,
                workflow=self.fields["workflow"],
                status=status,
                on_failure=on_failure,
                error=error,
                journal=journal,
                parent=self.fields["parent"],
                outputs=self.fields["outputs"] if status == RunStatus.SUCCEEDED else None,
            )
        )

    def finish_main(self, status: RunStatus, error: StepError | None) -> None:
        self.fields["status"] = status
        self.fields["error"] = error
        # A failure is reported by on_error first (observational), then finally runs.
        failed = status == RunStatus.FAILED and self.workflow.on_error
        self.fields["phase"] = "on_error" if failed else "finally"
        self.fields["cursor"] = 0

    def outputs(self) -> dict[str, Any] | None:
        """The workflow's ``outputs``, rendered now its steps have succeeded."""
        if not self.workflow.outputs:
            return None
        context = self.context()
        found = {}
        for name, value in self.workflow.outputs.items():
            try:
                found[name] = render(value, context)
            except RflowError as exc:
                raise RflowError(exc.kind, f"outputs.{name}: {exc.message}") from None
        return found

    # --- starting steps ---------------------------------------------------------------

    def begin_step(self, step: Any) -> None:
        visit = self.visits.get(step.id, 1)
        if step.foreach is not None:
            self.begin_foreach(step, visit)
            return
        context = self.context(
            run_status=self.status_for_finally(), error=self.failure_for(step.id)
        )
        try:
            runs = holds(step.if_, context)
        except RflowError as exc:
            self.record(step, step.id, visit, StepStatus.RUNNING)
            self.settle(self.steps[step.id], StepStatus.FAILED, error=exc.as_data())
            return
        if not runs:
            self.record(step, step.id, visit, StepStatus.SKIPPED, settled=True)
            self.journal("step_settled", step.id, "skipped")
            return
        if not self.count_execution(step, step.id, visit):
            return
        if step.kind in ("parallel", "race", "try"):
            self.begin_block(step, visit)
            return
        self.record(step, step.id, visit, StepStatus.RUNNING)
        self.begin_action(step, step.id, visit, 1, context)

    def status_for_finally(self) -> str | None:
        phase = self.fields["phase"]
        return str(self.fields["status"]) if phase in ("finally", "on_error") else None

    def failure_for(self, step_id: str) -> StepError | None:
        """The failure a step in a catch or a compensation runs for: its ``error``."""
        holder = self.tree.after_failure(step_id)
        record = self.steps.get(holder) if holder is not None else None
        return record.saga.error if record is not None and record.saga is not None else None

    def count_execution(self, step: Any, path: str, visit: int) -> bool:
        self.fields["executions"] += 1
        if self.fields["executions"] <= MAX_EXECUTIONS:
            return True
        self.record(step, path, visit, StepStatus.RUNNING)
        message = (
            f"more than {MAX_EXECUTIONS} step executions in one run (a goto loop that never ends?)"
        )
        self.settle(
            self.steps[path],
            StepStatus.FAILED,
            error=StepError(kind=FailureKind.ASSERT_FAILED, message=message),
        )
        return False

    def record(
        self,
        step: Any,
        path: str,
        visit: int,
        status: StepStatus,
        *,
        settled: bool = False,
        **extra: Any,
    ) -> None:
        self.steps[path] = StepRecord(
            path=path,
            step=step.id,
            phase=self.fields["phase"],
            status=status,
            visit=visit,
            started_at=self.now,
            settled_at=self.now if settled else None,
            **extra,
        )

    def item_context(self, record: StepRecord) -> dict[str, Any]:
        error = self.failure_for(record.step)
        if record.path == record.step:
            return self.context(run_status=self.status_for_finally(), error=error)
        parent = self.steps[record.step]
        index = int(record.path[len(record.step) + 1 : -1])
        return self.context(
            item=parent.fanout.items[index],
            item_index=index,
            run_status=self.status_for_finally(),
            error=error,
        )

    def begin_action(
        self, step: Any, path: str, visit: int, attempt: int, context: dict[str, Any]
    ) -> None:
        """Start (or restart, for a retry) the action of ``step`` at ``path``."""
        record = self.steps[path]
        try:
            self._begin_action(step, record, visit, attempt, context)
        except RflowError as exc:
            self.settle(self.steps[path], StepStatus.FAILED, error=exc.as_data())

    def _begin_action(
        self, step: Any, record: StepRecord, visit: int, attempt: int, context: dict[str, Any]
    ) -> None:
        path, kind = record.path, step.kind
        key = keys.idempotency_key(self.key, path, visit)
        if attempt == 1:
            extra = {"detail": self.child_of(step, path, visit)} if kind == "call_workflow" else {}
            # A delay or a wait parks at once: the read model says so, as the run does.
            parks = kind in ("delay", "wait_for")
            status = "waiting" if parks else "running"
            self.journal("step_started", path, status, kind=kind, **extra)
        if kind == "choose":
            self.settle(record, StepStatus.SUCCEEDED, output=self.choose(step, context))
            return
        if kind == "command" and step.command.name in INLINE_COMMANDS:
            self.inline_command(step, record, context)
            return
        if kind == "delay":
            due = self.delay_until(step, context)
            self.steps[path] = record = record.model_copy(
                update={
                    "status": StepStatus.WAITING,
                    "input": {"until": due.isoformat()},
                    "due_at": due,
                }
            )
            self.effects.append(self.timer_effect(record, "delay"))
            return
        if kind == "wait_for":
            self.park(step, record, visit, attempt, key, context)
            return
        if kind == "call_workflow":
            self.begin_call(step, record, attempt, context)
            return
        rendering = render_input if kind in EFFECT_KINDS else render
        action = rendering(_dump(step.action), context)
        update = {"status": StepStatus.RUNNING, "attempt": attempt, "input": action}
        if kind == "send_transaction":
            # The send's deadline, from this attempt's start: kept in the record, so a
            # resumed run hands the relayer the same one.
            update["due_at"] = self.now + step.timeout if step.timeout is not None else None
        self.steps[path] = record = record.model_copy(update=update)
        self.effects.append(self.execute_effect(step, record))

    # --- effect construction (shared with resume) ---------------------------------------

    def execute_effect(self, step: Any, record: StepRecord) -> Execute:
        wait_id, wait_path = self.next_wait(step, record.input)
        return Execute(
            wait_id=wait_id,
            wait_path=wait_path,
            run_id=self.run_id,
            workflow=self.fields["workflow"],
            path=record.path,
            visit=record.visit,
            attempt=record.attempt,
            key=keys.idempotency_key(self.key, record.path, record.visit),
            kind=step.kind,
            action=record.input,
            timeout=step.timeout.total_seconds() if step.timeout else None,
            deadline=record.due_at if step.kind == "send_transaction" else None,
        )

    def next_wait(self, step: Any, action: Any) -> tuple[str | None, str | None]:
        """The id and path of the webhook wait ``${{ wait.url }}`` names in ``action``:
        the first one after ``step`` in its list, at the visit it will park in."""
        if not mentions(action, WAIT_URL):
            return None, None
        for phase in ("main", "finally"):
            steps = self.step_list(phase)
            ids = [s.id for s in steps]
            if step.id not in ids:
                continue
            for later in steps[ids.index(step.id) + 1 :]:
                webhook = later.wait_for.webhook if later.kind == "wait_for" else None
                if webhook is not None and later.foreach is None:
                    visit = self.visits.get(later.id, 1)
                    return keys.idempotency_key(self.key, later.id, visit), webhook.path
        return None, None

    def timer_effect(self, record: StepRecord, purpose: str) -> ScheduleTimer:
        return ScheduleTimer(
            run_id=self.run_id,
            path=record.path,
            visit=record.visit,
            attempt=record.attempt,
            purpose=purpose,
            due_at=record.due_at,
            key=keys.idempotency_key(self.key, record.path, record.visit),
        )

    def park_effect(self, record: StepRecord) -> Park:
        return Park(
            run_id=self.run_id,
            workflow=self.fields["workflow"],
            path=record.path,
            wait_id=record.wait_id,
            wait=record.input,
            timeout_at=record.due_at,
            escalated_at=record.escalation.at if record.escalation else None,
        )

    def escalation_effect(self, step: Any, record: StepRecord) -> Execute:
        """The notice of an escalated approval, to its channel (a notify action)."""
        spec = record.input.get("on_timeout", {}).get("escalate", {})
        approval = record.input.get("approval", {})
        priority = approval.get("priority", "normal")
        message = spec.get("message") or (
            f"{self.fields['workflow']}: run {self.run_id} waits at {record.path} with no "
            f"decision past its deadline; it now waits until {record.due_at.isoformat()}: "
            f"{approval.get('prompt', '')}"
        )
        return Execute(
            run_id=self.run_id,
            workflow=self.fields["workflow"],
            path=record.path,
            visit=record.visit,
            attempt=record.attempt,
            key=keys.idempotency_key(self.key, record.path, record.visit) + ":escalation",
            kind="notify",
            action={
                "channel": spec.get("channel", record.escalation.channel),
                "message": str(message),
                "severity": spec.get("severity")
                or ("critical" if priority == "urgent" else "warning"),
            },
        )

    def pending_effects(self) -> list[Effect]:
        """Effects that in-flight records are waiting on, as issued when they started."""
        effects: list[Effect] = []
        for record in self.steps.values():
            if record.fanout is not None or record.fork is not None or record.saga is not None:
                continue
            step = self.step_named(record.step)
            if record.status == StepStatus.RUNNING:
                if record.cancelled is not None and step.kind == "send_transaction":
                    effects.append(self.withdraw_effect(record))
                effects.append(self.execute_effect(step, record))
            elif record.status == StepStatus.WAITING and step.kind == "call_workflow":
                effects.append(self.start_child_effect(step, record))
                if record.due_at is not None:
                    effects.append(self.timer_effect(record, "wait_timeout"))
            elif record.status == StepStatus.RETRYING:
                effects.append(self.timer_effect(record, "retry"))
            elif record.status == StepStatus.WAITING and step.kind == "delay":
                effects.append(self.timer_effect(record, "delay"))
            elif record.status == StepStatus.WAITING:
                effects.append(self.park_effect(record))
                if record.due_at is not None:
                    effects.append(self.timer_effect(record, "wait_timeout"))
                notice = record.escalation
                if notice is not None and not notice.delivered and notice.error is None:
                    effects.append(self.escalation_effect(step, record))
        return effects

    # --- child runs (rflow.engine.children) -------------------------------------------

    def begin_call(
        self, step: Any, record: StepRecord, attempt: int, context: dict[str, Any]
    ) -> None:
        """Start the child run of a ``call_workflow`` step, and wait for it unless told not to."""
        call = step.call_workflow
        inputs = render(_dump(call.inputs), context)
        key = children.trigger_key(self.run_id, record.path, record.visit, attempt)
        child_id = children.child_run_id(call.workflow, key)
        wait_id = None
        if call.wait:
            wait_id = keys.idempotency_key(self.key, record.path, record.visit)
            wait_id += f"~{attempt}" if attempt > 1 else ""
        update: dict[str, Any] = {
            "attempt": attempt,
            "input": {
                "workflow": call.workflow,
                "inputs": inputs,
                "run_id": child_id,
                "trigger_key": key,
                "wait": call.wait,
            },
            "wait_id": wait_id,
        }
        if call.wait:
            update["status"] = StepStatus.WAITING
            update["due_at"] = self.now + step.timeout if step.timeout is not None else None
        self.steps[record.path] = record = record.model_copy(update=update)
        self.effects.append(self.start_child_effect(step, record))
        if not call.wait:
            self.settle(record, StepStatus.SUCCEEDED, output={"run_id": child_id})
        elif record.due_at is not None:
            self.effects.append(self.timer_effect(record, "wait_timeout"))

    def child_answered(self, step: Any, record: StepRecord, payload: Any) -> None:
        """The child run settled: the step ends with its outputs, or its failure (which
        a retry policy may retry with a new child)."""
        if record.due_at is not None:
            self.effects.append(self.cancel_timer(record, "wait_timeout"))
        output, error = children.result(step.call_workflow.workflow, payload)
        if error is None:
            self.settle(record, StepStatus.SUCCEEDED, output=output)
        else:
            self.failed_attempt(record, error)

    def child_timed_out(self, step: Any, record: StepRecord) -> None:
        self.unpark(record)
        child = record.input.get("run_id")
        why = (
            f"child run {child} of {step.call_workflow.workflow} did not end within {step.timeout}"
        )
        self.effects.append(self.cancel_child_effect(record, why))
        self.failed_attempt(record, StepError(kind=FailureKind.TIMEOUT, message=why))

    def child_of(self, step: Any, path: str, visit: int, attempt: int = 1) -> dict[str, str]:
        """The child run a call_workflow step starts, for the read model to link."""
        if step.kind != "call_workflow":
            return {}
        key = children.trigger_key(self.run_id, path, visit, attempt)
        workflow = step.call_workflow.workflow
        return {"child_run": children.child_run_id(workflow, key), "child_workflow": workflow}

    def start_child_effect(self, step: Any, record: StepRecord) -> StartChild:
        started = record.input
        return StartChild(
            run_id=self.run_id,
            workflow=self.fields["workflow"],
            path=record.path,
            visit=record.visit,
            attempt=record.attempt,
            child=started["workflow"],
            trigger_key=started["trigger_key"],
            child_run_id=started["run_id"],
            inputs=started["inputs"] or {},
            wait_id=record.wait_id,
            timeout_at=record.due_at,
        )

    def cancel_child_effect(self, record: StepRecord, why: str) -> CancelChild:
        started = record.input
        return CancelChild(
            run_id=self.run_id,
            child=started["workflow"],
            trigger_key=started["trigger_key"],
            inputs=started["inputs"] or {},
            reason=f"its parent run {self.run_id} stopped it at step {record.path}: {why}",
        )

    def withdraw_effect(self, record: StepRecord) -> Withdraw:
        return Withdraw(
            run_id=self.run_id,
            path=record.path,
            visit=record.visit,
            attempt=record.attempt,
            key=keys.idempotency_key(self.key, record.path, record.visit),
            reason=record.cancelled or "cancelled",
        )

    def choose(self, step: Any, context: dict[str, Any]) -> dict[str, Any]:
        for index, branch in enumerate(step.choose.branches):
            test = branch.when
            if isinstance(test, str):
                matched = holds(test, context)
            else:
                matched = compare(test.op, render(test.value, context), render(test.to, context))
            if matched:
                return {"branch": index, "goto": branch.goto}
        default = step.choose.default
        return {"branch": "default", "goto": None if default == "continue" else default.goto}

    def inline_command(self, step: Any, record: StepRecord, context: dict[str, Any]) -> None:
        command = step.command
        args = render_input(_dump(command.args), context)
        self.steps[record.path] = record = record.model_copy(
            update={"input": {"name": command.name, "args": args}}
        )
        # The message as written out: placeholders stay placeholders, no value is filled in.
        # A message may render to a number or an object (``${{ trigger.body.n }}``).
        message = args["message"]
        if command.name == "log":
            shown = display(message) if isinstance(message, str) else message
            self.settle(record, StepStatus.SUCCEEDED, output={"message": shown})
        elif command.name == "assert" and holds(command.args.that, context):
            self.settle(record, StepStatus.SUCCEEDED, output={"holds": True})
        else:
            text = display(message) if isinstance(message, str) else json.dumps(message)
            self.settle(
                record,
                StepStatus.FAILED,
                error=StepError(kind=FailureKind.ASSERT_FAILED, message=text),
            )

    def delay_until(self, step: Any, context: dict[str, Any]) -> datetime:
        delay = step.delay
        if delay.duration is not None:
            return self.now + delay.duration
        text = render(delay.until, context)
        try:
            instant = parse_instant(str(text))
        except Exception as exc:  # the parser's own error type, reworded as a failure kind
            raise RflowError(FailureKind.INVALID_INPUT, f"delay until: {exc}") from None
        if instant.tzinfo is None:
            instant = instant.replace(tzinfo=ZoneInfo(delay.timezone))
        return instant

    def park(
        self,
        step: Any,
        record: StepRecord,
        visit: int,
        attempt: int,
        key: str,
        context: dict[str, Any],
    ) -> None:
        wait = render(_dump(step.wait_for), context)
        signal = step.wait_for.signal
        if signal is not None:
            kept, taken = signals.take(self.fields["signals"], signal.name)
            if taken is not None:
                # Sent before this wait and kept (signals: {name: {buffer: true}}).
                self.fields["signals"] = kept
                self.steps[record.path] = record.model_copy(update={"input": wait})
                self.settle(self.steps[record.path], StepStatus.SUCCEEDED, output=taken)
                return
        approval = wait.get("approval")
        if approval and approval.get("context_fields"):
            # The wait's row keeps it as JSONB, which keeps no key order: the fields go as
            # a list, so that a reviewer reads them in the order they were declared.
            approval["context_fields"] = [
                {"name": name, "value": value} for name, value in approval["context_fields"].items()
            ]
        timeout = step.wait_timeout
        if timeout is None and step.wait_for.approval is not None:
            timeout = self.config.approval_timeout
        due = self.now + timeout if timeout is not None else None
        self.steps[record.path] = record = record.model_copy(
            update={"status": StepStatus.WAITING, "input": wait, "wait_id": key, "due_at": due}
        )
        self.effects.append(self.park_effect(record))
        if due is not None:
            self.effects.append(self.timer_effect(record, "wait_timeout"))

    def unpark(self, record: StepRecord) -> None:
        if record.wait_id is not None:
            self.effects.append(Unpark(run_id=self.run_id, wait_id=record.wait_id))

    def wait_timed_out(self, step: Any, record: StepRecord) -> None:
        """A wait's deadline passed with no answer: apply ``on_timeout`` (an escalated
        approval, its ``escalate.then``)."""
        on_timeout = step.wait_for.on_timeout
        if isinstance(on_timeout, Escalate):
            if record.escalation is None:
                self.escalate(step, record, on_timeout.escalate)
                return
            on_timeout = on_timeout.escalate.then
        self.unpark(record)
        timeout = step.wait_timeout
        if on_timeout == "continue":
            self.settle(
                record, StepStatus.SUCCEEDED, output=self.answered(record, {"timed_out": True})
            )
        elif on_timeout == "approve":
            output = self.answered(record, {"timed_out": True, "decision": "approve"})
            self.settle(record, StepStatus.SUCCEEDED, output=output)
        elif on_timeout == "reject":
            output = {"timed_out": True, "decision": "reject"}
            self.rejected(step, record, output, "rejected: no decision before the timeout")
        elif on_timeout == "fail":
            message = f"no answer within {timeout}" if timeout else "no answer before the timeout"
            if record.escalation is not None:
                message = "no answer before the deadline, nor before its extension"
            self.settle(
                record,
                StepStatus.FAILED,
                output=self.answered(record, None),
                error=StepError(kind=FailureKind.TIMEOUT, message=message),
            )
        else:
            output = self.answered(record, {"timed_out": True, "goto": on_timeout.goto})
            self.settle(record, StepStatus.SUCCEEDED, output=output)

    def rejected(self, step: Any, record: StepRecord, output: dict[str, Any], why: str) -> None:
        """An approval answered no (or ``on_timeout: reject``): apply ``on_reject``. A
        rejection is a decision: by default the run ends ``rejected``, which is neither
        dead-lettered nor counted by a circuit breaker."""
        on_reject = step.wait_for.on_reject
        output = self.answered(record, output)
        error = StepError(kind=FailureKind.REJECTED, message=why)
        if on_reject == "end":
            self.settle(record, StepStatus.REJECTED, output=output, error=error)
        elif on_reject == "fail":
            self.settle(record, StepStatus.FAILED, output=output, error=error)
        elif on_reject == "continue":
            self.settle(record, StepStatus.SUCCEEDED, output=output)
        else:
            self.settle(record, StepStatus.SUCCEEDED, output={**output, "goto": on_reject.goto})

    def escalate(self, step: Any, record: StepRecord, spec: Any) -> None:
        """The first deadline of an approval passed: notify the channel and wait until
        ``extend`` past it. The extended wait is the step's second attempt, so its timer
        and its notice have keys of their own and the first deadline's timer, should it
        fire again, is stale."""
        due = record.due_at + spec.extend
        escalation = Escalated(at=self.now, channel=spec.channel)
        self.steps[record.path] = record = record.model_copy(
            update={"attempt": record.attempt + 1, "due_at": due, "escalation": escalation}
        )
        self.effects.append(self.park_effect(record))
        self.effects.append(self.timer_effect(record, "wait_timeout"))
        self.effects.append(self.escalation_effect(step, record))

    def on_escalation_notice(self, event: StepResult) -> None:
        """The result of an escalation's notice: recorded, whatever it says (the extended
        deadline holds either way)."""
        record = self.current(event.path, event.visit, event.attempt, StepStatus.WAITING)
        notice = record.escalation if record is not None else None
        if notice is None or notice.delivered or notice.error is not None:
            return
        notice = notice.model_copy(update={"delivered": event.error is None, "error": event.error})
        self.steps[record.path] = record.model_copy(update={"escalation": notice})

    def answered(self, record: StepRecord, output: Any) -> Any:
        """A wait's output, with its escalation when there was one."""
        if record.escalation is None:
            return output
        escalation = record.escalation.model_dump(mode="json", exclude_none=True)
        return {**(output if isinstance(output, dict) else {}), "escalation": escalation}

    # --- foreach ----------------------------------------------------------------------

    def begin_foreach(self, step: Any, visit: int) -> None:
        context = self.context(
            run_status=self.status_for_finally(), error=self.failure_for(step.id)
        )
        self.record(step, step.id, visit, StepStatus.RUNNING)
        self.journal("step_started", step.id, "running", kind=step.kind, foreach=True)
        try:
            items = (
                step.foreach if isinstance(step.foreach, list) else render(step.foreach, context)
            )
        except RflowError as exc:
            self.settle(self.steps[step.id], StepStatus.FAILED, error=exc.as_data())
            return
        if not isinstance(items, list):
            error = StepError(
                kind=FailureKind.INVALID_INPUT,
                message=f"foreach expects a list, got {type(items).__name__}",
            )
            self.settle(self.steps[step.id], StepStatus.FAILED, error=error)
            return
        if (why := step.over_cap(len(items))) is not None:
            error = StepError(kind=FailureKind.INVALID_INPUT, message=why)
            self.settle(self.steps[step.id], StepStatus.FAILED, error=error)
            return
        if step.batch_size:
            items = [items[i : i + step.batch_size] for i in range(0, len(items), step.batch_size)]
        fanout = Fanout(items=items)
        self.steps[step.id] = self.steps[step.id].model_copy(
            update={"fanout": fanout, "input": {"items": len(items)}}
        )
        self.launch(step)

    def launch(self, step: Any) -> None:
        """Start iterations up to ``max_parallel``; settle the parent when all are done."""
        while True:
            parent = self.steps[step.id]
            fan = parent.fanout
            if fan.halted or fan.launched >= len(fan.items) or fan.in_flight >= step.parallelism:
                break
            index = fan.launched
            path = keys.step_path(step.id, index)
            self.set_fanout(step, launched=index + 1)
            kept = self.steps.get(path)
            if kept is not None and kept.status.settled:
                continue  # settled in the run this one retries: it stays settled
            context = self.context(
                item=fan.items[index],
                item_index=index,
                run_status=self.status_for_finally(),
                error=self.failure_for(step.id),
            )
            self.set_fanout(step, in_flight=self.steps[step.id].fanout.in_flight + 1)
            try:
                runs = holds(step.if_, context)
            except RflowError as exc:
                self.record(step, path, parent.visit, StepStatus.RUNNING)
                self.settle(self.steps[path], StepStatus.FAILED, error=exc.as_data())
                runs = None
            if runs is False:
                self.record(step, path, parent.visit, StepStatus.SKIPPED, settled=True)
                self.journal("step_settled", path, "skipped")
            elif runs and self.count_execution(step, path, parent.visit):
                self.record(step, path, parent.visit, StepStatus.RUNNING)
                self.begin_action(step, path, parent.visit, 1, context)
            if self.steps[path].status.settled:
                # Settled at once (skipped, an inline command, bad input): account for it
                # here rather than recursing, so a long list never deepens the stack.
                self.account(step, self.steps[path])
        self.maybe_settle_fanout(step)

    def set_fanout(self, step: Any, **changes: Any) -> None:
        parent = self.steps[step.id]
        self.steps[step.id] = parent.model_copy(
            update={"fanout": parent.fanout.model_copy(update=changes)}
        )

    def maybe_settle_fanout(self, step: Any) -> None:
        parent = self.steps[step.id]
        fan = parent.fanout
        if parent.status.settled or fan.in_flight > 0:
            return
        if not fan.halted and fan.launched < len(fan.items):
            return
        outputs = [self.iteration_output(step.id, index) for index in range(fan.launched)]
        outputs += [None] * (len(fan.items) - fan.launched)
        if fan.failed:
            first = self.steps[keys.step_path(step.id, fan.failed[0])]
            error = StepError(
                kind=first.error.kind,
                message=f"iteration {fan.failed[0]} {first.status}: {first.error.message}",
            )
            status = (
                StepStatus.REJECTED if first.status == StepStatus.REJECTED else StepStatus.FAILED
            )
            self.settle(parent, status, output=outputs, error=error)
        elif fan.halted and parent.cancelled is not None:
            error = StepError(kind=FailureKind.CANCELLED, message=parent.cancelled)
            self.settle(parent, StepStatus.CANCELLED, output=outputs, error=error)
        elif fan.halted:
            error = StepError(
                kind=FailureKind.CANCELLED, message=self.fields["cancel_requested"] or "halted"
            )
            self.settle(parent, StepStatus.FAILED, output=outputs, error=error)
        else:
            self.settle(parent, StepStatus.SUCCEEDED, output=outputs)

    def iteration_output(self, step_id: str, index: int) -> Any:
        record = self.steps.get(keys.step_path(step_id, index))
        return (
            record.output if record is not None and record.status == StepStatus.SUCCEEDED else None
        )

    # --- settling ---------------------------------------------------------------------

    def failed_attempt(self, record: StepRecord, error: StepError) -> None:
        step = self.step_named(record.step)
        decision = decide(
            step.retry,
            error,
            record.attempt,
            self.item_context(record),
            (self.run_id, record.path, record.visit, record.attempt),
        )
        if not decision.retry:
            self.settle(record, StepStatus.FAILED, error=error)
            return
        due = self.now + decision.delay
        self.steps[record.path] = record = record.model_copy(
            update={"status": StepStatus.RETRYING, "error": error, "due_at": due}
        )
        self.journal(
            "step_retrying",
            record.path,
            "retrying",
            attempt=record.attempt,
            error=error.model_dump(mode="json"),
            due_at=due.isoformat(),
        )
        self.effects.append(self.timer_effect(record, "retry"))

    def settle(
        self,
        record: StepRecord,
        status: StepStatus,
        *,
        output: Any = None,
        error: StepError | None = None,
        detail: Any = None,
    ) -> None:
        record = self.steps.get(record.path, record)
        self.steps[record.path] = record.model_copy(
            update={"status": status, "output": output, "error": error, "settled_at": self.now}
        )
        data: dict[str, Any] = {
            "attempt": record.attempt,
            "visit": record.visit,
            "input": record.input,
            "output": output,
        }
        if error is not None:
            data["error"] = error.model_dump(mode="json")
        if (
            detail is None
            and isinstance(record.input, dict)
            and self.step_named(record.step).kind == "call_workflow"
        ):
            # The child this attempt started (a retried call starts a new one).
            detail = {
                "child_run": record.input.get("run_id"),
                "child_workflow": record.input.get("workflow"),
            }
        if detail is not None:
            data["detail"] = detail
        self.journal("step_settled", record.path, str(status), **data)

    def after_settle(self, record: StepRecord) -> None:
        """Apply what a settled step means: fanout progress, goto, the failure policy."""
        record = self.steps[record.path]
        if not record.status.settled:
            return
        step = self.step_named(record.step)
        if record.path != record.step:
            self.iteration_settled(step, record)
            return
        place = self.tree.places[step.id]
        if place.owner is not None:
            self.settled_inside(step, record, place)
            return
        if (
            record.status == StepStatus.CANCELLED
            and record.phase == "main"
            and self.fields["phase"] == "main"
        ):
            self.finish_main(RunStatus.CANCELLED, record.error)
            return
        if (
            record.status == StepStatus.SUCCEEDED
            and isinstance(record.output, dict)
            and record.output.get("goto")
        ):
            if step.kind in ("choose", "wait_for"):
                self.jump(record.output["goto"])
            return
        if (
            record.status == StepStatus.REJECTED
            and record.phase == "main"
            and self.fields["phase"] == "main"
        ):
            self.finish_main(RunStatus.REJECTED, record.error)
            return
        if (
            record.status == StepStatus.FAILED
            and record.phase == "main"
            and self.fields["phase"] == "main"
        ):
            if record.error is not None and record.error.kind == FailureKind.CANCELLED:
                self.finish_main(RunStatus.CANCELLED, record.error)
            elif not step.continue_on_error:
                self.finish_main(RunStatus.FAILED, record.error)

    def iteration_settled(self, step: Any, record: StepRecord) -> None:
        parent = self.steps[step.id]
        if parent.fanout is None or parent.status.settled:
            return
        self.account(step, record)
        self.launch(step)
        parent = self.steps[step.id]
        if parent.status.settled:
            self.after_settle(parent)

    def account(self, step: Any, record: StepRecord) -> None:
        """Fold one settled iteration into its parent's progress."""
        fan = self.steps[step.id].fanout
        index = int(record.path[len(step.id) + 1 : -1])
        changes: dict[str, Any] = {"in_flight": max(0, fan.in_flight - 1)}
        if record.status in (StepStatus.FAILED, StepStatus.REJECTED):
            changes["halted"] = True
            changes["failed"] = [*fan.failed, index]
        self.set_fanout(step, **changes)

    def jump(self, target: str) -> None:
        steps = self.step_list()
        ids = [s.id for s in steps]
        if target not in ids:
            # Validation rejects this; an unvalidated definition still must not loop.
            error = StepError(
                kind=FailureKind.INVALID_INPUT,
                message=f"goto {target!r}: no such step in this list",
            )
            if self.fields["phase"] == "main":
                self.finish_main(RunStatus.FAILED, error)
            else:
                self.fields["cursor"] += 1
            return
        to, at = ids.index(target), self.fields["cursor"]
        self.move(steps, to, at, target)
        self.fields["cursor"] = to

    def move(self, steps: list[Any], to: int, at: int, target: str) -> None:
        """A jump from ``steps[at]`` to ``steps[to]`` of one list: back, the steps in
        between (and every step inside them) get a new visit; forward, the steps jumped
        over are skipped."""
        if to <= at:
            # Revisit target..current: archive their records and count a new visit, so
            # their effects get fresh idempotency keys (a loop's second send is new).
            for step in steps[to : at + 1]:
                for step_id in (step.id, *self.tree.within(step.id)):
                    for path in [p for p, r in self.steps.items() if r.step == step_id]:
                        self.history.append(self.steps.pop(path))
                    self.visits[step_id] = self.visits.get(step_id, 1) + 1
            del self.history[:-MAX_HISTORY]
        else:
            for step in steps[at + 1 : to]:
                if step.id not in self.steps:
                    self.record(
                        step, step.id, self.visits.get(step.id, 1), StepStatus.SKIPPED, settled=True
                    )
                    self.journal("step_settled", step.id, "skipped", reason=f"goto {target}")


class _View:
    """The attributes :func:`run_context` reads, straight from a working copy."""

    def __init__(self, run: _Run) -> None:
        fields = run.fields
        self.trigger = fields["trigger"]
        self.steps = run.steps
        self.matrix = fields["matrix"]
        self.run_id = fields["run_id"]
        self.workflow = fields["workflow"]
        self.version = fields["version"]
        self.trigger_key = fields["trigger_key"]
        self.status = RunStatus(fields["status"])
        self.state = run.values
        error = fields["error"]
        self.error = StepError.model_validate(error) if isinstance(error, dict) else error


def _dump(action: Any) -> Any:
    """A step's action (part of a definition, immutable) as data: dumped once per
    definition, not at every start of the step. Rendering makes new containers, so the
    dump handed out is never changed."""
    if not hasattr(action, "model_dump"):
        return action
    found = _DUMPS.get(id(action))
    if found is not None and found[0] is action:
        return found[1]
    if len(_DUMPS) >= _DUMPS_KEPT:
        _DUMPS.clear()
    dumped = action.model_dump(mode="json", by_alias=True, exclude_none=True)
    _DUMPS[id(action)] = (action, dumped)
    return dumped


_DUMPS: dict[int, tuple[Any, Any]] = {}
"""id of an action -> (the action, its dump); the action kept, so its id is not reused."""
_DUMPS_KEPT = 4096
_COLLECTIONS = frozenset({"steps", "history", "visits", "state"})
"""The fields of a run :class:`_Run` keeps as working copies of their own."""
