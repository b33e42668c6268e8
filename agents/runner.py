"""The runner agent: admits trigger firings and advances runs, one event at a time.

It consumes the triggers and runs topics together (co-partitioned by the firing's
concurrency group), so everything about one group is decided in order on one worker.
Each event goes through the pure engine; the new state is written to the ``runs`` table
(its changelog is the journal) and the effects are handed to the :class:`EffectRunner`.

The result of an action this worker carried out, for a run whose partition it owns, is
decided here and now (:meth:`Runner.decide_here`) instead of going round the runs topic:
the engine takes it under the same lock as the agent's events, and the table writes go
to the run's partition as the agent's would. Should the worker die before the new state
reaches the changelog, its successor finds the step still in flight and runs it again
with the same idempotency key, as it does for a step interrupted by the crash.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rflow.agents.breakers import Breakers
from rflow.agents.dead_letters import send_dead_letter
from rflow.agents.effects import EffectRunner, partition_key, partition_of
from rflow.codecs import (
    CallRecord,
    DecodeError,
    PauseChanged,
    RetryRecord,
    RunEvent,
    TriggerRecord,
    TriggerRetracted,
    decode,
)
from rflow.deployment import Deployment
from rflow.engine import (
    CancelRequested,
    Journal,
    Retry,
    RunState,
    RunStatus,
    Settle,
    Start,
    TimerFired,
    admission,
    advance,
    children,
    lanes,
    memory,
    provenance,
    resume,
)
from rflow.engine.keys import firing_runs, run_key
from rflow.engine.lanes import Lane
from rflow.failures import RflowError
from rflow.lang.model import Workflow
from rflow.lang.model.resources import Config
from rflow.lang.reads import reads_state
from rflow.lang.units import format_duration
from rflow.ratelimit import SlidingWindow
from rflow.storage import controls, rate_limits, timers, versions, workflow_state
from rflow.triggering import group_of

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)


class Runner:
    """The runner's decisions, with the tables and effects of one worker."""

    def __init__(self, app: RflowApp) -> None:
        self.app = app
        self.runtime = app.rflow
        self.triggers = app.rflow.tables.triggers
        self.runs = app.rflow.tables.runs
        self.markers = app.rflow.tables.settled
        """The settled runs remembered for the window (the ``settled`` table)."""
        self.lanes = app.rflow.tables.lanes
        self.effects = EffectRunner(app)
        self.breakers = Breakers(app, self.effects)
        self.workflows: dict[str, Workflow] = {}
        """The deployed definition of each workflow: the one new runs start with."""
        self.config = Config()
        self.versions: dict[str, str] = {}
        """The version new runs of each workflow start with (a removed workflow keeps its
        last one, for the firings it accepted before it was removed)."""
        self.definitions: dict[str, Workflow] = {}
        """Every version seen, by version: a run runs the version it started with."""
        self.removed: dict[str, str] = {}
        """Workflows a deployment removed: name -> which one (for the refusals' reason)."""
        self.resumed: set[str] = set()
        """Workflows whose pause was seen lifted: their held firings are to be released."""
        self.deployment = app.rflow.deployment
        self.take(self.deployment)
        app.rflow.on_deployment.append(self.take)
        self.uses_state: dict[str, bool] = {}
        self.consumption = app.rflow.consumption
        self.triggers_topic = app.rflow.catalog.full_name("rflow.triggers")
        self.partitions: frozenset[int] = frozenset()
        """The partitions opened here by the last rebalance."""
        self.windows: dict[str, SlidingWindow] = {}
        """In-process rate-limit windows, by workflow."""
        self.paused: dict[str, str] = {}
        """Workflows paused by an operator, a halt or a breaker: name -> why (refreshed
        from Postgres by a timer, so every worker sees a pause within a second or so)."""
        self.paused_read = False
        """Whether ``paused`` was read yet: until it is, every pause is asked of Postgres."""
        self.keyring = app.rflow.settings.ingress_keyring
        """The keys the proofs of rflow's ingresses are checked with."""

    # --- admission --------------------------------------------------------------------

    async def admit(self, record: TriggerRecord | RetryRecord, message: Any) -> None:
        """Admit a firing (or a retry) once per gate key (:func:`admission.fired`)."""
        workflow = self.workflows.get(record.workflow)
        if workflow is None:
            # Another worker may have taken up a deployment that declares it first.
            await self.runtime.catch_up()
            workflow = self.workflows.get(record.workflow)
        if not await self.believed(record, workflow, message):
            return
        if workflow is None:
            await send_dead_letter(self.app, message, self.unknown(record.workflow))
            return
        count = self.runtime.catalog.spec("rflow.triggers").partitions
        disagreement = (
            retry_disagreement(record, message.key)
            if isinstance(record, RetryRecord)
            else key_disagreement(workflow, record, message.key)
        ) or partition_disagreement(message.key, message.partition, count)
        if disagreement is not None:
            await send_dead_letter(self.app, message, disagreement)
            return
        admitted = self.triggers.get(gate_of(record))
        paused = None
        if admitted is None:
            paused = await self.paused_why(record.workflow, workflow)
            if not paused:
                # What was held before a resume starts before what arrives after it.
                await self.release_owned(record.workflow, message.partition)
        elif "retracted" not in admitted and not memory.is_remembered(admitted):
            record = accepted_record(admitted)  # a repeat of its key may carry another payload
        decisions = admission.fired(
            self.firing_of(workflow, record),
            self.policy(workflow),
            self.book(),
            paused=paused,
            partition=message.partition,
            now=datetime.now(UTC),
        )
        await self.carry_out(decisions, message.partition)

    def runs_of(
        self, workflow: Workflow, record: TriggerRecord | RetryRecord
    ) -> list[tuple[dict[str, Any], str]]:
        """Each run of a firing with its matrix combination; a retry is one run."""
        if isinstance(record, RetryRecord):
            return [(record.previous.get("matrix") or {}, record.run_id)]
        return firing_runs(
            record.workflow,
            record.trigger_key,
            workflow.strategy.matrix if workflow.strategy else None,
        )

    def firing_of(
        self, workflow: Workflow, record: TriggerRecord | RetryRecord
    ) -> admission.Firing:
        """A firing (or a retry) as admission sees it."""
        accepted = record.model_dump(mode="json")
        return admission.Firing(
            gate=gate_of(record),
            workflow=record.workflow,
            group=record.group,
            runs=tuple(admission.Run(rid, combo) for combo, rid in self.runs_of(workflow, record)),
            record=accepted,
            retry=isinstance(record, RetryRecord),
            digest=memory.digest(accepted),
        )

    @staticmethod
    def policy(workflow: Workflow) -> admission.Policy:
        """What ``workflow``'s definition says about admitting its runs."""
        strategy = workflow.strategy
        return admission.Policy(
            on_conflict=workflow.concurrency.on_conflict if workflow.concurrency else None,
            max_parallel=strategy.max_parallel if strategy else None,
            matrix=strategy is not None,
            fail_fast=bool(strategy and strategy.fail_fast),
            paused_firings=workflow.paused_firings,
        )

    def book(self) -> admission.Book:
        """The tables as admission reads them."""
        return admission.Book(
            gate=self.triggers.get,
            lane=self.lane,
            held=lambda name, partition: list(
                (self.lanes.get_in(partition, held_key(name, partition)) or {}).get("held", ())
            ),
            started=self.begun,
        )

    def begun(self, rid: str) -> bool:
        """Whether run ``rid`` has a state: running, or settled within the window."""
        return self.runs.get(rid) is not None or self.markers.get(rid) is not None

    def live(self, rid: str) -> bool:
        """Whether run ``rid`` has a state that has not settled."""
        return isinstance(self.runs.get(rid), RunState)

    def remember(self, gate: str) -> None:
        """Once every run of firing ``gate`` has begun, its gate entry keeps only what
        de-duplication needs (:func:`memory.remembered`)."""
        entry = self.triggers.get(gate)
        if entry is None:
            return
        compact = memory.remembered(entry, self.begun)
        if compact is not None:
            self.triggers[gate] = compact

    async def carry_out(self, decisions: list[admission.Decision], partition: int) -> None:
        """Carry out admission's decisions, in order. A start that fails (its record goes
        to the dead-letter path) leaves the lanes as they were, never owned by a run that
        will not settle."""
        before: dict[str, Any] = {}
        try:
            for decision in decisions:
                await self._carry_out(decision, partition, before)
        except BaseException:
            for key, value in before.items():
                if value is None:
                    if self.lanes.get(key) is not None:
                        del self.lanes[key]
                else:
                    self.lanes[key] = value
            raise
        gates = {
            decision.gate
            for decision in decisions
            if isinstance(decision, admission.SetGate | admission.Start | admission.NeverStarted)
        }
        for gate in sorted(gates):
            self.remember(gate)

    async def _carry_out(
        self, decision: admission.Decision, partition: int, before: dict[str, Any]
    ) -> None:
        match decision:
            case admission.SetGate(gate=gate, entry=entry):
                self.triggers[gate] = entry
            case admission.SetLane(workflow=name, group=group, lane=lane):
                key = lane_key(name, group)
                before.setdefault(key, self.lanes.get(key))
                if lane is not None:
                    self.lanes[key] = lane
                elif self.lanes.get(key) is not None:
                    del self.lanes[key]
            case admission.SetHeld(workflow=name, partition=held_on, gates=gates):
                key = held_key(name, held_on)
                if gates:
                    self.lanes[key] = {"held": list(gates)}
                elif self.lanes.get(key) is not None:
                    del self.lanes[key]
            case admission.Admitted(gate=gate):
                entry = self.triggers.get(gate) or {}
                if entry.get("kind") == "trigger":
                    self.runtime.metrics.triggers.labels(entry["workflow"], entry["source"]).inc()
            case admission.Begin():
                await self.begin(decision, partition)
            case admission.Start(run_id=rid, gate=gate):
                await self.start_run(rid, gate, partition)
            case admission.Defer():
                await self.defer(decision, partition)
            case admission.Pending(run_id=rid, gate=gate, reason=reason, waiting_for=waiting):
                workflow, record, combo = self.firing(gate, rid)
                start = self.start_of(workflow, record, combo, rid)
                self.effects.publish([lanes.pending(start, reason, waiting, datetime.now(UTC))])
            case admission.NeverStarted(run_id=rid, gate=gate, status=status, reason=reason):
                await self.never_started(rid, gate, status, reason)
            case admission.Cancel(run_id=rid, reason=reason):
                await self.apply(CancelRequested(run_id=rid, reason=reason), partition)
            case admission.Ignored(why=why):
                log.info("%s", why)

    async def paused_why(self, name: str, workflow: Workflow) -> str | None:
        """Why ``name`` starts no runs now (paused in its definition, by an operator, a
        halt or a breaker), or ``None``."""
        return "in its definition" if workflow.paused else await self.pause_of(name)

    async def release_held(self, name: str, partition: int) -> None:
        """Begin the firings of ``name`` held on ``partition`` while it was paused, in the
        order they arrived (before any firing that arrives after the resume)."""
        held = self.lanes.get_in(partition, held_key(name, partition))
        if not held:
            return
        workflow = self.workflows.get(name)
        firings: list[tuple[admission.Firing | None, admission.Policy]] = []
        for gate in held["held"]:
            entry = self.triggers.get(gate)
            if workflow is None or entry is None or "held" not in entry:
                if workflow is None:
                    log.warning(
                        "held firing %s: workflow %s is gone; it starts nothing", gate, name
                    )
                firings.append((None, admission.Policy()))
                continue
            log.info("workflow %s resumed: starting held firing %s", name, gate)
            firings.append(
                (self.firing_of(workflow, accepted_record(entry)), self.policy(workflow))
            )
        decisions = admission.released(firings, self.book(), workflow=name, partition=partition)
        await self.carry_out(decisions, partition)

    def paused_now(self) -> set[str]:
        """The workflows that start no runs now, as this worker last read it."""
        return set(self.paused) | {name for name, wf in self.workflows.items() if wf.paused}

    async def refresh(self) -> None:
        """Read the pauses (every second or so); begin what was held for every workflow
        that is no longer paused (by Postgres, or by a deployment that unpaused its
        definition), on each partition this worker owns."""
        await self.refresh_pauses()
        resumed, self.resumed = self.resumed, set()
        paused = self.paused_now()
        for name in sorted(resumed - paused):
            await self.release_everywhere(name)

    async def release_owned(self, name: str, partition: int) -> None:
        """Inside the agent, before a firing of ``name`` that arrives after its resume:
        begin what was held on every partition this worker owns (its own first), so what
        was held starts before what arrives later."""
        await self.release_held(name, partition)
        for other in sorted(self.consumption.owned() - {partition}):
            if self.lanes.get_in(other, held_key(name, other)) is not None:
                await self.consumption.decide(other, lambda o=other: self.release_held(name, o))

    async def release_everywhere(self, name: str, partitions: frozenset[int] | None = None) -> None:
        owned = self.consumption.owned()
        for partition in sorted(partitions if partitions is not None else owned):
            if self.lanes.get_in(partition, held_key(name, partition)) is None:
                continue
            await self.consumption.decide(partition, lambda p=partition: self.release_held(name, p))

    # --- versions ---------------------------------------------------------------------

    async def definition(self, run: Start | RunState) -> Workflow | None:
        """The definition ``run`` is pinned to: the version it started with."""
        found = self.definitions.get(run.version)
        if found is None:
            stored = await self.runtime.database.run(
                lambda conn: versions.definition(conn, run.version), what="workflow version"
            )
            if stored is not None:
                found = self.definitions[run.version] = Workflow.model_validate(stored[1])
        if found is None:
            found = self.workflows.get(run.workflow)
            if found is not None:
                log.warning(
                    "run %s: version %s of %s is unknown; the deployed one runs it",
                    run.run_id,
                    run.version,
                    run.workflow,
                )
        return found

    def take(self, deployment: Deployment) -> None:
        """Take up ``deployment`` (the runtime's new current one, swapped in the same
        step): new runs start with its versions; runs in flight keep theirs."""
        project = deployment.project
        workflows = dict(project.workflows) if project else {}
        defined = {name for name, wf in self.workflows.items() if wf.paused}
        self.resumed |= defined - {name for name, wf in workflows.items() if wf.paused}
        for name in self.workflows.keys() - workflows.keys():
            self.removed[name] = deployment.label
            log.info("workflow %s removed by %s: its firings are refused", name, deployment.label)
        for name, workflow in workflows.items():
            self.removed.pop(name, None)
            version = deployment.versions[name]
            self.definitions.setdefault(version, workflow)
            if self.versions.get(name) not in (None, version):
                log.info("workflow %s: new runs start with version %s", name, version)
        self.workflows, self.config = workflows, project.config if project else Config()
        self.versions = {**self.versions, **deployment.versions}
        self.deployment = deployment

    def unknown(self, name: str) -> str:
        """Why a firing of workflow ``name``, which this worker does not run, is refused."""
        removed = self.removed.get(name)
        if removed is not None:
            return f"workflow {name!r} was removed by {removed}"
        return f"unknown workflow {name!r} (not in {self.deployment.label}, which this worker runs)"

    async def pause_of(self, name: str) -> str | None:
        """Why ``name`` is paused, or ``None``. The copy of the pauses answers for a
        workflow it shows running: an operator's pause reaches this partition as a
        :class:`~rflow.codecs.PauseChanged` record before any firing produced after the
        pause was answered, and refreshes the copy there (:meth:`pause_changed`). A pause
        it shows is confirmed in Postgres first, so a firing that arrives just after a
        resume is not turned away."""
        if self.paused_read and name not in self.paused:
            return None
        await self.refresh_pauses()
        return self.paused.get(name)

    async def pause_changed(self, record: PauseChanged, partition: int) -> None:
        """An operator paused or resumed ``record.workflow``: read the pauses again, and
        on a resume begin what was held on this partition before the firings after it."""
        await self.refresh_pauses()
        if record.workflow not in self.paused_now():
            await self.release_held(record.workflow, partition)

    async def refresh_pauses(self) -> set[str]:
        """Read which workflows are paused (operator, on_failure: halt, breaker); returns
        the ones that were paused before (their held firings may be released)."""
        previously = set(self.paused)
        found = await self.runtime.database.run(controls.paused, what="workflow pauses")
        self.paused = {
            workflow: f"by {by}: {reason}" if reason else f"by {by}"
            for workflow, (by, reason) in found.items()
        }
        self.paused_read = True
        self.resumed |= previously - self.paused.keys()
        return previously

    # --- concurrency lanes --------------------------------------------------------------

    def lane(self, workflow: str, group: str | None) -> Lane | None:
        return self.lanes.get(lane_key(workflow, group)) if group is not None else None

    async def begin(self, begin: admission.Begin, partition: int, attempt: int = 0) -> None:
        """A run about to start: ask its circuit breaker and rate limit, then start it or
        defer it (:func:`admission.start_or_defer`)."""
        workflow, record, _ = self.firing(begin.gate, begin.run_id)
        probe_admits = workflow.circuit_breaker is None or await self.breakers.admits(
            record.workflow, begin.run_id
        )
        room_at = None
        limit = workflow.rate_limit
        if probe_admits and limit is not None:
            room_at = await self.claim_start(record.workflow, workflow)
        decisions = admission.start_or_defer(
            begin,
            self.book(),
            probe_admits=probe_admits,
            room_at=room_at,
            rate_limit=f"{limit.max} starts per {format_duration(limit.per)}" if limit else None,
            attempt=attempt,
            now=datetime.now(UTC),
        )
        await self.carry_out(decisions, partition)

    def firing(
        self, gate: str, rid: str
    ) -> tuple[Workflow, TriggerRecord | RetryRecord, dict[str, Any]]:
        """The workflow, record and matrix combination of run ``rid`` of firing ``gate``."""
        entry = self.triggers[gate]
        record = accepted_record(entry)
        # A firing accepted before a deploy removed its workflow still runs, on its last version.
        workflow = (
            self.workflows.get(record.workflow) or self.definitions[self.versions[record.workflow]]
        )
        combo = next(combo for combo, run in self.runs_of(workflow, record) if run == rid)
        return workflow, record, combo

    async def never_started(self, rid: str, gate: str, status: RunStatus, reason: str) -> None:
        """Record a run its lane never started (skipped, or superseded while waiting)."""
        workflow, record, combo = self.firing(gate, rid)
        self.markers[rid] = memory.settled_marker(status, record.workflow, datetime.now(UTC))
        start = self.start_of(workflow, record, combo, rid)
        entries = lanes.never_started(start, status, reason, datetime.now(UTC))
        self.effects.publish(entries)
        answer = children.never_started(start, status, reason) if isinstance(start, Start) else None
        if answer is not None:  # a child run: its parent is told it never started
            self.effects.publish([answer])
        self.runtime.metrics.journaled(workflow, record.workflow, None, entries)
        log.info("run %s of %s not started: %s", rid, record.workflow, reason)

    def start_of(
        self,
        workflow: Workflow,
        record: TriggerRecord | RetryRecord,
        combo: dict[str, Any],
        rid: str,
    ) -> Start | Retry:
        """The event that starts run ``rid``: a :class:`Start`, or a :class:`Retry`."""
        if isinstance(record, RetryRecord):
            return Retry(
                run_id=rid,
                previous=RunState.model_validate(record.previous),
                from_step=record.from_step,
                state=record.state,
            )
        return Start(
            run_id=rid,
            workflow=record.workflow,
            version=self.versions[record.workflow],
            trigger_key=record.trigger_key,
            matrix=combo or None,
            group=record.group,
            source=record.source,
            trigger=record.payload,
            parent=record.parent if isinstance(record, CallRecord) else None,
        )

    async def start_run(self, rid: str, gate: str, partition: int) -> None:
        """Start run ``rid`` of firing ``gate`` (it has cleared its lane, breaker and rate
        limit)."""
        workflow, record, combo = self.firing(gate, rid)
        start = self.start_of(workflow, record, combo, rid)
        if isinstance(start, Retry):
            await self.apply(start, partition)  # its durable state came with the request
            return
        version = self.versions[record.workflow]
        if version not in self.uses_state:
            # The definition of the version pinned, should a deploy land while this awaited.
            self.uses_state[version] = _reads_state(self.definitions.get(version, workflow))
        if self.uses_state[version]:
            # Reading durable state is I/O: fetch it off the partition, then start.
            self.effects.spawn(self._start_with_state(start, record.partition_key), f"start {rid}")
        else:
            await self.apply(start, partition)

    # --- rate limits --------------------------------------------------------------------

    async def claim_start(self, name: str, workflow: Workflow) -> datetime | None:
        """Take a run start from ``workflow``'s rate limit: ``None`` if granted, else when
        to try again."""
        limit = workflow.rate_limit
        now = datetime.now(UTC)
        if limit.durable:
            return await self.runtime.database.run(
                lambda conn: rate_limits.claim(conn, name, max=limit.max, per=limit.per, now=now),
                what="rate limit",
            )
        window = self.windows.get(name)
        if window is None:
            window = self.windows[name] = SlidingWindow(limit.max, limit.per)
        return window.claim(now)

    async def defer(self, defer: admission.Defer, partition: int) -> None:
        """Start a run later: a durable timer row, fired by the partition's owner."""
        _, record, _ = self.firing(defer.gate, defer.run_id)
        await self.runtime.database.run(
            lambda conn: timers.schedule(
                conn,
                run_id=defer.run_id,
                partition_key=record.partition_key,
                kafka_partition=partition,
                path=defer.gate,
                visit=1,
                attempt=defer.attempt,
                purpose="start",
                due_at=defer.until,
            ),
            what="deferred start",
        )
        self.runtime.metrics.deferrals.labels(record.workflow, defer.reason).inc()
        log.info(
            "run %s of %s deferred (%s) until %s",
            defer.run_id,
            record.workflow,
            defer.reason,
            defer.until,
        )

    async def deferred_start(self, event: TimerFired, partition: int) -> None:
        """A deferred start came due: ask the breaker and the rate limit again."""
        if self.begun(event.run_id):
            return  # started already (a redelivered firing started it)
        try:
            self.firing(event.path, event.run_id)
        except (KeyError, StopIteration):
            log.warning("deferred start of run %s: its firing is unknown", event.run_id)
            return
        await self.begin(admission.Begin(event.run_id, event.path), partition, event.attempt)

    async def _start_with_state(self, start: Start, key: str) -> None:
        state = await self.runtime.database.run(
            lambda conn: workflow_state.load(conn, start.workflow), what="workflow state"
        )
        await self.effects.send_event(key, start.model_copy(update={"state": state}))

    async def believed(
        self,
        record: TriggerRecord | RetryRecord | TriggerRetracted,
        workflow: Workflow | None,
        message: Any,
    ) -> bool:
        """Whether this worker believes ``record`` (:func:`provenance.judge`): what it
        refuses is counted and dead-lettered with the reason, before it touches a gate."""
        accepts = provenance.Accepts.of(record.workflow, workflow) if workflow else None
        verdict = provenance.judge(record, self.keyring, accepts)
        if isinstance(verdict, provenance.Refused):
            source = record.source if isinstance(record, TriggerRecord) else record.kind
            self.runtime.metrics.refused_firings.labels(verdict.code, source).inc()
            await send_dead_letter(self.app, message, verdict.reason)
            return False
        return True

    async def retract(self, record: TriggerRetracted, message: Any) -> None:
        if not await self.believed(record, self.workflows.get(record.workflow), message):
            return
        gate = run_key(record.workflow, record.trigger_key)
        decisions = admission.retracted(gate, record.reason, self.book(), now=datetime.now(UTC))
        await self.carry_out(decisions, message.partition)

    async def handle(self, record: Any, message: Any) -> None:
        """Admit, retract or advance, by the record's kind."""
        if isinstance(record, TriggerRecord | RetryRecord):
            await self.admit(record, message)
        elif isinstance(record, TriggerRetracted):
            await self.retract(record, message)
        elif isinstance(record, PauseChanged) and message.topic == self.triggers_topic:
            await self.pause_changed(record, message.partition)
        elif isinstance(record, RunEvent) and message.topic != self.triggers_topic:
            await self.apply(record.event, message.partition)
        elif message.topic == self.triggers_topic and (
            refused := provenance.misplaced(record.kind)
        ):
            self.runtime.metrics.refused_firings.labels(refused.code, record.kind).inc()
            await send_dead_letter(self.app, message, refused.reason)
        else:
            await send_dead_letter(
                self.app, message, f"a {record.kind!r} record does not belong on {message.topic}"
            )

    # --- advancing ----------------------------------------------------------------------

    async def apply(self, event: Any, partition: int) -> None:
        """Decide ``event`` of a run on ``partition``, whether a record brought it or it
        is the result of this worker's own action (:meth:`decide_here`)."""
        if isinstance(event, TimerFired) and event.purpose == "start":
            await self.deferred_start(event, partition)
            return
        state = self.runs.get(event.run_id)
        if isinstance(state, str) or (state is None and self.markers.get(event.run_id)):
            return  # over: a late or redelivered event (a Start included) changes nothing
        if state is None and (why := self.unknown_run(event)) is not None:
            self.runtime.metrics.events_dropped.labels(why[0]).inc()
            log.warning("%s of run %s dropped: %s", type(event).__name__, event.run_id, why[1])
            return
        pinned = (
            event
            if isinstance(event, Start)
            else event.previous
            if isinstance(event, Retry)
            else state
        )
        workflow = await self.definition(pinned) if pinned is not None else None
        name = pinned.workflow if pinned is not None else None
        if workflow is None:
            log.warning("event for run %s of unknown workflow %r ignored", event.run_id, name)
            return
        new_state, effects = advance(workflow, state, event, datetime.now(UTC), self.config)
        if new_state is None or new_state is state:
            return
        self.runtime.metrics.journaled(
            workflow, new_state.workflow, new_state, [e for e in effects if isinstance(e, Journal)]
        )
        if not new_state.settled:
            self.runs[event.run_id] = new_state
            if state is None:
                self.remember(start_gate(event))
            await self.effects.carry_out(new_state, effects, partition)
            return
        # A settled run leaves a marker (its status) for the window, so a redelivered
        # event of it is still recognised, at a few bytes instead of its state. The
        # checkpoint writes the marker only once the broker has the run's journal: a
        # marker that hid a run whose settlement never reached the read model is never
        # durable.
        del self.runs[event.run_id]
        self.markers[event.run_id] = memory.settled_marker(
            new_state.status, new_state.workflow, datetime.now(UTC)
        )
        if state is None:
            self.remember(start_gate(event))
        await self.effects.carry_out(new_state, effects, partition)
        for effect in effects:
            if isinstance(effect, Settle):
                if new_state.workflow in self.breakers.guarded:  # the current deployment's
                    self.effects.spawn(
                        self.breakers.settled(new_state.workflow, new_state.run_id, effect.status),
                        f"circuit breaker of {new_state.workflow}",
                    )
                await self.settled(new_state, effect, workflow, partition)

    def unknown_run(self, event: Any) -> tuple[str, str] | None:
        """Why an event of a run with no state is dropped (a reason for the metric and one
        for the log), or ``None``: it starts the run. A run neither live nor settled
        within the window is unknown; only the start its firing's admission decided may
        begin it, so a start whose firing is no longer remembered begins nothing."""
        if not isinstance(event, Start | Retry):
            return (
                "unknown_run",
                "the run is neither live here nor settled within the de-duplication window "
                "(it settled longer ago than that, or never started); nothing is restarted",
            )
        entry = self.triggers.get(start_gate(event))
        if entry is None or event.run_id not in entry.get("runs", ()):
            return (
                "forgotten_start",
                "no firing remembered here admitted it (its firing is older than the "
                "de-duplication window); nothing is started",
            )
        return None

    async def settled(
        self, state: RunState, settle: Settle, workflow: Workflow, partition: int
    ) -> None:
        """A run settled: its lane and matrix go on (:func:`admission.settled`)."""
        firing = None
        if state.matrix is not None:
            entry = self.triggers.get(run_key(state.workflow, state.trigger_key))
            if entry is not None and "matrix" in entry:
                firing = self.firing_of(workflow, accepted_record(entry))
        decisions = admission.settled(
            state.run_id,
            settle.status,
            firing,
            self.policy(workflow),
            self.book(),
            workflow=state.workflow,
            group=state.group,
            retried=state.retry_of is not None,
        )
        await self.carry_out(decisions, partition)

    async def decide_here(self, event: Any, partition: int) -> bool:
        """Decide ``event`` of a run on ``partition`` now, if this worker owns it; False
        when it does not (the caller produces the event to the runs topic instead)."""
        try:
            return await self.consumption.decide(partition, lambda: self.apply(event, partition))
        except Exception:
            log.exception("deciding %s of run %s failed", type(event).__name__, event.run_id)
            return False  # the runs topic takes it to the agent, which dead-letters it

    async def resume_partitions(self, opened: frozenset[int]) -> None:
        """After a rebalance: re-issue what every unsettled run of new partitions awaits."""
        fresh = opened - self.partitions
        self.partitions = opened
        if not fresh:
            return
        await self.refresh_pauses()  # what was held stays held while still paused
        paused = self.paused_now()
        for name in self.workflows:
            if name not in paused:
                await self.release_everywhere(name, fresh)
        count = self.runtime.catalog.spec("rflow.runs").partitions
        resumed = 0
        for state in list(self.runs.values(fresh)):
            if not isinstance(state, RunState) or state.settled:
                continue
            key = partition_key(state)
            partition = partition_of(key.encode(), count)
            if partition not in fresh:
                continue
            workflow = await self.definition(state)
            if workflow is None:
                continue
            await self.effects.carry_out(state, resume(workflow, state, self.config), partition)
            resumed += 1
        if resumed:
            log.info("resumed %d unsettled runs on partitions %s", resumed, sorted(fresh))


def accepted_record(entry: dict[str, Any]) -> TriggerRecord | RetryRecord:
    """The firing (or retry) as first admitted, from its gate entry in the ``triggers``
    table."""
    kind = entry.get("kind")
    model = RetryRecord if kind == "retry" else CallRecord if kind == "call" else TriggerRecord
    return model.model_validate({k: v for k, v in entry.items() if k in model.model_fields})


def start_gate(event: Start | Retry) -> str:
    """The gate key of the firing (or retry) that started a run."""
    if isinstance(event, Retry):
        return f"{event.previous.workflow}:retry-of:{event.previous.run_id}"
    return run_key(event.workflow, event.trigger_key)


def gate_of(record: TriggerRecord | RetryRecord) -> str:
    """The key of a firing's gate entry in the ``triggers`` table."""
    if isinstance(record, RetryRecord):
        return record.gate_key
    return run_key(record.workflow, record.trigger_key)


def held_key(workflow: str, partition: int) -> str:
    """The ``lanes`` table key of the firings of ``workflow`` held on ``partition`` while it
    is paused, in arrival order (``~`` starts no workflow name, so no lane has it)."""
    return f"~held:{workflow}:{partition}"


def retry_disagreement(record: RetryRecord, key: bytes | None) -> str | None:
    """Why a retry is not keyed like the run it continues, else ``None``."""
    if key is None or key != record.partition_key.encode():
        shown = "none" if key is None else repr(key.decode("utf-8", "replace"))
        return (
            f"key {shown} disagrees with the key {record.partition_key!r} of run {record.retry_of}"
        )
    return None


def lane_key(workflow: str, group: str) -> str:
    """The key of a concurrency lane in the ``lanes`` table."""
    return f"{workflow}:{group}"


def key_disagreement(workflow: Workflow, record: TriggerRecord, key: bytes | None) -> str | None:
    """Why a firing is not keyed as its workflow's concurrency group demands, else ``None``.

    Per-group order and the exactly-once gate both rest on every firing of a group
    arriving on that group's partition; a producer outside rflow that computed another
    key (or none) would have its run decided beside, not after, the group's others.
    """
    try:
        group = group_of(workflow, record.payload)
    except RflowError as exc:
        return f"cannot compute the concurrency group of workflow {record.workflow}: {exc.message}"
    name = record.workflow
    if group is None:
        expected, owner = record.trigger_key, f"the trigger key {record.trigger_key!r}"
    else:
        expected, owner = group, f"the concurrency group {group!r}"
    if key is None or key != expected.encode():
        shown = "none" if key is None else repr(key.decode("utf-8", "replace"))
        return f"key {shown} disagrees with {owner} of workflow {name}"
    if record.group != group:
        if group is None:
            return f"group {record.group!r} given, but workflow {name} has no concurrency group"
        return f"group {record.group!r} disagrees with {owner} of workflow {name}"
    return None


def partition_disagreement(key: bytes, partition: int, count: int) -> str | None:
    """Why ``key`` should not be on ``partition`` of ``count``, else ``None``.

    The runs topic is partitioned by rflow's own producers (murmur2, as Kafka's Java
    client does), and a run's events must land where its firing did; librdkafka clients
    such as kcat hash keys differently unless told to use murmur2.
    """
    expected = partition_of(key, count)
    if expected == partition:
        return None
    return (
        f"key {key.decode('utf-8', 'replace')!r} belongs on partition {expected} of {count} "
        f"(murmur2, as Kafka's Java client hashes keys), not on partition {partition}; "
        "produce with a murmur2 partitioner (librdkafka, kcat: -X topic.partitioner=murmur2_random)"
    )


def _reads_state(workflow: Workflow) -> bool:
    # Asked of the parsed expressions: state['count'] is a read, a URL holding "state."
    # is not.
    return reads_state(workflow)


def attach(app: RflowApp) -> Runner:
    """Declare the runner agent on ``app``."""
    runtime = app.rflow
    runner = Runner(app)
    consumption = runtime.consumption
    channel = app.topic(
        runtime.catalog.full_name("rflow.triggers"),
        runtime.catalog.full_name("rflow.runs"),
        acks=False,  # offsets are committed by the consumption layer
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )

    @app.agent(channel, name="rflow.runner", concurrency=1)
    async def run_events(stream):
        """Admit trigger firings (once per trigger key) and advance runs step by step."""
        async for event in stream.events():
            message = event.message
            if not consumption.take(message):
                continue
            # Not ahead of the actions already started (outside the partition's lock,
            # which their results need).
            await runner.effects.backlog.room()
            await consumption.process(message, lambda m=message, v=event.value: decide(m, v))

    async def decide(message: Any, value: bytes) -> None:
        try:
            record = decode(value)
        except DecodeError as exc:
            await send_dead_letter(app, message, exc.reason)
            return
        try:
            await runner.handle(record, message)
        except Exception as exc:
            # A crashed agent is restarted past the event it was handling: the record
            # would be lost. It goes to the dead-letter path with the reason instead.
            log.exception(
                "runner failed on %s[%s]@%s", message.topic, message.partition, message.offset
            )
            await send_dead_letter(app, message, f"the runner failed: {type(exc).__name__}: {exc}")

    consumption.on_open.append(runner.resume_partitions)
    # A checkpoint sends the runs' journals and the tables' changes: in transactions at
    # once, without them the journals first (see streams/consumption.py).
    consumption.flushers += [runner.effects.flush_journal, runtime.tables.flush]
    return runner
