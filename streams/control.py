"""Operator actions on runs: answer an approval, signal a run, cancel a run, retry a failed run; on
workflows: pause and resume (and, through :attr:`Control.sends`, on pending sends:
:mod:`rflow.streams.send_actions`; through :attr:`Control.dead_letters`, on dead-lettered
records, replayed once: :mod:`rflow.streams.dead_letter_actions`).

The HTTP API, the console and the CLI call these same methods, so an action keeps its
checks whichever way it is asked for.

Each writes what must be durable first (the wait's answer, first answer wins), then
produces the record keyed like the run, so its owner applies it in order. The CLI acts
with a connection and a producer of its own (:func:`connected`); a worker's HTTP API
with the worker's database and producer.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import psycopg

from rflow import approvals, storage
from rflow.approvals import Decision
from rflow.codecs import (
    MAX_RECORD_BYTES,
    Record,
    RetryRecord,
    RunEvent,
    TriggerRecord,
    encode,
)
from rflow.deployment import ProjectAt, project_reader
from rflow.engine import CancelRequested, RunState, StepRecord, WaitResolved, rerun
from rflow.engine.events import SignalReceived
from rflow.engine.keys import retry_run_id
from rflow.lang import Project
from rflow.lang.model import Workflow
from rflow.settings import Settings
from rflow.storage import (
    controls,
    runs,
    sends,
    versions,
    waits,
    workflow_state,
)
from rflow.streams.errors import ControlError
from rflow.streams.producer import ProduceError, Producer

__all__ = ["Control", "ControlError", "Sender", "announce", "connected", "resume_urls"]

if TYPE_CHECKING:
    from rflow.authz import Principal
    from rflow.storage.audit import Via
    from rflow.streams.dead_letter_actions import DeadLetterActions
    from rflow.streams.gate import Gate
    from rflow.streams.send_actions import SendActions

T = TypeVar("T")
Work = Callable[[psycopg.AsyncConnection], Awaitable[T]]


class Sender(Protocol):
    async def send(self, topic: str, key: str, record: Record) -> tuple[int, int]: ...

    async def send_raw(self, topic: str, key: bytes | None, value: bytes) -> tuple[int, int]: ...

    @property
    def topic_prefix(self) -> str: ...

    async def trigger(self, record: TriggerRecord) -> tuple[int, int]: ...

    async def pause_changed(self, workflow: str, *, paused: bool) -> None: ...


class Control:
    """Operator actions over ``database`` (runs work on a connection) and ``producer``."""

    def __init__(
        self,
        database: Callable[[Work[Any]], Awaitable[Any]],
        producer: Sender,
        project: Project | ProjectAt | None = None,
    ) -> None:
        self.database = database
        self.producer = producer
        self._project = project_reader(project)

    @property
    def project(self) -> Project | None:
        """The current project (a worker's changes with every deploy)."""
        return self._project()

    @property
    def gate(self) -> Gate:
        """Authorization and the audit trail, over the same database."""
        from rflow.streams.gate import Gate

        return Gate(self.database)

    @property
    def sends(self) -> SendActions:
        """The actions on pending sends, over the same database and producer."""
        from rflow.streams.send_actions import SendActions

        return SendActions(self.database, self.producer)

    @property
    def dead_letters(self) -> DeadLetterActions:
        """The dead letters of records: list, show, replay, over the same database and
        producer."""
        from rflow.streams.dead_letter_actions import DeadLetterActions

        return DeadLetterActions(self.database, self.producer)

    async def decide(
        self,
        run_id: str,
        step: str | None,
        decision: Decision,
        who: Principal,
        *,
        choice: str | None = None,
        text: str | None = None,
        via: Via = "cli",
    ) -> dict[str, Any]:
        """Answer the open approval of ``run_id`` (at ``step`` if given) as ``who``; the
        first answer wins. Nothing is recorded for a principal who is not one of the
        approval's approvers (:mod:`rflow.authz` decides, the gate records the refusal)
        or a choice that is not one of the approval's."""
        from rflow.authz import Target

        async def find(conn: psycopg.AsyncConnection) -> dict[str, Any]:
            open_waits = await waits.open_waits(conn, run_id, step)
            if not open_waits:
                where = f" at step {step!r}" if step else ""
                raise ControlError(f"run {run_id} has no open wait{where}", 404)
            if len(open_waits) > 1 and step is None:
                paths = ", ".join(w["path"] for w in open_waits)
                raise ControlError(
                    f"run {run_id} waits at several steps ({paths}): name one with --step", 400
                )
            wait = open_waits[0]
            if wait["kind"] != "approval":
                raise ControlError(
                    f"step {wait['path']} of run {run_id} waits for a {wait['kind']}, "
                    "not an approval"
                )
            return wait

        wait = await self.database(find)
        approvers = tuple((wait["spec"].get("approval") or {}).get("approvers") or ())
        target = Target("approval", f"{run_id} {wait['path']}", approvers)
        await self.gate.check(who, "approvals.answer", target, via=via, args={"step": step})
        try:
            payload = approvals.answer(wait["spec"], decision, who.name, choice=choice, text=text)
        except approvals.Refused as exc:
            raise ControlError(str(exc), exc.status) from None
        resolved = await self.database(
            lambda conn: waits.resolve(conn, wait["wait_id"], payload, datetime.now(UTC))
        )
        if resolved is None:
            raise ControlError(f"the wait of run {run_id} at {wait['path']} was answered already")
        event = WaitResolved(
            run_id=run_id, path=wait["path"], wait_id=wait["wait_id"], payload=payload
        )
        await self.producer.send("rflow.runs", resolved["partition_key"], RunEvent(event=event))
        return {"run_id": run_id, "step": wait["path"], "answer": payload}

    async def signal(self, run_id: str, name: str, data: Any, principal: str) -> dict[str, Any]:
        """Send signal ``name`` with ``data`` to run ``run_id`` as ``principal``: to the step
        waiting for it (the one that started waiting first; first answer wins), else kept
        for a later wait when the run's workflow declares ``signals: {<name>: {buffer:
        true}}``. Refused (nothing recorded) when no step waits and it is not kept, and
        for a run not started or already over."""
        run = await self._run(run_id)
        if run["settled_at"] is not None:
            raise ControlError(
                f"run {run_id} is already {run['status']}: a signal goes to a run in progress"
            )
        if run["status"] == "pending":
            raise ControlError(
                f"run {run_id} has not started ({run['pending_reason']}: waiting for "
                f"{run['waiting_for']}): signal it once it runs"
            )
        at = datetime.now(UTC)
        payload = {"signal": name, "data": data, "by": principal, "at": at.isoformat()}

        async def resolve(conn: psycopg.AsyncConnection) -> tuple[dict, dict] | None:
            for wait in await waits.signal_waits(conn, run_id, name):
                resolved = await waits.resolve(conn, wait["wait_id"], payload, at)
                if resolved is not None:
                    return wait, resolved
            return None

        found = await self.database(resolve)
        if found is not None:
            wait, resolved = found
            event = WaitResolved(
                run_id=run_id, path=wait["path"], wait_id=wait["wait_id"], payload=payload
            )
            await self.producer.send("rflow.runs", resolved["partition_key"], RunEvent(event=event))
            return {"run_id": run_id, "signal": name, "step": wait["path"], "kept": False}
        stored = await self.database(lambda conn: versions.definition(conn, run["version"]))
        declared = (stored[1].get("signals") or {}) if stored is not None else {}
        if not (declared.get(name) or {}).get("buffer"):
            raise ControlError(
                f"run {run_id} has no step waiting for signal {name!r}, and workflow "
                f"{run['workflow']} does not keep it for later (it would with signals: "
                f"{{{name}: {{buffer: true}}}}): nothing was sent",
                409,
            )
        key = run["group_key"] if run["group_key"] is not None else run["trigger_key"]
        event = SignalReceived(
            run_id=run_id, name=name, signal_id=uuid.uuid4().hex, payload=payload
        )
        await self.producer.send("rflow.runs", key, RunEvent(event=event))
        return {"run_id": run_id, "signal": name, "step": None, "kept": True}

    async def cancel(self, run_id: str, reason: str | None, by: str) -> dict[str, Any]:
        """Ask the run to stop at its next step boundary (a send in flight is never cut off:
        ``pending_sends`` names the run's unsettled sends, which ``rflow sends cancel``
        stops sooner). The run's cancellation names ``by``, the principal who asked."""
        run = await self._run(run_id)
        if run["settled_at"] is not None:
            raise ControlError(f"run {run_id} is already {run['status']}")
        key = run["group_key"] if run["group_key"] is not None else run["trigger_key"]
        reason = f"cancelled by {by}" + (f": {reason}" if reason else "")
        event = CancelRequested(run_id=run_id, reason=reason)
        await self.producer.send("rflow.runs", key, RunEvent(event=event))
        pending = await self.database(lambda conn: sends.open_of_run(conn, run_id))
        return {"run_id": run_id, "cancel_requested": reason, "pending_sends": pending}

    async def retry(
        self,
        run_id: str,
        from_step: str | None = None,
        confirm: bool = False,
        *,
        who: Principal | None = None,
        via: Via = "cli",
    ) -> dict[str, Any]:
        """Continue failed run ``run_id`` as a new run linked to it (:mod:`rflow.engine.rerun`):
        the steps that settled keep their results and keys, the failed step and those after
        it run again. ``from_step`` restarts from an earlier step; when that sends
        transactions again, ``confirm`` must say so.

        The new run's id derives from the failed run's, so retrying twice (or from two
        places at once) starts one run; the failed run records its id and ``who`` asked.
        Sending settled transactions again takes ``runs.resend`` as well.
        """
        run = await self._run(run_id)
        if run["retried_as"] and from_step is not None:
            raise ControlError(
                f"run {run_id} was already retried as {run['retried_as']}: a run is retried "
                f"once; retry {run['retried_as']} from step {from_step!r} instead",
                409,
            )
        if run["retried_as"]:
            retried = await self.database(lambda conn: runs.get_run(conn, run["retried_as"]))
            return {
                "run_id": run_id,
                "retried_as": run["retried_as"],
                "status": retried["status"] if retried else "pending",
                "already": True,
            }
        if run["status"] != "failed":
            raise ControlError(f"run {run_id} is {run['status']}: only a failed run can be retried")

        async def load(conn: psycopg.AsyncConnection) -> tuple[Any, Any, dict[str, Any], bool]:
            final = await runs.final_state(conn, run_id)
            stored = await versions.definition(conn, run["version"])
            state = await workflow_state.load(conn, run["workflow"])
            deployed = run["workflow"] in await versions.current(conn)
            return final, stored, state, deployed

        final, stored, state, deployed = await self.database(load)
        if not deployed:
            raise ControlError(
                f"workflow {run['workflow']} is not deployed any more: its runs cannot be retried"
            )
        if final is None:
            raise ControlError(f"run {run_id} kept no final state to continue from", 409)
        if stored is None:
            raise ControlError(f"version {run['version']} of {run['workflow']} is unknown", 409)
        previous = RunState.model_validate(final)
        workflow = Workflow.model_validate(stored[1])
        try:
            plan = rerun.plan(workflow, previous, from_step)
        except rerun.RerunError as exc:
            raise ControlError(str(exc), 400) from None
        resends = [resend(record) for record in plan.resent]
        if resends and not confirm:
            listed = "; ".join(f"{r['path']} ({r['tx_hash'] or 'no hash'})" for r in resends)
            raise ControlError(
                f"retrying run {run_id} from step {from_step or workflow.steps[plan.restart].id!r} "
                f"sends {len(resends)} "
                f"transaction(s) again: {listed}; confirm to send them again (--yes, or "
                '"yes": true in the API)',
                409,
                resends=resends,
            )
        if resends:
            from rflow.authz import Target

            await self.gate.check(
                who, "runs.resend", Target("run", run_id), via=via, args={"from": from_step}
            )
        record = RetryRecord(
            workflow=previous.workflow,
            run_id=retry_run_id(run_id),
            retry_of=run_id,
            trigger_key=previous.trigger_key,
            group=previous.group,
            from_step=from_step,
            previous=final,
            state=state,
            requested_at=datetime.now(UTC),
        )
        size = len(encode(record))
        if size > MAX_RECORD_BYTES:
            raise ControlError(
                f"run {run_id}'s state is {size} bytes, over the {MAX_RECORD_BYTES}-byte "
                "record limit: it cannot be retried",
                413,
            )
        await self.producer.send("rflow.triggers", record.partition_key, record)
        by = who.name if who is not None else None
        linked = await self.database(
            lambda conn: runs.mark_retried(conn, run_id, record.run_id, by=by)
        )
        return {
            "run_id": run_id,
            "retried_as": linked or record.run_id,
            "from_step": from_step or workflow.steps[plan.restart].id,
            "kept": sorted(plan.kept),
            "resends": resends,
            "already": False,
        }

    async def pause(self, workflow: str, reason: str, by: str) -> dict[str, Any]:
        """Pause ``workflow``: its firings are held (or skipped) until it is resumed. The
        pause names ``by``, the principal who asked."""
        self._known(workflow)
        await self.database(lambda conn: controls.pause(conn, workflow, by=by, reason=reason))
        await announce(self.producer, workflow, paused=True)
        return {"workflow": workflow, "paused": True}

    async def resume(self, workflow: str) -> dict[str, Any]:
        """Lift ``workflow``'s pause (an operator's, a halt's or a breaker's): the firings
        held meanwhile start in the order they arrived."""
        self._known(workflow)
        if not await self.database(lambda conn: controls.resume(conn, workflow)):
            raise ControlError(f"workflow {workflow} was not paused: nothing to resume", 409)
        await announce(self.producer, workflow, paused=False)
        return {"workflow": workflow, "paused": False}

    async def resume_urls(self, run_id: str, base: str) -> list[dict[str, Any]]:
        """The resume URL of each open webhook wait of ``run_id`` (``base`` in front): what
        answers it, so show it only to a principal who may answer (approvals.answer)."""
        return await self.database(lambda conn: resume_urls(conn, run_id, base))

    def _known(self, workflow: str) -> None:
        project = self.project
        if project is None or workflow not in project.workflows:
            raise ControlError(f"no workflow {workflow!r} in this project", 404)

    async def _run(self, run_id: str) -> dict[str, Any]:
        run = await self.database(lambda conn: runs.get_run(conn, run_id))
        if run is None:
            raise ControlError(f"no run {run_id}", 404)
        return run


async def resume_urls(
    conn: psycopg.AsyncConnection, run_id: str, base: str
) -> list[dict[str, Any]]:
    """Each open webhook wait of ``run_id``: its step, its resume URL and its auth type."""
    from rflow import waiturls
    from rflow.storage import keys

    rows = [w for w in await waits.open_waits(conn, run_id) if w["kind"] == "webhook"]
    if not rows:
        return []
    key = await keys.signing_key(conn, waiturls.KEY_PURPOSE)
    found = []
    for row in rows:
        spec = row["spec"].get("webhook") or {}
        found.append(
            {
                "step": row["path"],
                "resume_url": waiturls.url(base, spec, key, row["wait_id"]),
                "auth": (spec.get("auth") or {}).get("type", "none"),
            }
        )
    return found


def resend(record: StepRecord) -> dict[str, Any]:
    """What a retry's ``from_step`` would send again: the step, and the transaction it
    sent before."""
    tx = (record.output or {}).get("tx") or {} if isinstance(record.output, dict) else {}
    return {
        "path": record.path,
        "tx_hash": tx.get("hash"),
        "to": tx.get("to"),
        "value": tx.get("value"),
        "input": record.input,
    }


async def announce(producer: Sender, workflow: str, *, paused: bool) -> None:
    """Tell the workers through the triggers topic that ``workflow`` was paused (or
    resumed), before the operator is answered: every firing produced after the answer is
    then decided with the pause. Kafka refusing is an error that says the pause stands."""
    try:
        await producer.pause_changed(workflow, paused=paused)
    except ProduceError as exc:
        done = "paused" if paused else "resumed"
        raise ControlError(
            f"workflow {workflow} is {done} in Postgres, but the workers could not be told "
            f"through Kafka ({exc}): they see it within a second, and firings produced "
            "meanwhile may be decided without it",
            503,
        ) from None


@asynccontextmanager
async def connected(settings: Settings, project: Project | None = None) -> AsyncIterator[Control]:
    """A :class:`Control` on a connection and a producer of its own (the CLI's case)."""
    conn = await storage.connect(settings)
    async with conn, Producer(settings) as producer:

        async def database(work: Work[Any]) -> Any:
            return await work(conn)

        yield Control(database, producer, project)
