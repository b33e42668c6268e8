"""The scheduler: fires schedule-triggered workflows, each fire time once.

Every worker may run one; they agree without talking to each other. For each workflow
whose trigger is a schedule, a tick takes the workflow's cursor row in Postgres (see
:mod:`rflow.storage.schedules`), asks :func:`rflow.ingress.schedule.due` what is due,
produces that firing to the triggers topic, and only once Kafka has acknowledged it
moves the cursor past it, in the same transaction. A crash between the two produces
the same firing again on the next tick, under the same trigger key
(``schedule:<UTC fire time>``), and the intake agent keeps the first; a second
scheduler waiting on the row finds the cursor already moved and fires nothing.

Between fires a tick costs no I/O: the next fire time of each schedule is remembered,
and the database is consulted only once it has passed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from rflow.codecs import TriggerRecord
from rflow.deployment import Derived, ProjectAt, project_reader
from rflow.failures import RflowError
from rflow.ingress import schedule
from rflow.ingress.service import IngressService
from rflow.lang import Project, Workflow
from rflow.lang.model.triggers import ScheduleSpec, ScheduleTrigger
from rflow.settings import Settings
from rflow.storage import StorageError, schedules
from rflow.streams.producer import ProduceError
from rflow.triggering import trigger_record

if TYPE_CHECKING:
    import psycopg

    from rflow.streams.app import RflowApp, Runtime
    from rflow.streams.database import Database

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Step = Callable[[datetime | None], Awaitable[datetime | None]]

MAX_SLEEP = 1.0
"""Seconds :meth:`Scheduler.run` sleeps at most between ticks, so that a clock jump or a
cursor moved by another worker is noticed promptly."""

_RETRY_DELAYS = (1, 2, 4, 8, 16, 30)


def utc_now() -> datetime:
    """The wall clock, in UTC: the default clock of a :class:`Scheduler`."""
    return datetime.now(UTC)


def _scheduled_workflows(project: Project | None) -> dict[str, Workflow]:
    return {name: project.workflows[name] for name in scheduled(project)} if project else {}


def scheduled(project: Project | None) -> dict[str, ScheduleSpec]:
    """The workflows of ``project`` whose trigger is a schedule, by name."""
    if project is None:
        return {}
    return {
        name: workflow.trigger.schedule
        for name, workflow in project.workflows.items()
        if isinstance(workflow.trigger, ScheduleTrigger)
    }


class TriggerSink(Protocol):
    """Where firings go: :class:`~rflow.streams.producer.Producer` in production."""

    async def trigger(self, record: TriggerRecord) -> tuple[int, int]:
        """Produce ``record``; return once the broker has acknowledged it."""
        ...


class CursorStore(Protocol):
    """The cursors of all schedules, shared by every scheduler."""

    async def update(self, workflow: str, spec: ScheduleSpec, step: Step) -> datetime | None:
        """Run ``step`` on ``workflow``'s cursor while no other scheduler can, and store
        the cursor it returns (if later). Returns the cursor as stored afterwards.

        ``step`` may be run again after a lost answer: it must be idempotent.
        """
        ...


class PostgresCursors:
    """:class:`CursorStore` on the ``schedule_cursors`` table, through ``database``
    (retried while Postgres is unavailable)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def update(self, workflow: str, spec: ScheduleSpec, step: Step) -> datetime | None:
        async def work(conn: psycopg.AsyncConnection) -> datetime | None:
            async with schedules.held(conn, workflow) as cursor:
                moved = await step(cursor)
                if moved is None:
                    return cursor
                if cursor is None:
                    await schedules.start(conn, workflow, spec.cron, spec.timezone, moved)
                elif moved > cursor:
                    await schedules.advance(conn, workflow, spec.cron, spec.timezone, moved)
                    return moved
            # A racing scheduler may have created the cursor first: report the one kept.
            stored = await schedules.get(conn, workflow)
            return None if stored is None else stored.last_fire

        return await self.database.run(work, what=f"the schedule cursor of {workflow}")


@dataclass
class _Known:
    """What a scheduler remembers of one schedule between ticks."""

    wake: datetime | None
    """Nothing can be due before this instant (``None``: the schedule never fires again)."""
    spec: ScheduleSpec
    """The schedule this was worked out for (a deploy may change it)."""
    failures: int = 0


class Scheduler:
    """Fires the schedule-triggered workflows of ``project`` through ``producer``.

    ``store`` holds the cursors (:class:`PostgresCursors`); ``clock`` gives the current
    instant (aware), and tests pass one they step. ``settings`` are the process's.
    ``project`` is a project, or a function answering the current one (a worker's, which
    a deploy changes): every tick fires the schedules of the project it answers then, so
    a deployed schedule starts firing and a removed one stops, each within a tick. A
    schedule seen for the first time, or again after its removal, fires from now on
    (:func:`~rflow.ingress.schedule.due`).
    """

    def __init__(
        self,
        settings: Settings,
        project: Project | ProjectAt | None,
        producer: TriggerSink,
        store: CursorStore,
        clock: Clock = utc_now,
    ) -> None:
        self.settings = settings
        self._workflows = Derived(project_reader(project), _scheduled_workflows)
        self.producer = producer
        self.store = store
        self.clock = clock
        self._known: dict[str, _Known] = {}

    @property
    def workflows(self) -> dict[str, Workflow]:
        """The schedule-triggered workflows of the current project, by name."""
        return self._workflows()

    async def tick(self, now: datetime) -> list[TriggerRecord]:
        """One pass at ``now``: produce every due firing, move the cursors; returns the
        firings produced.

        A firing Kafka or Postgres refused is retried at a later tick (after a short
        backoff), when the policy of :func:`~rflow.ingress.schedule.due` applies again.
        """
        produced: list[TriggerRecord] = []
        workflows = self.workflows
        for name in self._known.keys() - workflows.keys():
            del self._known[name]  # removed by a deploy: it fires no more
        for name, workflow in workflows.items():
            spec = workflow.trigger.schedule
            known = self._known.get(name)
            if known is not None and known.spec != spec:
                known = None  # the deploy changed it: work out its next fire again
            if known is not None and (known.wake is None or now < known.wake):
                continue
            try:
                cursor = await self._handle(name, workflow, spec, now, produced)
            except (ProduceError, StorageError) as exc:
                failures = 1 if known is None else known.failures + 1
                delay = _RETRY_DELAYS[min(failures, len(_RETRY_DELAYS)) - 1]
                log.warning(
                    "schedule of %s not handled at %s, retrying in %ss: %s",
                    name,
                    now.isoformat(),
                    delay,
                    exc,
                )
                self._known[name] = _Known(now + timedelta(seconds=delay), spec, failures)
                continue
            wake = now if cursor is None else schedule.next_fire(spec.cron, spec.timezone, cursor)
            self._known[name] = _Known(wake, spec)
        return produced

    async def _handle(
        self,
        name: str,
        workflow: Workflow,
        spec: ScheduleSpec,
        now: datetime,
        produced: list[TriggerRecord],
    ) -> datetime | None:
        """Fire what is due for ``name`` under its cursor; returns the cursor afterwards."""

        async def step(cursor: datetime | None) -> datetime | None:
            fire, moved = schedule.due(spec.cron, spec.timezone, cursor, now)
            if fire is not None:
                try:
                    record = trigger_record(
                        name,
                        workflow,
                        source="schedule",
                        trigger_key=schedule.fire_key(fire),
                        payload=schedule.payload(spec.cron, spec.timezone, fire),
                        received_at=now,
                    )
                except RflowError as exc:
                    # The firing cannot be ordered (its concurrency group does not
                    # evaluate); retrying cannot change that, so it is passed over loudly.
                    log.error("schedule of %s: fire %s dropped: %s", name, fire.isoformat(), exc)
                else:
                    await self.producer.trigger(record)
                    produced.append(record)
            return None if moved == cursor else moved

        return await self.store.update(name, spec, step)

    def next_wake(self) -> datetime | None:
        """The earliest instant a schedule may be due, as far as this scheduler knows."""
        return min((k.wake for k in self._known.values() if k.wake is not None), default=None)

    async def run(self) -> None:
        """Tick until cancelled, sleeping until the next fire time (at most
        :data:`MAX_SLEEP` seconds) between ticks."""
        following: set[str] = set()
        while True:
            names = set(self.workflows)
            if names != following:
                log.info("scheduler fires %s", ", ".join(sorted(names)) or "no schedule")
                following = names
            await self.tick(self.clock())
            wake = self.next_wake()
            delay = MAX_SLEEP
            if wake is not None:
                delay = min(MAX_SLEEP, max(0.0, (wake - self.clock()).total_seconds()))
            await asyncio.sleep(delay)


class SchedulerService(IngressService):
    """Runs a :class:`Scheduler` for the schedules of a Faust app's current project."""

    what = "the scheduler"

    def __init__(self, app: RflowApp, clock: Clock = utc_now, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.clock = clock

    @property
    def scheduler(self) -> Scheduler | None:
        return self.loop_runner  # type: ignore[return-value]

    def build(self, runtime: Runtime, producer: TriggerSink) -> Scheduler:
        return Scheduler(
            runtime.settings,
            lambda: runtime.project,
            producer,
            PostgresCursors(runtime.database),
            clock=self.clock,
        )
