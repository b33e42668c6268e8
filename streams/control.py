"""Operator actions on runs: answer a wait, cancel a run, retry a dead-lettered run (and,
through :attr:`Control.sends`, on pending sends: :mod:`rflow.streams.send_actions`).

Each writes what must be durable first (the wait's answer, first answer wins), then
produces the record keyed like the run, so its owner applies it in order. The CLI acts
with a connection and a producer of its own (:func:`connected`); a worker's HTTP API
with the worker's database and producer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import psycopg

from rflow import storage
from rflow.codecs import Record, RunEvent, TriggerRecord
from rflow.engine import CancelRequested, WaitResolved
from rflow.engine.keys import run_id as run_id_of
from rflow.lang import Project
from rflow.settings import Settings
from rflow.storage import runs, sends, waits
from rflow.streams.producer import Producer
from rflow.triggering import trigger_record

if TYPE_CHECKING:
    from rflow.streams.send_actions import SendActions

T = TypeVar("T")
Work = Callable[[psycopg.AsyncConnection], Awaitable[T]]


class ControlError(Exception):
    """The action does not apply (no such run, no open wait, already answered...).

    ``status`` is the HTTP status the API answers with.
    """

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


class Sender(Protocol):
    async def send(self, topic: str, key: str, record: Record) -> tuple[int, int]: ...

    async def trigger(self, record: TriggerRecord) -> tuple[int, int]: ...


class Control:
    """Operator actions over ``database`` (runs work on a connection) and ``producer``."""

    def __init__(
        self,
        database: Callable[[Work[Any]], Awaitable[Any]],
        producer: Sender,
        project: Project | None = None,
    ) -> None:
        self.database = database
        self.producer = producer
        self.project = project

    @property
    def sends(self) -> SendActions:
        """The actions on pending sends, over the same database and producer."""
        from rflow.streams.send_actions import SendActions

        return SendActions(self.database, self.producer)

    async def answer(self, run_id: str, step: str | None, payload: dict[str, Any]) -> dict:
        """Answer the open wait of ``run_id`` (at ``step`` if given); the first answer wins."""

        async def resolve(conn: psycopg.AsyncConnection) -> tuple[dict, dict | None]:
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
            if "decision" in payload and wait["kind"] != "approval":
                raise ControlError(
                    f"step {wait['path']} of run {run_id} waits for a {wait['kind']}, "
                    "not an approval"
                )
            return wait, await waits.resolve(conn, wait["wait_id"], payload, datetime.now(UTC))

        wait, resolved = await self.database(resolve)
        if resolved is None:
            raise ControlError(f"the wait of run {run_id} at {wait['path']} was answered already")
        event = WaitResolved(
            run_id=run_id, path=wait["path"], wait_id=wait["wait_id"], payload=payload
        )
        await self.producer.send("rflow.runs", resolved["partition_key"], RunEvent(event=event))
        return {"run_id": run_id, "step": wait["path"], "answer": payload}

    async def cancel(self, run_id: str, reason: str) -> dict[str, Any]:
        """Ask the run to stop at its next step boundary (a send in flight is never cut off:
        ``pending_sends`` names the run's unsettled sends, which ``rflow sends cancel``
        stops sooner)."""
        run = await self._run(run_id)
        if run["settled_at"] is not None:
            raise ControlError(f"run {run_id} is already {run['status']}")
        key = run["group_key"] if run["group_key"] is not None else run["trigger_key"]
        event = CancelRequested(run_id=run_id, reason=reason)
        await self.producer.send("rflow.runs", key, RunEvent(event=event))
        pending = await self.database(lambda conn: sends.open_of_run(conn, run_id))
        return {"run_id": run_id, "cancel_requested": reason, "pending_sends": pending}

    async def retry(self, run_id: str) -> dict[str, Any]:
        """Fire a dead-lettered run's trigger again, as a new run linked to the old one.

        The new firing's key is derived from the old run, so retrying twice (or from two
        places at once) starts one run; the dead-letter entry records its id.
        """
        run = await self._run(run_id)
        dead = run.get("dead")
        if dead is None:
            raise ControlError(
                f"run {run_id} is {run['status']}, not dead-lettered: only runs in the "
                "dead-letter queue can be retried"
            )
        if dead["retried_as"]:
            return {"run_id": run_id, "retried_as": dead["retried_as"]}
        if run["matrix"]:
            raise ControlError(
                f"run {run_id} is one combination of a matrix: fire its workflow again instead"
            )
        workflow = self.project.workflows.get(run["workflow"]) if self.project else None
        if workflow is None:
            raise ControlError(f"workflow {run['workflow']!r} is not in this project", 404)
        key = f"{run['trigger_key']}:retry-of:{run_id}"
        record = trigger_record(
            run["workflow"],
            workflow,
            source="manual",
            trigger_key=key,
            payload=run["trigger"] or {},
            received_at=datetime.now(UTC),
        )
        await self.producer.trigger(record)
        new = run_id_of(run["workflow"], key)
        await self.database(lambda conn: runs.mark_retried(conn, run_id, new))
        return {"run_id": run_id, "retried_as": new}

    async def _run(self, run_id: str) -> dict[str, Any]:
        run = await self.database(lambda conn: runs.get_run(conn, run_id))
        if run is None:
            raise ControlError(f"no run {run_id}", 404)
        return run


@asynccontextmanager
async def connected(settings: Settings, project: Project | None = None) -> AsyncIterator[Control]:
    """A :class:`Control` on a connection and a producer of its own (the CLI's case)."""
    conn = await storage.connect(settings)
    async with conn, Producer(settings) as producer:

        async def database(work: Work[Any]) -> Any:
            return await work(conn)

        yield Control(database, producer, project)
