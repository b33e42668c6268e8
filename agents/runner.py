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
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rflow.agents.breakers import Breakers
from rflow.agents.dead_letters import send_dead_letter
from rflow.agents.effects import EffectRunner, partition_key, partition_of
from rflow.codecs import (
    DecodeError,
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
    advance,
    lanes,
    resume,
)
from rflow.engine.keys import firing_runs, matrix_combinations, run_key
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
PROBE_WAIT = timedelta(seconds=1)
"""How often a run waiting behind a half-open circuit's probe asks again."""


class Runner:
    """The runner's decisions, with the tables and effects of one worker."""

    def __init__(self, app: RflowApp) -> None:
        self.app = app
        self.runtime = app.rflow
        self.triggers = app.rflow.tables.triggers
        self.runs = app.rflow.tables.runs
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
        self.partitions: frozenset[int] = frozenset()
        """The partitions opened here by the last rebalance."""
        self.windows: dict[str, SlidingWindow] = {}
        """In-process rate-limit windows, by workflow."""
        self.paused: dict[str, str] = {}
        """Workflows paused by an operator, a halt or a breaker: name -> why (refreshed
        from Postgres by a timer, so every worker sees a pause within a second or so)."""
        self.paused_read = False
        """Whether ``paused`` was read yet: until it is, every pause is asked of Postgres."""
        self.paused_at: datetime | None = None
        """When the last read of ``paused`` began: a firing received later is checked
        against Postgres, so a pause binds every firing accepted after it was answered."""

    # --- admission --------------------------------------------------------------------

    async def admit(self, record: TriggerRecord | RetryRecord, message: Any) -> None:
        """Admit a firing (or a retry) once per gate key: hold it while its workflow is
        paused, else let its runs' lanes, rate limit and breaker decide when they start."""
        workflow = self.workflows.get(record.workflow)
        if workflow is None:
            # Another worker may have taken up a deployment that declares it first.
            await self.runtime.catch_up()
            workflow = self.workflows.get(record.workflow)
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
        gate = gate_of(record)
        admitted = self.triggers.get(gate)
        if admitted is not None:
            if isinstance(record, TriggerRecord):
                await self.readmit(workflow, record, admitted, message.partition)
            return
        entry = self.firing_entry(workflow, record)
        received = record.received_at if isinstance(record, TriggerRecord) else None
        paused = await self.paused_why(record.workflow, workflow, received)
        if paused and workflow.paused_firings == "skip":
            self.triggers[gate] = {**entry, "skipped": f"workflow paused: {paused}"}
            for rid in entry["runs"]:
                await self.never_started(rid, gate, RunStatus.SKIPPED, f"workflow paused: {paused}")
            return
        if paused:
            self.triggers[gate] = {**entry, "held": paused}
            key = held_key(record.workflow, message.partition)
            self.lanes[key] = {"held": [*(self.lanes.get(key) or {}).get("held", []), gate]}
            now = datetime.now(UTC)
            waiting = f"the workflow to be resumed (paused {paused})"
            for combo, rid in self.runs_of(workflow, record):
                start = self.start_of(workflow, record, combo, rid)
                self.effects.publish([lanes.pending(start, "paused", waiting, now)])
            log.info("workflow %s is paused (%s): firing %s held", record.workflow, paused, gate)
            return
        await self.release_owned(record.workflow, message.partition)
        self.triggers[gate] = entry
        await self.begin_firing(workflow, record, entry, message.partition)

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

    def firing_entry(
        self, workflow: Workflow, record: TriggerRecord | RetryRecord
    ) -> dict[str, Any]:
        """The gate entry of a firing: the record as accepted and its runs (with the matrix
        bookkeeping: every combination's run is keyed like the firing, so they all settle
        on this partition, in order)."""
        runs = self.runs_of(workflow, record)
        run_ids = [rid for _, rid in runs]
        entry = {**record.model_dump(mode="json"), "runs": run_ids}
        if workflow.strategy is not None and isinstance(record, TriggerRecord):
            limit = workflow.strategy.max_parallel or len(runs)
            entry["matrix"] = {
                "pending": list(range(limit, len(runs))),
                "active": run_ids[:limit],
                "failed": False,
            }
        return entry

    async def begin_firing(
        self,
        workflow: Workflow,
        record: TriggerRecord | RetryRecord,
        entry: dict[str, Any],
        partition: int,
    ) -> None:
        """Begin an admitted firing's runs: those within the matrix's max_parallel now, the
        rest recorded as pending."""
        if isinstance(record, TriggerRecord):
            self.runtime.metrics.triggers.labels(record.workflow, record.source).inc()
        runs = self.runs_of(workflow, record)
        active = set(entry.get("matrix", {}).get("active", entry["runs"]))
        later = [(combo, rid) for combo, rid in runs if rid not in active]
        if later:
            limit = workflow.strategy.max_parallel
            waiting = f"a free slot of its matrix (max_parallel: {limit})"
            now = datetime.now(UTC)
            for combo, rid in later:
                start = self.start_of(workflow, record, combo, rid)
                self.effects.publish([lanes.pending(start, "matrix", waiting, now)])
        for combo, rid in runs:
            if rid in active:
                await self.begin(workflow, record, combo, rid, partition)

    async def paused_why(
        self, name: str, workflow: Workflow, received_at: datetime | None = None
    ) -> str | None:
        """Why ``name`` starts no runs now (paused in its definition, by an operator, a
        halt or a breaker), or ``None``."""
        return "in its definition" if workflow.paused else await self.pause_of(name, received_at)

    async def release_held(self, name: str, partition: int) -> None:
        """Begin the firings of ``name`` held on ``partition`` while it was paused, in the
        order they arrived (before any firing that arrives after the resume)."""
        key = held_key(name, partition)
        held = self.lanes.get(key)
        if not held:
            return
        del self.lanes[key]
        workflow = self.workflows.get(name)
        for gate in held["held"]:
            entry = self.triggers.get(gate)
            if entry is None or "held" not in entry:
                continue
            entry = {k: v for k, v in entry.items() if k != "held"}
            self.triggers[gate] = entry
            if workflow is None:
                log.warning("held firing %s: workflow %s is gone; it starts nothing", gate, name)
                continue
            log.info("workflow %s resumed: starting held firing %s", name, gate)
            await self.begin_firing(workflow, accepted_record(entry), entry, partition)

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
            if self.lanes.get(held_key(name, other)) is not None:
                await self.consumption.decide(other, lambda o=other: self.release_held(name, o))

    async def release_everywhere(self, name: str, partitions: frozenset[int] | None = None) -> None:
        owned = self.consumption.owned()
        for partition in sorted(partitions if partitions is not None else owned):
            if self.lanes.get(held_key(name, partition)) is None:
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

    async def pause_of(self, name: str, received_at: datetime | None = None) -> str | None:
        """Why ``name`` is paused, or ``None``. The refreshed copy of the pauses answers
        when the workflow runs and was read after the firing was received (else Postgres
        is asked: a pause answered before the firing was accepted holds it); a pause it
        shows is confirmed in Postgres first, so a firing that arrives just after a resume
        is not turned away."""
        fresh = received_at is None or (
            self.paused_at is not None and self.paused_at >= received_at
        )
        if self.paused_read and name not in self.paused and fresh:
            return None
        await self.refresh_pauses()
        return self.paused.get(name)

    async def refresh_pauses(self) -> set[str]:
        """Read which workflows are paused (operator, on_failure: halt, breaker); returns
        the ones that were paused before (their held firings may be released)."""
        previously = set(self.paused)
        began = datetime.now(UTC)
        found = await self.runtime.database.run(controls.paused, what="workflow pauses")
        self.paused_at = began
        self.paused = {
            workflow: f"by {by}: {reason}" if reason else f"by {by}"
            for workflow, (by, reason) in found.items()
        }
        self.paused_read = True
        self.resumed |= previously - self.paused.keys()
        return previously

    async def readmit(
        self,
        workflow: Workflow,
        record: TriggerRecord | RetryRecord,
        admitted: dict[str, Any],
        partition: int,
    ) -> None:
        """A firing delivered again. Its gate entry and its runs' states are separate table
        writes whose changelogs reach the broker independently: a crash can keep the gate
        and lose a run's first state. Such a run is started again (a start is idempotent);
        anything else about a repeated firing is ignored: a held or skipped firing stays
        so, and a deferred run waits for its timer."""
        if "held" in admitted or "skipped" in admitted or "retracted" in admitted:
            log.info("duplicate delivery of firing %s ignored", gate_of(record))
            return
        started = admitted.get("matrix", {}).get("active", admitted.get("runs", []))
        deferred = admitted.get("deferred", {})
        lane = self.lane(record.workflow, record.group) if workflow.concurrency else None
        lost = [
            rid
            for rid in started
            if self.runs.get(rid) is None
            and rid not in deferred
            and not (lane and lane.holds(rid) and lane.active != rid)
        ]
        if not lost:
            log.info("duplicate delivery of firing %s ignored", gate_of(record))
            return
        # The firing as first admitted: a repeat of its key may carry another payload.
        record = accepted_record(admitted)
        for combo, rid in self.runs_of(workflow, record):
            if rid in lost:
                log.warning("run %s of firing %s lost its start: starting it", rid, gate_of(record))
                if lane is not None and lane.active == rid:
                    await self.start_run(workflow, record, combo, rid, partition)
                else:
                    # Its lane lost it too (or it has none): it arrives again.
                    await self.begin(workflow, record, combo, rid, partition)

    # --- concurrency lanes --------------------------------------------------------------

    def lane(self, workflow: str, group: str | None) -> Lane | None:
        stored = self.lanes.get(lane_key(workflow, group)) if group is not None else None
        return Lane.model_validate(stored) if stored is not None else None

    async def begin(
        self,
        workflow: Workflow,
        record: TriggerRecord | RetryRecord,
        combo: dict[str, Any],
        rid: str,
        partition: int,
    ) -> None:
        """Start the run, or let its concurrency lane decide when (or whether) it starts."""
        if workflow.concurrency is None or record.group is None:
            await self.start_run(workflow, record, combo, rid, partition)
            return
        gate = gate_of(record)
        key = lane_key(record.workflow, record.group)
        before = self.lanes.get(key)
        arrival = lanes.arrive(
            self.lane(record.workflow, record.group), rid, gate, workflow.concurrency.on_conflict
        )
        self.lanes[key] = arrival.lane.model_dump(mode="json")
        if arrival.start:
            if self.runs.get(rid) is not None:
                return  # the owner arrived again and has started
            try:
                await self.start_run(workflow, record, combo, rid, partition)
            except BaseException:
                # The run did not start (its record goes to the dead-letter path): the lane
                # stays as it was, never owned by a run that will not settle.
                if before is None:
                    if self.lanes.get(key) is not None:
                        del self.lanes[key]
                else:
                    self.lanes[key] = before
                raise
            return
        for waiting in arrival.superseded:
            reason = f"superseded by run {rid} (on_conflict: {workflow.concurrency.on_conflict})"
            await self.never_started(waiting.run_id, waiting.gate, RunStatus.CANCELLED, reason)
        if arrival.skip:
            reason = f"concurrency group {record.group!r} busy with run {arrival.lane.active}"
            await self.never_started(rid, gate, RunStatus.SKIPPED, reason)
        if arrival.cancel is not None:
            reason = f"superseded by run {rid} (on_conflict: cancel_in_progress)"
            await self.apply(CancelRequested(run_id=arrival.cancel, reason=reason), partition)
        if not arrival.skip and arrival.lane.holds(rid):
            owner = arrival.lane.active
            waiting = f"run {owner} of concurrency group {record.group!r} to settle"
            start = self.start_of(workflow, record, combo, rid)
            self.effects.publish([lanes.pending(start, "lane", waiting, datetime.now(UTC))])

    async def leave_lane(self, state: RunState, partition: int) -> None:
        """A run of a concurrency group settled: the next one waiting starts."""
        key = lane_key(state.workflow, state.group)
        lane, following = lanes.leave(self.lane(state.workflow, state.group), state.run_id)
        if lane is None:
            if self.lanes.get(key) is not None:
                del self.lanes[key]
        else:
            self.lanes[key] = lane.model_dump(mode="json")
        if following is not None:
            workflow, record, combo = self.firing(following.gate, following.run_id)
            await self.start_run(workflow, record, combo, following.run_id, partition)

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
        self.runs[rid] = str(status)
        start = self.start_of(workflow, record, combo, rid)
        entries = lanes.never_started(start, status, reason, datetime.now(UTC))
        self.effects.publish(entries)
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
        )

    async def start_run(
        self,
        workflow: Workflow,
        record: TriggerRecord | RetryRecord,
        combo: dict[str, Any],
        rid: str,
        partition: int,
        deferrals: int = 0,
    ) -> None:
        if workflow.circuit_breaker is not None and not await self.breakers.admits(
            record.workflow, rid
        ):
            # Half-open: one probe for the whole workflow; the others wait behind it.
            retry_at = datetime.now(UTC) + PROBE_WAIT
            waiting = "the probe run of the workflow's half-open circuit breaker to settle"
            await self.defer_start(
                workflow, record, combo, rid, partition, retry_at, deferrals, "probe", waiting
            )
            return
        if workflow.rate_limit is not None:
            retry_at = await self.claim_start(record.workflow, workflow)
            if retry_at is not None:
                limit = workflow.rate_limit
                waiting = (
                    f"room in the rate limit ({limit.max} starts per {format_duration(limit.per)})"
                )
                await self.defer_start(
                    workflow,
                    record,
                    combo,
                    rid,
                    partition,
                    retry_at,
                    deferrals,
                    "rate_limit",
                    waiting,
                )
                return
        if deferrals:
            gate = gate_of(record)
            entry = self.triggers.get(gate)
            if entry is not None and rid in entry.get("deferred", {}):
                deferred = {k: v for k, v in entry["deferred"].items() if k != rid}
                self.triggers[gate] = {**entry, "deferred": deferred}
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

    async def defer_start(
        self,
        workflow: Workflow,
        record: TriggerRecord | RetryRecord,
        combo: dict[str, Any],
        rid: str,
        partition: int,
        retry_at: datetime,
        deferrals: int,
        reason: str,
        waiting: str,
    ) -> None:
        """Start ``rid`` at ``retry_at`` (its rate limit has room, or a half-open circuit's
        probe is done): a durable timer, never a drop. The first deferral gives the run its
        pending row; the gate entry remembers it, so a repeated delivery of the firing does
        not start it early."""
        gate = gate_of(record)
        await self.runtime.database.run(
            lambda conn: timers.schedule(
                conn,
                run_id=rid,
                partition_key=record.partition_key,
                kafka_partition=partition,
                path=gate,
                visit=1,
                attempt=deferrals + 1,
                purpose="start",
                due_at=retry_at,
            ),
            what="deferred start",
        )
        self.runtime.metrics.deferrals.labels(record.workflow, reason).inc()
        entry = self.triggers.get(gate)
        if entry is not None and entry.get("deferred", {}).get(rid) != reason:
            self.triggers[gate] = {**entry, "deferred": {**entry.get("deferred", {}), rid: reason}}
            start = self.start_of(workflow, record, combo, rid)
            self.effects.publish([lanes.pending(start, reason, waiting, datetime.now(UTC))])
        log.info("run %s of %s deferred (%s) until %s", rid, record.workflow, reason, retry_at)

    async def deferred_start(self, event: TimerFired, partition: int) -> None:
        """A deferred start came due: claim the rate limit again."""
        if self.runs.get(event.run_id) is not None:
            return  # started already (a redelivered firing started it)
        try:
            workflow, record, combo = self.firing(event.path, event.run_id)
        except (KeyError, StopIteration):
            log.warning("deferred start of run %s: its firing is unknown", event.run_id)
            return
        await self.start_run(workflow, record, combo, event.run_id, partition, event.attempt)

    async def matrix_run_settled(self, state: RunState, settle: Settle, partition: int) -> None:
        """A combination finished: apply fail_fast, then start the next within max_parallel."""
        gate = run_key(state.workflow, state.trigger_key)
        entry = self.triggers.get(gate)
        workflow = await self.definition(state)
        if (
            state.retry_of is not None  # a combination retried on its own
            or entry is None
            or "matrix" not in entry
            or workflow is None
            or workflow.strategy is None
        ):
            return
        matrix = dict(entry["matrix"])
        active = [rid for rid in matrix["active"] if rid != state.run_id]
        pending = list(matrix["pending"])
        cancel: list[str] = []
        dropped: list[int] = []
        if (
            settle.status == RunStatus.FAILED
            and workflow.strategy.fail_fast
            and not matrix["failed"]
        ):
            matrix["failed"] = True
            dropped, pending, cancel = pending, [], active
        record = accepted_record(entry)
        combinations = matrix_combinations(workflow.strategy.matrix)
        limit = workflow.strategy.max_parallel or len(combinations)
        starting = []
        while pending and len(active) < limit:
            index = pending.pop(0)
            active.append(entry["runs"][index])
            starting.append(index)
        self.triggers[gate] = {**entry, "matrix": {**matrix, "active": active, "pending": pending}}
        for rid in cancel:
            await self.apply(
                CancelRequested(run_id=rid, reason=f"fail_fast: {state.run_id} failed"), partition
            )
        for index in dropped:
            # Pending since the firing was admitted: recorded as never started.
            reason = f"fail_fast: {state.run_id} failed"
            await self.never_started(entry["runs"][index], gate, RunStatus.CANCELLED, reason)
        for index in starting:
            await self.begin(workflow, record, combinations[index], entry["runs"][index], partition)

    async def _start_with_state(self, start: Start, key: str) -> None:
        state = await self.runtime.database.run(
            lambda conn: workflow_state.load(conn, start.workflow), what="workflow state"
        )
        await self.effects.send_event(key, start.model_copy(update={"state": state}))

    async def retract(self, record: TriggerRetracted, message: Any) -> None:
        gate = run_key(record.workflow, record.trigger_key)
        accepted = self.triggers.get(gate)
        if accepted is None:
            # Retracted before it was admitted: remember, so a late firing starts nothing.
            self.triggers[gate] = {"retracted": record.reason}
            return
        self.triggers[gate] = {**accepted, "retracted": record.reason}
        for rid in accepted.get("runs", []):
            await self.apply(
                CancelRequested(run_id=rid, reason=f"trigger retracted: {record.reason}"),
                message.partition,
            )

    async def handle(self, record: Any, message: Any) -> None:
        """Admit, retract or advance, by the record's kind."""
        if isinstance(record, TriggerRecord | RetryRecord):
            await self.admit(record, message)
        elif isinstance(record, TriggerRetracted):
            await self.retract(record, message)
        elif isinstance(record, RunEvent):
            await self.apply(record.event, message.partition)
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
        if isinstance(state, str):
            return  # over: a late or redelivered event (a Start included) changes nothing
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
            await self.effects.carry_out(new_state, effects, partition)
            return
        # A settled run keeps a marker (its status), so a redelivered event of it is
        # still recognised, at a few bytes instead of its state. The checkpoint writes
        # the marker only once the broker has the run's journal: a marker that hid a run
        # whose settlement never reached the read model is never durable.
        self.runs[event.run_id] = str(new_state.status)
        await self.effects.carry_out(new_state, effects, partition)
        for effect in effects:
            if isinstance(effect, Settle):
                if new_state.workflow in self.breakers.guarded:  # the current deployment's
                    self.effects.spawn(
                        self.breakers.settled(new_state.workflow, new_state.run_id, effect.status),
                        f"circuit breaker of {new_state.workflow}",
                    )
                if new_state.group is not None and workflow.concurrency is not None:
                    await self.leave_lane(new_state, partition)
                if new_state.matrix is not None:
                    await self.matrix_run_settled(new_state, effect, partition)

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
        for state in list(self.runs.values()):
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
    model = RetryRecord if entry.get("kind") == "retry" else TriggerRecord
    return model.model_validate({k: v for k, v in entry.items() if k in model.model_fields})


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

    def flush_tables() -> Any:
        write = runtime.tables.flush()

        async def written() -> None:
            write()

        return written

    consumption.on_open.append(runner.resume_partitions)
    # A checkpoint sends the runs' journals, then the tables' changes (see the module).
    consumption.flushers += [runner.effects.flush_journal, flush_tables]
    return runner
