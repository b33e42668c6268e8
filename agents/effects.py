"""Carrying out the engine's effects without blocking the partition that asked for them.

Actions run as tasks with bounded concurrency; their results come back to the runner,
which decides them on the spot when this worker owns the run's partition, and otherwise
as run events on the runs topic, keyed like the run. Timers and waits
are rows in Postgres. Journal entries wait for the next checkpoint, which sends each
run's entries since the last one to the events topic (for the read model) as one record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiokafka.partitioner import DefaultPartitioner

from rflow import waiturls
from rflow.agents.backlog import Backlog
from rflow.agents.executors import Executors
from rflow.agents.slots import RunSlots
from rflow.classify import step_error
from rflow.codecs import CallRecord, RunEvent, SendRequest, TriggerRetracted, encode, encode_journal
from rflow.engine import (
    Effect,
    Execute,
    Journal,
    Park,
    RunState,
    ScheduleTimer,
    Settle,
    StepResult,
    Unpark,
    WaitResolved,
    provenance,
)
from rflow.engine.children import answer
from rflow.engine.effects import CancelChild, CancelTimer, StartChild, Withdraw
from rflow.engine.events import Event
from rflow.engine.state import ParentLink
from rflow.engine.statuses import RunStatus
from rflow.failures import FailureKind, RflowError, StepError
from rflow.lang.model import Project
from rflow.lang.model.resources import Config
from rflow.secrets import Secrets
from rflow.storage import controls, keys, sends, timers, waits
from rflow.streams.consumption import Checkpoint, current_checkpoint, deciding
from rflow.streams.tables import WRITES_AT_ONCE
from rflow.triggering import group_of

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)
DEFAULT_STEP_TIMEOUT = 300.0
MAX_CONCURRENT_ACTIONS = 64
MAX_CONCURRENT_ROWS = 8
"""Timer and wait rows written at once: more would only queue for the pool's
connections and starve the projector and the timer loop that share it."""
JOURNAL_RECORD_BYTES = 256 * 1024
"""Above this, a decision's journal entries go out one record each (a record must stay
under the 1 MiB every reader accepts, and step outputs can be large)."""


def partition_of(key: bytes, count: int) -> int:
    """The partition (of ``count``) a record keyed ``key`` goes to: murmur2, as rflow's
    producers and Kafka's Java client hash keys."""
    partitions = list(range(count))
    return DefaultPartitioner()(key, partitions, partitions)


def max_concurrent_runs(project: Project | None) -> int:
    """``config.max_concurrent_runs`` of ``project`` (its default without one)."""
    return (project.config if project else Config()).max_concurrent_runs


def partition_key(state: RunState) -> str:
    """The Kafka key of a run's events: its firing's concurrency group or trigger key."""
    return state.group if state.group is not None else state.trigger_key


class EffectRunner:
    """Carries out effects for the runner agent of one worker."""

    def __init__(self, app: RflowApp) -> None:
        self.app = app
        self.runtime = app.rflow
        self.executors = Executors(app.rflow)
        self.backlog = Backlog()
        """The actions started and not finished (the agent waits for room in it)."""
        self.limit = asyncio.Semaphore(MAX_CONCURRENT_ACTIONS)
        self.slots = RunSlots(max_concurrent_runs(app.rflow.project))
        self.rows = asyncio.Semaphore(MAX_CONCURRENT_ROWS)
        self.journal: dict[str, list[Journal | Settle]] = {}
        """Each run's journal entries decided since the last checkpoint, in order."""
        self.journal_partition: dict[str, int | None] = {}
        """The partition each run of :attr:`journal` is decided on."""
        self._wait_key: bytes | None = None
        app.rflow.on_deployment.append(
            lambda deployment: self.slots.resize(max_concurrent_runs(deployment.project))
        )

    async def close(self) -> None:
        tasks = list(self.backlog.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.executors.close()

    def spawn(self, work: Awaitable[Any], what: str) -> None:
        task = self.backlog.start(work)

        def done(finished: asyncio.Task[Any]) -> None:
            if not finished.cancelled() and finished.exception() is not None:
                log.error("%s failed: %r", what, finished.exception())

        task.add_done_callback(done)

    async def carry_out(self, state: RunState, effects: list[Effect], partition: int) -> None:
        """Start every effect (journal entries wait for the next checkpoint)."""
        key = partition_key(state)
        self.publish([effect for effect in effects if isinstance(effect, Journal | Settle)])
        for effect in effects:
            if isinstance(effect, Execute) and effect.kind == "send_transaction":
                self.spawn(self.send(effect, key), f"send {effect.key}")
            elif isinstance(effect, Execute):
                self.spawn(self.execute(effect, key, partition), f"step {effect.key}")
            elif isinstance(effect, ScheduleTimer):
                self.spawn(
                    self.db(self._timer(effect, key, partition), "timer"), f"timer {effect.key}"
                )
            elif isinstance(effect, Park):
                self.spawn(self.db(self._park(effect, key), "wait"), f"wait {effect.wait_id}")
            elif isinstance(effect, Unpark):
                self.spawn(
                    self.db(lambda conn, e=effect: waits.delete(conn, e.wait_id), "unpark"),
                    "unpark",
                )
            elif isinstance(effect, CancelTimer):
                key_of = timers.timer_key(
                    effect.run_id, effect.path, effect.visit, effect.attempt, effect.purpose
                )
                self.spawn(
                    self.db(lambda conn, k=key_of: timers.delete(conn, [k]), "timer release"),
                    f"timer release {key_of}",
                )
            elif isinstance(effect, Withdraw):
                self.spawn(self.withdraw(effect), f"withdraw {effect.key}")
            elif isinstance(effect, StartChild):
                self.spawn(self.start_child(effect, key), f"child {effect.trigger_key}")
            elif isinstance(effect, CancelChild):
                self.spawn(self.cancel_child(effect), f"cancel child {effect.trigger_key}")
            elif isinstance(effect, Settle):
                self.settled(effect, state)

    def settled(self, effect: Settle, state: RunState) -> None:
        had_timers = any(r.due_at is not None for r in (*state.steps.values(), *state.history))
        if had_timers:
            # Timers of a settled run would fire into nothing; most runs never had one.
            self.spawn(
                self.db(lambda conn: timers.delete_run(conn, effect.run_id), "timer cleanup"),
                "timer cleanup",
            )
        if effect.on_failure == "halt":
            reason = (
                f"run {effect.run_id} failed: {effect.error.message if effect.error else 'unknown'}"
            )
            self.spawn(
                self.db(
                    lambda conn: controls.pause(
                        conn, effect.workflow, by="on_failure", reason=reason
                    ),
                    "halt",
                ),
                f"halt {effect.workflow}",
            )
            runner = self.runtime.runner
            if runner is not None:  # this worker starts no more of its runs from now on
                runner.paused[effect.workflow] = f"by on_failure: {reason}"
            log.warning("workflow %s halted: %s", effect.workflow, reason)

    # --- actions ----------------------------------------------------------------------

    async def wait_key(self) -> bytes:
        """The key webhook waits' tokens are made with (read once; the same on every
        worker)."""
        if self._wait_key is None:
            self._wait_key = await self.db(
                lambda conn: keys.signing_key(conn, waiturls.KEY_PURPOSE), "the wait URL key"
            )
        return self._wait_key

    async def execute(self, effect: Execute, key: str, partition: int) -> None:
        secrets = Secrets(self.runtime.env)
        async with self.slots.hold(effect.run_id), self.limit:
            output: Any = None
            error: StepError | None = None
            timeout = effect.timeout or DEFAULT_STEP_TIMEOUT
            try:
                async with asyncio.timeout(timeout):  # no task of its own, as wait_for makes
                    if effect.wait_id is not None:
                        # ${{ wait.url }}: filled in (and written back) like a variable.
                        resume = waiturls.url(
                            self.runtime.settings.base_url,
                            {"path": effect.wait_path},
                            await self.wait_key(),
                            effect.wait_id,
                        )
                        env = {**self.runtime.env, waiturls.PLACEHOLDER: resume}
                        secrets = Secrets(env).hide(waiturls.PLACEHOLDER)
                    output = await self.executors.run(effect, secrets)
            except RflowError as exc:
                error = exc.as_data()
            except TimeoutError:
                error = StepError(
                    kind=FailureKind.TIMEOUT, message=f"no result within {timeout:g}s"
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every failure of an action becomes data with a kind
                message = secrets.scrub(f"{type(exc).__name__}: {exc}")[:500]
                error = step_error(exc, message)
        # Whatever the effect was given goes back to its placeholder before the journal.
        result = StepResult(
            run_id=effect.run_id,
            path=effect.path,
            visit=effect.visit,
            attempt=effect.attempt,
            output=secrets.scrub(output),
            error=secrets.scrub_error(error),
        )
        await self.send_result(key, result, partition)

    async def send(self, effect: Execute, key: str) -> None:
        """Hand a send to the relayer that owns its signer; its result comes back from there."""
        record = SendRequest(execute=effect, reply_key=key)
        await self._produce(
            self.runtime.topics.sends, record.partition_key, encode(record), effect.run_id
        )

    async def produce_send(self, key: str, record: bytes, run_id: str) -> None:
        """Produce an encoded send request to the sends topic (a deferred send handed back)."""
        await self._produce(self.runtime.topics.sends, key, record, run_id)

    async def send_result(self, key: str, event: Event, partition: int | None = None) -> None:
        """An action's result back to its run: decided here when this worker owns the
        run's partition, else produced to the runs topic."""
        if partition is None:
            count = self.runtime.catalog.spec("rflow.runs").partitions
            partition = partition_of(key.encode(), count)
        runner = self.runtime.runner
        if runner is None or not await runner.decide_here(event, partition):
            await self.send_event(key, event)

    async def send_event(self, key: str, event: Event) -> None:
        """Produce a run event and wait for the broker; retried until it lands."""
        await self._produce(
            self.runtime.topics.runs, key, encode(RunEvent(event=event)), event.run_id
        )

    async def _produce(self, topic: Any, key: str, value: bytes, run_id: str) -> None:
        """Produce and wait for the broker; retried until it lands."""

        async def produce() -> None:
            await (await topic.send(key=key.encode(), value=value))

        await _until_delivered(produce, f"to {topic.get_topic_name()} for run {run_id}")

    def publish(self, entries: list[Journal | Settle]) -> None:
        """Keep journal entries for the next checkpoint (:meth:`flush_journal`), each
        run's with the partition it is decided on (whose transaction writes them)."""
        number = deciding()
        for entry in entries:
            found = self.journal.get(entry.run_id)
            if found is None:
                self.journal[entry.run_id] = [entry]
                self.journal_partition[entry.run_id] = number
            else:
                found.append(entry)

    def flush_journal(self) -> Callable[[], Awaitable[None]]:
        """Take the journal entries kept so far; the returned function sends them, each
        run's as one record (or a few, see :func:`journal_records`), and returns when the
        broker has them all, trying again while Kafka is away."""
        taken, self.journal = self.journal, {}
        numbers, self.journal_partition = self.journal_partition, {}

        async def write() -> None:
            if not taken:
                return
            topic = self.runtime.topics.events.get_topic_name()
            checkpoint = current_checkpoint()
            if checkpoint is None:
                checkpoint = Checkpoint(self.app.producer, None)

            # A run is always decided on one partition n: its journal goes to partition n
            # of the events topic (in order), so that n's transaction touches one events
            # partition, not every partition its runs' ids hash to.
            spread = self.runtime.catalog.spec("rflow.events").partitions

            async def produce() -> None:
                sent = []
                for run_id, entries in taken.items():
                    number = numbers.get(run_id)
                    partition = None if number is None else number % spread
                    for value in journal_records(entries):
                        key = run_id.encode()
                        sent.append(await checkpoint.send(number, topic, key, value, partition))
                        if not len(sent) % WRITES_AT_ONCE:
                            await asyncio.sleep(0)  # let other work run
                await asyncio.gather(*sent)

            if checkpoint.transactional:
                # A transaction that failed is aborted whole: writing again would only
                # duplicate; the checkpoint fails (WritesLost) and commits nothing.
                await produce()
            else:
                await _until_delivered(produce, "the journal")

        return write

    # --- composition ------------------------------------------------------------------

    async def withdraw(self, effect: Withdraw) -> None:
        """Take back a send its run no longer wants (a branch stopped): if the relayer has
        not signed it yet, it never will, and answers ``cancelled``."""
        error = StepError(
            kind=FailureKind.CANCELLED,
            message=f"withdrawn before it was signed ({effect.reason}): nothing was "
            "reserved, signed or broadcast",
        ).model_dump(mode="json")
        withdrawn = await self.db(
            lambda conn: sends.withdraw(conn, effect.key, effect.attempt, error), "withdraw"
        )
        log.info(
            "send %s %s",
            effect.key,
            "withdrawn before it was signed" if withdrawn else "was signed already: it goes on",
        )

    async def start_child(self, effect: StartChild, parent_key: str) -> None:
        """Start a child run: its parent's wait first (so the child's end always finds
        it), then the child's firing, which the called workflow's gate takes once."""
        if effect.wait_id is not None:
            spec = {
                "child": {
                    "workflow": effect.child,
                    "run_id": effect.child_run_id,
                    "trigger_key": effect.trigger_key,
                }
            }
            await self.db(
                lambda conn: waits.park(
                    conn,
                    wait_id=effect.wait_id,
                    run_id=effect.run_id,
                    workflow=effect.workflow,
                    path=effect.path,
                    partition_key=parent_key,
                    kind="child",
                    spec=spec,
                    timeout_at=effect.timeout_at,
                ),
                "child wait",
            )
        parent = ParentLink(
            run_id=effect.run_id,
            workflow=effect.workflow,
            path=effect.path,
            visit=effect.visit,
            attempt=effect.attempt,
            wait_id=effect.wait_id,
        )
        try:
            record = CallRecord(
                workflow=effect.child,
                trigger_key=effect.trigger_key,
                group=self.child_group(effect.child, effect.inputs),
                payload=effect.inputs,
                received_at=datetime.now(UTC),
                parent=parent,
            )
        except RflowError as exc:
            await self.child_refused(effect, parent_key, exc.as_data())
            return
        await self._produce(
            self.runtime.topics.triggers, record.partition_key, self.vouched(record), effect.run_id
        )

    def vouched(self, record: Any) -> bytes:
        """``record`` encoded with the proof of this worker's ingress key: a child run's
        firing and its retraction are believed only with it."""
        return encode(provenance.vouch(record, self.runtime.settings.ingress_keyring))

    def child_group(self, name: str, inputs: dict[str, Any]) -> str | None:
        """The concurrency group of a firing of workflow ``name`` with ``inputs``, as the
        current deployment computes it (:class:`RflowError` when it cannot)."""
        project = self.runtime.project
        workflow = project.workflows.get(name) if project is not None else None
        if workflow is None:
            raise RflowError(
                FailureKind.INVALID_INPUT, f"workflow {name!r} is not in the deployed project"
            )
        return group_of(workflow, inputs)

    async def child_refused(self, effect: StartChild, parent_key: str, error: StepError) -> None:
        """A child that cannot start: its parent's step fails with why."""
        log.warning(
            "child run %s of %s refused: %s", effect.trigger_key, effect.child, error.message
        )
        if effect.wait_id is None:
            return
        payload = answer(effect.child_run_id, RunStatus.FAILED, None, error)
        resolved = await self.db(
            lambda conn: waits.resolve(conn, effect.wait_id, payload, datetime.now(UTC)),
            "child refused",
        )
        if resolved is not None:
            event = WaitResolved(
                run_id=effect.run_id, path=effect.path, wait_id=effect.wait_id, payload=payload
            )
            await self.send_event(parent_key, event)

    async def cancel_child(self, effect: CancelChild) -> None:
        """Stop a child run: its firing is retracted on the triggers topic, keyed like the
        firing (a child not started yet never starts; a running one stops at its next
        step boundary)."""
        try:
            group = self.child_group(effect.child, effect.inputs)
        except RflowError as exc:
            log.warning(
                "child %s of %s cannot be cancelled: %s", effect.trigger_key, effect.child, exc
            )
            return
        record = TriggerRetracted(
            workflow=effect.child,
            trigger_key=effect.trigger_key,
            group=group,
            reason=effect.reason,
            retracted_at=datetime.now(UTC),
        )
        await self._produce(
            self.runtime.topics.triggers, record.partition_key, self.vouched(record), effect.run_id
        )

    # --- rows ---------------------------------------------------------------------------

    async def db(self, work: Callable[[Any], Awaitable[Any]], what: str) -> Any:
        async with self.rows:
            return await self.runtime.database.run(work, what=what)

    def _timer(
        self, effect: ScheduleTimer, key: str, partition: int
    ) -> Callable[[Any], Awaitable[None]]:
        async def work(conn: Any) -> None:
            await timers.schedule(
                conn,
                run_id=effect.run_id,
                partition_key=key,
                kafka_partition=partition,
                path=effect.path,
                visit=effect.visit,
                attempt=effect.attempt,
                purpose=effect.purpose,
                due_at=effect.due_at,
            )

        return work

    def _park(self, effect: Park, key: str) -> Callable[[Any], Awaitable[None]]:
        kind = next(
            (k for k in ("approval", "webhook", "event", "signal") if effect.wait.get(k)),
            "approval",
        )

        async def work(conn: Any) -> None:
            token_hash = None
            if kind == "webhook":
                if self._wait_key is None:
                    self._wait_key = await keys.signing_key(conn, waiturls.KEY_PURPOSE)
                token_hash = waiturls.token_hash(waiturls.token(self._wait_key, effect.wait_id))
            await waits.park(
                conn,
                wait_id=effect.wait_id,
                run_id=effect.run_id,
                workflow=effect.workflow,
                path=effect.path,
                partition_key=key,
                kind=kind,
                spec=effect.wait,
                timeout_at=effect.timeout_at,
                escalated_at=effect.escalated_at,
                token_hash=token_hash,
            )

        return work


def journal_records(entries: list[Journal | Settle]) -> list[bytes]:
    """The events-topic records of one decision's entries: one record for them all, unless
    it would pass JOURNAL_RECORD_BYTES, then one per entry (as large as an entry is)."""
    if not entries:
        return []
    together = encode_journal(entries)
    if len(together) <= JOURNAL_RECORD_BYTES or len(entries) == 1:
        return [together]
    return [encode_journal([entry]) for entry in entries]


async def _until_delivered(produce: Callable[[], Awaitable[None]], what: str) -> None:
    """Run ``produce`` until the broker has acknowledged it: Kafka away keeps the records
    and tries again, backing off up to five seconds."""
    delay = 0.1
    while True:
        try:
            await produce()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Kafka away: keep the records, try again
            log.warning("cannot produce %s, retrying in %.1fs: %r", what, delay, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
