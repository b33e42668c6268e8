"""The scheduler: fires the schedule triggers of workflows, each fire time once.

Every worker may run one; they agree without talking to each other. For each schedule
(a workflow's schedule trigger, named by its id), a tick takes the schedule's cursor row
in Postgres (see :mod:`rflow.storage.schedules`), asks
:func:`rflow.ingress.schedule.due` what is due, produces that firing to the triggers
topic, and only once Kafka has acknowledged it moves the cursor past it, in the same
transaction. A crash between the two produces the same firing again on the next tick,
under the same trigger key (``schedule:<UTC fire time>``, or ``schedule@<id>:...`` for a
workflow's other schedules), and the intake agent keeps the first; a second scheduler
waiting on the row finds the cursor already moved and fires nothing.

A disabled schedule (``enabled: false`` in its definition, or ``rflow schedules
disable``) passes its fire times over: the cursor moves past them and nothing is
produced. Found enabled again without an operator's ``enable`` (a deploy turned it back
on), it starts from the tick that finds it so, as a new schedule does: a fire time
skipped while disabled never fires. A fire missed while no scheduler ran still fires
once, as the latest.

Between fires a tick costs no I/O: the next fire time of each schedule is remembered,
and the database is consulted only once it has passed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from rflow.codecs import TriggerRecord
from rflow.deployment import Derived, ProjectAt, project_reader
from rflow.failures import RflowError
from rflow.ingress import schedule
from rflow.ingress.service import IngressService
from rflow.lang import Project, Workflow
from rflow.lang.model.triggers import ScheduleSpec
from rflow.settings import Settings
from rflow.storage import StorageError, schedules
from rflow.storage.schedules import Held
from rflow.streams.producer import ProduceError
from rflow.triggering import trigger_record

if TYPE_CHECKING:
    import psycopg

    from rflow.streams.app import RflowApp, Runtime
    from rflow.streams.database import Database

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

MAX_SLEEP = 1.0
"""Seconds :meth:`Scheduler.run` sleeps at most between ticks, so that a clock jump or a
cursor moved by another worker is noticed promptly."""

_RETRY_DELAYS = (1, 2, 4, 8, 16, 30)


def utc_now() -> datetime:
    """The wall clock, in UTC: the default clock of a :class:`Scheduler`."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class Scheduled:
    """One schedule of the current project: a workflow's schedule trigger."""

    workflow_name: str
    trigger_id: str
    workflow: Workflow = field(repr=False, compare=False)
    spec: ScheduleSpec

    @property
    def key(self) -> tuple[str, str]:
        return (self.workflow_name, self.trigger_id)


def schedules_of(project: Project | None) -> dict[tuple[str, str], Scheduled]:
    """Every schedule trigger of ``project``, by (workflow, trigger id)."""
    found: dict[tuple[str, str], Scheduled] = {}
    for name, workflow in (project.workflows if project else {}).items():
        for trigger_id, trigger in workflow.triggers_of("schedule"):
            found[(name, trigger_id)] = Scheduled(name, trigger_id, workflow, trigger.schedule)
    return found


def scheduled(project: Project | None) -> dict[str, list[ScheduleSpec]]:
    """The workflows of ``project`` with a schedule trigger, by name, with their schedules."""
    found: dict[str, list[ScheduleSpec]] = {}
    for item in schedules_of(project).values():
        found.setdefault(item.workflow_name, []).append(item.spec)
    return found


class TriggerSink(Protocol):
    """Where firings go: :class:`~rflow.streams.producer.Producer` in production."""

    async def trigger(self, record: TriggerRecord) -> tuple[int, int]:
        """Produce ``record``; return once the broker has acknowledged it."""
        ...


@dataclass(frozen=True)
class Moved:
    """What a tick decided for one schedule: the cursor to store, whether a fire at it
    was produced, and whether the schedule is firing (enabled)."""

    cursor: datetime
    fired: bool
    firing: bool


TickStep = Callable[[Held], Awaitable[Moved | None]]


class CursorStore(Protocol):
    """The cursors of all schedules, shared by every scheduler."""

    async def update(
        self, workflow: str, trigger: str, spec: ScheduleSpec, step: TickStep
    ) -> datetime | None:
        """Run ``step`` on the cursor of ``workflow``'s schedule ``trigger`` while no
        other scheduler can, and store what it decides (a cursor only moves forward).
        Returns the cursor as stored afterwards.

        ``step`` may be run again after a lost answer: it must be idempotent.
        """
        ...


class PostgresCursors:
    """:class:`CursorStore` on the ``schedule_cursors`` table, through ``database``
    (retried while Postgres is unavailable)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def update(
        self, workflow: str, trigger: str, spec: ScheduleSpec, step: TickStep
    ) -> datetime | None:
        async def work(conn: psycopg.AsyncConnection) -> datetime | None:
            async with schedules.held(conn, workflow, trigger) as row:
                moved = await step(row)
                if moved is None:
                    return row.cursor
                if row.cursor is None:
                    await schedules.start(
                        conn,
                        workflow,
                        spec.cron,
                        spec.timezone,
                        moved.cursor,
                        trigger=trigger,
                        firing=moved.firing,
                    )
                else:
                    await schedules.advance(
                        conn,
                        workflow,
                        spec.cron,
                        spec.timezone,
                        moved.cursor,
                        trigger=trigger,
                        fired=moved.fired,
                        firing=moved.firing,
                    )
                    return max(row.cursor, moved.cursor)
            # A racing scheduler may have created the cursor first: report the one kept.
            stored = await schedules.get(conn, workflow, trigger)
            return None if stored is None else stored.last_fire

        return await self.database.run(work, what=f"the cursor of schedule {trigger} of {workflow}")


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
        self._schedules = Derived(project_reader(project), schedules_of)
        self.producer = producer
        self.store = store
        self.clock = clock
        self._known: dict[str, _Known] = {}

    @property
    def schedules(self) -> dict[tuple[str, str], Scheduled]:
        """The schedules of the current project, by (workflow, trigger id)."""
        return self._schedules()

    @property
    def workflows(self) -> dict[str, Workflow]:
        """The workflows of the current project with a schedule trigger, by name."""
        return {item.workflow_name: item.workflow for item in self.schedules.values()}

    async def tick(self, now: datetime) -> list[TriggerRecord]:
        """One pass at ``now``: produce every due firing, move the cursors; returns the
        firings produced.

        A firing Kafka or Postgres refused is retried at a later tick (after a short
        backoff), when the policy of :func:`~rflow.ingress.schedule.due` applies again.
        """
        produced: list[TriggerRecord] = []
        current = self.schedules
        for key in self._known.keys() - current.keys():
            del self._known[key]  # removed by a deploy: it fires no more
        for key, item in current.items():
            spec = item.spec
            known = self._known.get(key)
            if known is not None and known.spec != spec:
                known = None  # the deploy changed it: work out its next fire again
            if known is not None and (known.wake is None or now < known.wake):
                continue
            try:
                cursor = await self._handle(item, now, produced)
            except (ProduceError, StorageError) as exc:
                failures = 1 if known is None else known.failures + 1
                delay = _RETRY_DELAYS[min(failures, len(_RETRY_DELAYS)) - 1]
                log.warning(
                    "schedule %s of %s not handled at %s, retrying in %ss: %s",
                    item.trigger_id,
                    item.workflow_name,
                    now.isoformat(),
                    delay,
                    exc,
                )
                self._known[key] = _Known(now + timedelta(seconds=delay), spec, failures)
                continue
            wake = now if cursor is None else schedule.next_fire(spec.cron, spec.timezone, cursor)
            self._known[key] = _Known(wake, spec)
        return produced

    async def _handle(
        self, item: Scheduled, now: datetime, produced: list[TriggerRecord]
    ) -> datetime | None:
        """Fire what is due for ``item`` under its cursor; returns the cursor afterwards."""
        spec, name = item.spec, item.workflow_name

        async def step(row: Held) -> Moved | None:
            firing = spec.enabled and row.disabled_by is None
            if row.cursor is None or (firing and not row.firing):
                # First sight, or firing again after a disabled spell that no operator's
                # enable ended: from now on, nothing of the past.
                return Moved(now, fired=False, firing=firing)
            fire, moved = schedule.due(spec.cron, spec.timezone, row.cursor, now)
            if fire is not None and firing:
                try:
                    record = trigger_record(
                        name,
                        item.workflow,
                        source="schedule",
                        trigger_key=schedule.fire_key(fire, item.trigger_id),
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
                    return Moved(moved, fired=True, firing=True)
            if moved == row.cursor and firing == row.firing:
                return None
            return Moved(moved, fired=False, firing=firing)

        return await self.store.update(name, item.trigger_id, spec, step)

    def next_wake(self) -> datetime | None:
        """The earliest instant a schedule may be due, as far as this scheduler knows."""
        return min((k.wake for k in self._known.values() if k.wake is not None), default=None)

    async def run(self) -> None:
        """Tick until cancelled, sleeping until the next fire time (at most
        :data:`MAX_SLEEP` seconds) between ticks."""
        following: set[str] = set()
        while True:
            names = {
                name if trigger == "schedule" else f"{name} ({trigger})"
                for name, trigger in self.schedules
            }
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
