"""One version of a project replayed over a window's firings, in a sandbox.

A discrete-event replay on simulated time: each firing arrives at its ``received_at``;
admission decides it with the pure rules the runner uses (:mod:`rflow.engine.admission`:
the gate, concurrency lanes, rate limits, circuit breakers, matrices); a started run
advances through :func:`rflow.engine.advance`, the engine the workers run; and every
effect the engine asks for is answered here instead of carried out:

- a send is checked as the relayer checks it (permissions, then the chain, then gas
  breakers and budgets: :mod:`rflow.backtest.sends`) and never signed or broadcast;
- any other action is answered by :mod:`rflow.backtest.simulate`;
- a timer fires at its due time, a wait takes its recorded (or assumed) answer;
- the run's journal is kept as its outcome.

Effects are dispatched by their ``type``, so an effect this module does not know stops
its run with a ``not_simulated`` mark instead of being carried out. Nothing here writes
to a topic, a table, a budget or a nonce.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from rflow import breaker
from rflow.backtest.chain import Chain
from rflow.backtest.history import Firing, History
from rflow.backtest.ledger import Ledger
from rflow.backtest.outcome import Outcome
from rflow.backtest.sends import Relayer
from rflow.backtest.simulate import Answer, Assume, Context, SideName, Stop, answer, wait_answer
from rflow.codecs.backtests import Mark, Step
from rflow.engine import admission
from rflow.engine.advance import advance
from rflow.engine.effects import Execute, Journal, Park, ScheduleTimer, Settle
from rflow.engine.events import CancelRequested, Start, StepResult, TimerFired, WaitResolved
from rflow.engine.keys import firing_runs, workflow_version
from rflow.engine.state import RunState, RunStatus
from rflow.failures import RflowError, StepError
from rflow.lang.model import Project, Workflow
from rflow.lang.reads import reads_state
from rflow.lang.units import format_duration
from rflow.ratelimit import SlidingWindow
from rflow.triggering import group_of

DONE = "incomplete"
"""The marker of a run stopped at a step the replay cannot reproduce."""


@dataclass(order=True)
class _Due:
    at: datetime
    seq: int
    what: str = field(compare=False)
    payload: Any = field(compare=False)


class Sandbox:
    """One version (``deployed`` or ``candidate``) replayed over ``history``."""

    def __init__(
        self,
        side: SideName,
        project: Project,
        history: History,
        chain: Chain,
        env: Mapping[str, str],
        *,
        assume: Assume | None = None,
        live_http: bool = False,
        fetch: Callable[[str, Mapping[str, str]], Awaitable[dict[str, Any]]] | None = None,
        blocks: dict[tuple[str, str], int] | None = None,
    ) -> None:
        self.side = side
        self.project = project
        self.history = history
        self.chain = chain
        self.env = env
        self.assume = assume
        self.live_http = live_http
        self.fetch = fetch
        self.versions = {name: workflow_version(wf) for name, wf in project.workflows.items()}
        self.ledger = Ledger(history.spend, history.gas)
        self.runs: dict[str, RunState | str] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.held: dict[str, tuple[str, ...]] = {}
        self.book = admission.Book(
            gate=lambda key: None,
            lane=lambda workflow, group: None,
            held=lambda workflow, partition: list(self.held.get(workflow, ())),
            started=lambda run_id: run_id in self.runs,
        )
        self.firings: dict[str, tuple[Firing, admission.Firing, Workflow]] = {}
        self.windows: dict[str, SlidingWindow] = {}
        self.buckets: dict[str, tuple[datetime, int]] = {}
        self.circuits: dict[str, breaker.Circuit] = {}
        self.paused: dict[str, str] = {}
        self.state: dict[str, dict[str, Any]] = {}
        self.relayer = Relayer(
            side, project, history, chain, env, self.ledger, blocks if blocks is not None else {}
        )
        self._queue: list[_Due] = []
        self._seq = itertools.count()
        self._cancelled: set[tuple[Any, ...]] = set()
        self._resolved: set[str] = set()
        self._reads_state: dict[str, bool] = {}

    # --- the replay ---------------------------------------------------------------

    async def replay(self) -> dict[str, Outcome]:
        """Every firing through this version; each run's outcome, by run id."""
        for firing in self.history.firings:
            self._push(firing.at, "fire", firing)
            if firing.retracted is not None:
                self._push(firing.retracted.at, "retract", firing)
        while self._queue:
            due = heapq.heappop(self._queue)
            if due.what == "event":
                await self.apply(due.payload, due.at)
            elif due.what == "timer":
                event = due.payload
                taken = (event.run_id, event.path, event.visit, event.attempt, event.purpose)
                if taken not in self._cancelled:
                    await self.apply(event, due.at)
            elif due.what == "fire":
                await self.fire(due.payload, due.at)
            elif due.what == "begin":
                begin, attempt = due.payload
                await self.begin(begin, due.at, attempt)
            elif due.what == "tick":
                await self.tick(due.payload, due.at)
            elif due.what == "retract":
                await self.retract(due.payload, due.at)
        for outcome in self.outcomes.values():
            if outcome.status in ("running", "waiting", "pending"):
                outcome.reason = outcome.reason or (
                    "still "
                    + outcome.status
                    + " when the replay ended"
                    + (f" ({'; '.join(outcome.waited)})" if outcome.waited else "")
                )
        return self.outcomes

    def _push(self, at: datetime, what: str, payload: Any) -> None:
        heapq.heappush(self._queue, _Due(at, next(self._seq), what, payload))

    # --- admission ----------------------------------------------------------------

    async def fire(self, firing: Firing, at: datetime) -> None:
        record = firing.record
        name = record.workflow
        workflow = self.project.workflows.get(name)
        if workflow is None:
            where = "the deployed project" if self.side == "deployed" else "the candidate"
            for rid in self._run_ids(firing, None):
                outcome = self._outcome(rid, firing)
                outcome.reason = f"workflow {name} is not in {where}"
            return
        try:
            group = group_of(workflow, record.payload)
        except RflowError as exc:
            for rid in self._run_ids(firing, workflow):
                outcome = self._outcome(rid, firing)
                outcome.reason = f"its firing would be dead-lettered: {exc.message}"
            return
        record = record.model_copy(update={"group": group})
        runs = self._runs_of(firing, workflow)
        for _, rid in runs:
            self._outcome(rid, firing)
        admitted = admission.Firing(
            gate=firing.gate,
            workflow=name,
            group=group,
            runs=tuple(admission.Run(rid, combo) for combo, rid in runs),
            record=record.model_dump(mode="json"),
        )
        self.firings[firing.gate] = (replace(firing, record=record), admitted, workflow)
        paused = "in its definition" if workflow.paused else self.paused.get(name)
        decisions = admission.fired(
            admitted, _policy(workflow), self.book, paused=paused, partition=0, now=at
        )
        await self.carry_out(decisions, at)

    async def carry_out(self, decisions: list[admission.Decision], at: datetime) -> None:
        """Carry out admission's decisions in memory, in order (the runner's, without its
        tables: the book keeps the gate and lane entries admission wrote)."""
        for decision in decisions:
            match decision:
                case admission.SetHeld(workflow=name, gates=gates):
                    self.held[name] = tuple(gates)
                case admission.Begin():
                    await self.begin(decision, at, 0)
                case admission.Start(run_id=rid, gate=gate):
                    await self.start(rid, gate, at)
                case admission.Defer(run_id=rid, gate=gate, until=until, attempt=attempt):
                    self._push(until, "begin", (admission.Begin(rid, gate), attempt))
                case admission.Pending(run_id=rid, waiting_for=waiting):
                    outcome = self.outcomes[rid]
                    outcome.status = "pending"
                    if waiting not in outcome.waited:
                        outcome.waited.append(waiting)
                case admission.NeverStarted(run_id=rid, status=status, reason=reason):
                    outcome = self.outcomes[rid]
                    outcome.status, outcome.reason = "not_started", f"{status}: {reason}"
                    self.runs[rid] = str(status)
                case admission.Cancel(run_id=rid, reason=reason):
                    await self.apply(CancelRequested(run_id=rid, reason=reason), at)
                case _:
                    pass  # SetGate, SetLane (kept in the book), Admitted, Ignored

    async def begin(self, begin: admission.Begin, at: datetime, attempt: int) -> None:
        """A run about to start: its circuit breaker and rate limit, as the runner asks."""
        _, _, workflow = self.firings[begin.gate]
        name = self.firings[begin.gate][1].workflow
        probe = True
        if workflow.circuit_breaker is not None:
            circuit = breaker.tick(self.circuits.get(name, breaker.Circuit()), at, _rule(workflow))
            circuit, probe = breaker.admit(circuit, begin.run_id)
            self.circuits[name] = circuit
        room_at = None
        limit = workflow.rate_limit
        if probe and limit is not None:
            room_at = self.claim(name, workflow, at)
        decisions = admission.start_or_defer(
            begin,
            self.book,
            probe_admits=probe,
            room_at=room_at,
            rate_limit=f"{limit.max} starts per {format_duration(limit.per)}" if limit else None,
            attempt=attempt,
            now=at,
        )
        await self.carry_out(decisions, at)

    def claim(self, name: str, workflow: Workflow, at: datetime) -> datetime | None:
        """A run start from the workflow's rate limit: in memory a sliding window, durable
        a fixed one (``storage/rate_limits.py``'s rule); ``None`` if granted."""
        limit = workflow.rate_limit
        if not limit.durable:
            window = self.windows.setdefault(name, SlidingWindow(limit.max, limit.per))
            return window.claim(at)
        start, claims = self.buckets.get(name, (None, 0))
        if start is None or start + limit.per <= at:
            self.buckets[name] = (at, 1)
            return None
        if claims < limit.max:
            self.buckets[name] = (start, claims + 1)
            return None
        return start + limit.per

    async def start(self, rid: str, gate: str, at: datetime) -> None:
        firing, admitted, workflow = self.firings[gate]
        record = firing.record
        combo = next(run.combo for run in admitted.runs if run.run_id == rid)
        state: dict[str, Any] = {}
        version = self.versions[record.workflow]
        if version not in self._reads_state:
            self._reads_state[version] = reads_state(workflow)
        if self._reads_state[version]:
            state = dict(self.state.setdefault(record.workflow, {}))
            self.outcomes[rid].mark(
                Mark(
                    kind="state",
                    side=self.side,
                    text="reads durable state: state from before the window is not kept, so "
                    "it starts from what the window's own runs wrote",
                )
            )
        event = Start(
            run_id=rid,
            workflow=record.workflow,
            version=self.versions[record.workflow],
            trigger_key=record.trigger_key,
            matrix=dict(combo) or None,
            group=record.group,
            source=record.source,
            trigger=record.payload,
            state=state,
        )
        self.outcomes[rid].status = "running"
        self.outcomes[rid].started_at = at
        await self.apply(event, at)

    async def retract(self, firing: Firing, at: datetime) -> None:
        assert firing.retracted is not None
        decisions = admission.retracted(firing.gate, firing.retracted.reason, self.book, now=at)
        await self.carry_out(decisions, at)

    async def tick(self, name: str, at: datetime) -> None:
        """An open circuit's window passed: half-open, and what was held begins."""
        workflow = self.project.workflows[name]
        circuit = breaker.tick(self.circuits.get(name, breaker.Circuit()), at, _rule(workflow))
        self.circuits[name] = circuit
        if circuit.state != "half_open" or name not in self.paused:
            return
        del self.paused[name]
        held = []
        for gate in self.held.get(name, ()):
            entry = self.firings.get(gate)
            held.append((entry[1], _policy(entry[2])) if entry else (None, admission.Policy()))
        decisions = admission.released(held, self.book, workflow=name, partition=0)
        await self.carry_out(decisions, at)

    # --- advancing ----------------------------------------------------------------

    async def apply(self, event: Any, at: datetime) -> None:
        """Decide ``event`` of a run with the engine, and answer its effects."""
        state = self.runs.get(event.run_id)
        if isinstance(state, str):
            return  # over (or stopped): a late event changes nothing
        outcome = self.outcomes.get(event.run_id)
        if outcome is None:
            return
        workflow = self.project.workflows[outcome.workflow]
        new, effects = advance(workflow, state, event, at, self.project.config)
        if new is None or new is state:
            return
        self.runs[event.run_id] = new if not new.settled else str(new.status)
        for effect in effects:
            if isinstance(self.runs.get(event.run_id), str) and self.runs[event.run_id] == DONE:
                return
            await self.effect(effect, new, at)

    async def effect(self, effect: Any, state: RunState, at: datetime) -> None:
        """Answer one effect, by its ``type``."""
        kind = getattr(effect, "type", None)
        outcome = self.outcomes[state.run_id]
        if kind == "journal":
            self.journaled(effect, outcome)
        elif kind == "execute":
            await self.execute(effect, state, at)
        elif kind == "timer":
            self._timer(effect)
        elif kind == "park":
            self.park(effect, state, at)
        elif kind == "settle":
            await self.settled(effect, state, at)
        elif kind == "cancel_timer":
            self._cancelled.add(
                (effect.run_id, effect.path, effect.visit, effect.attempt, effect.purpose)
            )
        elif kind in ("unpark", "withdraw"):
            # Nothing was parked anywhere but here; a send the sandbox answers is decided
            # at once, as one already signed: its result comes back as usual.
            pass
        else:
            text = f"{kind} effects have no simulation in a backtest"
            await self.stop(state, at, Mark(kind="not_simulated", side=self.side, text=text))

    def journaled(self, entry: Journal, outcome: Outcome) -> None:
        data = entry.data
        if entry.event == "step_started" and entry.path is not None:
            outcome.kinds[entry.path] = data.get("kind") or outcome.kinds.get(entry.path, "")
        elif entry.event == "step_settled" and entry.path is not None:
            error = data.get("error") or {}
            outcome.steps[(entry.path, data.get("visit", 1))] = Step(
                path=entry.path,
                kind=outcome.kinds.get(entry.path) or _kind(self.project, outcome, entry.path),
                status=entry.status,
                error_kind=error.get("kind"),
                error=error.get("message"),
            )
        elif entry.event in ("run_started", "run_status"):
            outcome.status = entry.status
        elif entry.event == "run_settled":
            outcome.status = entry.status
            error = data.get("error")
            outcome.error = StepError.model_validate(error) if error else None

    def _timer(self, effect: ScheduleTimer) -> None:
        event = TimerFired(
            run_id=effect.run_id,
            path=effect.path,
            visit=effect.visit,
            attempt=effect.attempt,
            purpose=effect.purpose,
            due_at=effect.due_at,
        )
        self._push(effect.due_at, "timer", event)

    async def execute(self, effect: Execute, state: RunState, at: datetime) -> None:
        outcome = self.outcomes[state.run_id]
        context = self._context(outcome)
        if effect.kind == "send_transaction":
            found: Answer | Stop = await self.relayer.send(effect, outcome, context.recorded, at)
        else:
            found = await answer(context, effect)
        if isinstance(found, Stop):
            await self.stop(state, at, found.mark)
            return
        for mark in found.marks:
            outcome.mark(mark)
        result = StepResult(
            run_id=effect.run_id,
            path=effect.path,
            visit=effect.visit,
            attempt=effect.attempt,
            output=found.output,
            error=found.error,
        )
        self._push(at + found.after, "event", result)

    def park(self, effect: Park, state: RunState, at: datetime) -> None:
        if effect.wait_id in self._resolved:
            return  # registered again (an escalation): its answer is on its way
        outcome = self.outcomes[state.run_id]
        record = state.steps.get(effect.path)
        visit = record.visit if record is not None else 1
        resolution = wait_answer(self._context(outcome), effect, visit)
        for mark in resolution.marks:
            outcome.mark(mark)
        if resolution.answered:
            self._resolved.add(effect.wait_id)
            event = WaitResolved(
                run_id=effect.run_id,
                path=effect.path,
                wait_id=effect.wait_id,
                payload=resolution.payload,
            )
            self._push(at + resolution.after, "event", event)

    async def settled(self, effect: Settle, state: RunState, at: datetime) -> None:
        outcome = self.outcomes[state.run_id]
        outcome.status = str(effect.status)
        outcome.error = effect.error
        await self._passed_on(state, effect.status, at)

    async def stop(self, state: RunState, at: datetime, mark: Mark) -> None:
        """The run cannot go on: it stops here, marked, and its lane passes on."""
        outcome = self.outcomes[state.run_id]
        outcome.mark(mark)
        outcome.status = DONE
        words = {
            "unrecorded": "a request the original run never made",
            "not_simulated": "an effect without a simulation",
        }
        outcome.reason = f"stopped at {mark.path or 'a step'}: {words.get(mark.kind, mark.kind)}"
        self.runs[state.run_id] = DONE
        await self._passed_on(state, RunStatus.CANCELLED, at)

    async def _passed_on(self, state: RunState, status: RunStatus, at: datetime) -> None:
        """What a settled run's breaker, lane and matrix do next."""
        name = state.workflow
        workflow = self.project.workflows[name]
        if workflow.circuit_breaker is not None:
            await self._breaker(name, workflow, state.run_id, status, at)
        entry = self.firings.get(_gate(state))
        firing = entry[1] if entry is not None and state.matrix is not None else None
        decisions = admission.settled(
            state.run_id,
            status,
            firing,
            _policy(workflow),
            self.book,
            workflow=name,
            group=state.group,
            retried=False,
        )
        await self.carry_out(decisions, at)

    async def _breaker(
        self, name: str, workflow: Workflow, run_id: str, status: RunStatus, at: datetime
    ) -> None:
        rule = _rule(workflow)
        circuit = self.circuits.get(name, breaker.Circuit())
        tripped = False
        if status == RunStatus.FAILED:
            circuit, tripped = breaker.failed(circuit, run_id, at, rule)
        elif status == RunStatus.SUCCEEDED:
            circuit = breaker.succeeded(circuit, run_id)
        else:
            circuit = breaker.let_go(circuit, run_id)
        self.circuits[name] = circuit
        if tripped and "pause" in workflow.circuit_breaker.on_trip:
            spec = workflow.circuit_breaker
            self.paused[name] = (
                f"by breaker: circuit breaker tripped: {spec.max_failures} failed runs "
                f"within {format_duration(spec.window)} (last: {run_id})"
            )
            self._push(max(circuit.failures) + rule.window, "tick", name)

    # --- helpers ------------------------------------------------------------------

    def _context(self, outcome: Outcome) -> Context:
        return Context(
            side=self.side,
            project=self.project,
            env=self.env,
            chain=self.chain,
            block=lambda network, f=outcome.firing: self.relayer.block(f, network),
            recorded=self.history.recorded(outcome.firing, outcome.run_id),
            state=self.state.setdefault(outcome.workflow, {}),
            assume=self.assume,
            live_http=self.live_http,
            fetch=self.fetch,
        )

    def _outcome(self, rid: str, firing: Firing) -> Outcome:
        found = self.outcomes.get(rid)
        if found is None:
            found = self.outcomes[rid] = Outcome(rid, firing.record.workflow, firing)
            if firing.origin == "read_model":
                found.mark(
                    Mark(
                        kind="reconstructed",
                        text="the firing's record has left the triggers topic: rebuilt from "
                        "the read model's row of its run",
                    )
                )
        return found

    def _runs_of(self, firing: Firing, workflow: Workflow) -> list[tuple[dict[str, Any], str]]:
        strategy = workflow.strategy
        return firing_runs(
            firing.record.workflow,
            firing.record.trigger_key,
            strategy.matrix if strategy else None,
        )

    def _run_ids(self, firing: Firing, workflow: Workflow | None) -> list[str]:
        recorded = [run.run_id for run in self.history.runs.get(firing.gate, ())]
        if workflow is not None:
            recorded += [rid for _, rid in self._runs_of(firing, workflow) if rid not in recorded]
        if not recorded:
            recorded = [
                rid
                for _, rid in firing_runs(firing.record.workflow, firing.record.trigger_key, None)
            ]
        return recorded


def _policy(workflow: Workflow) -> admission.Policy:
    strategy = workflow.strategy
    return admission.Policy(
        on_conflict=workflow.concurrency.on_conflict if workflow.concurrency else None,
        max_parallel=strategy.max_parallel if strategy else None,
        matrix=strategy is not None,
        fail_fast=bool(strategy and strategy.fail_fast),
        paused_firings=workflow.paused_firings,
    )


def _rule(workflow: Workflow) -> breaker.Rule:
    spec = workflow.circuit_breaker
    return breaker.Rule(max_failures=spec.max_failures, window=spec.window)


def _gate(state: RunState) -> str:
    from rflow.engine.keys import run_key

    return run_key(state.workflow, state.trigger_key)


def _kind(project: Project, outcome: Outcome, path: str) -> str | None:
    step_id = path.split("[", 1)[0]
    workflow = project.workflows.get(outcome.workflow)
    for step in (*workflow.steps, *workflow.finally_) if workflow else ():
        if step.id == step_id:
            return step.kind
    return None
