"""The scheduler against the real Kafka and Postgres, its clock stepped by the test."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from rflow import storage
from rflow.codecs import TriggerRecord, decode
from rflow.engine import memory
from rflow.engine.keys import run_id
from rflow.ingress.scheduler import Moved, PostgresCursors, Scheduler, SchedulerService, TickStep
from rflow.lang import Project, load_project
from rflow.lang.model import ScheduleSpec
from rflow.settings import Settings
from rflow.storage import StorageError, schedules
from rflow.storage.schedules import Held
from rflow.streams import kafka
from rflow.streams.app import create_app
from rflow.streams.database import Database
from rflow.streams.producer import Producer
from rflow.streams.topics import Catalog
from tests.integration.harness import wait_until

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

STEPS = """
    steps:
      - id: mark
        command: { name: assert, args: { that: "${{ true }}" } }
"""


def write_project(
    path: Path, triggers: dict[str, str], extra: dict[str, str] | None = None
) -> Path:
    """A project with one trivial workflow per entry: name -> trigger (YAML flow style)."""
    text = "workflows:\n"
    for name, trigger in triggers.items():
        text += f"  {name}:\n"
        if extra and name in extra:
            text += f"    {extra[name]}\n"
        text += f"    trigger: {trigger}\n{STEPS}"
    path.write_text(text)
    return path


def schedule(cron: str, zone: str) -> str:
    return f'{{ schedule: {{ cron: "{cron}", timezone: {zone} }} }}'


def utc(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)


def every(start: datetime, end: datetime, step: timedelta) -> Iterator[datetime]:
    moment = start
    while moment <= end:
        yield moment
        moment += step


def key(moment: datetime) -> str:
    return "schedule:" + moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Fired:
    """One record on the triggers topic."""

    kafka_key: str
    partition: int
    offset: int
    record: TriggerRecord


async def fired(settings: Settings) -> list[Fired]:
    """Every record on this test's triggers topic, read to its end, by (partition, offset)."""
    topic = settings.topic_prefix + "rflow.triggers"
    count = Catalog.from_settings(settings).spec("rflow.triggers").partitions
    partitions = [TopicPartition(topic, p) for p in range(count)]
    consumer = kafka.consumer(settings, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        end = await consumer.end_offsets(partitions)
        found = []
        while any([await consumer.position(tp) < end[tp] for tp in partitions]):
            for tp, messages in (await consumer.getmany(timeout_ms=1000)).items():
                found += [
                    Fired(m.key.decode(), tp.partition, m.offset, decode(m.value, TriggerRecord))
                    for m in messages
                ]
        return sorted(found, key=lambda f: (f.partition, f.offset))
    finally:
        await consumer.stop()


def keys_by_workflow(records: list[Fired]) -> dict[str, list[str]]:
    by_workflow: dict[str, list[str]] = {}
    for item in records:
        by_workflow.setdefault(item.record.workflow, []).append(item.record.trigger_key)
    return {name: sorted(found) for name, found in by_workflow.items()}


@asynccontextmanager
async def scheduler(settings: Settings, project: Project, **kwargs) -> AsyncIterator[Scheduler]:
    """A scheduler with its own database pool and producer, as in its own process."""
    async with AsyncExitStack() as stack:
        database = await stack.enter_async_context(Database(settings))
        producer = await stack.enter_async_context(Producer(settings))
        store = kwargs.pop("store", None) or PostgresCursors(database)
        yield Scheduler(settings, project, producer, store, **kwargs)


async def cursor_of(settings: Settings, workflow: str) -> datetime | None:
    conn = await storage.connect(settings)
    async with conn:
        row = await schedules.get(conn, workflow)
    return None if row is None else row.last_fire


async def test_a_schedule_across_a_dst_change(settings, tmp_path):
    """Paris springs forward on 29 March 2026 (02:00 -> 03:00): the daily 09:00 run moves
    from 08:00 to 07:00 UTC, and the nonexistent 02:30 fires once, at 03:00 CEST."""
    project = load_project(
        write_project(
            tmp_path / "project.yaml",
            {
                "paris-nine": schedule("0 9 * * *", "Europe/Paris"),
                "paris-half-two": schedule("30 2 * * *", "Europe/Paris"),
            },
            extra={"paris-nine": 'concurrency: { group: "reports-${{ trigger.timezone }}" }'},
        ),
        {},
    )
    async with scheduler(settings, project) as paris:
        for now in every(utc(2026, 3, 28), utc(2026, 3, 30, 12), timedelta(minutes=5)):
            await paris.tick(now)

    records = await fired(settings)
    assert keys_by_workflow(records) == {
        "paris-nine": [
            key(utc(2026, 3, 28, 8)),
            key(utc(2026, 3, 29, 7)),
            key(utc(2026, 3, 30, 7)),
        ],
        "paris-half-two": [
            key(utc(2026, 3, 28, 1, 30)),
            key(utc(2026, 3, 29, 1)),
            key(utc(2026, 3, 30, 0, 30)),
        ],
    }
    by_key = {(f.record.workflow, f.record.trigger_key): f for f in records}
    gap = by_key["paris-half-two", key(utc(2026, 3, 29, 1))]
    assert gap.record.source == "schedule"
    assert gap.record.payload == {
        "cron": "30 2 * * *",
        "timezone": "Europe/Paris",
        "fire_time": "2026-03-29T03:00:00+02:00",
        "fire_time_utc": "2026-03-29T01:00:00Z",
    }
    assert gap.kafka_key == gap.record.trigger_key  # no concurrency group
    assert gap.record.received_at == utc(2026, 3, 29, 1)  # the first tick at or after it
    nine = by_key["paris-nine", key(utc(2026, 3, 29, 7))]
    assert nine.kafka_key == nine.record.group == "reports-Europe/Paris"
    assert nine.record.payload["fire_time"] == "2026-03-29T09:00:00+02:00"
    assert await cursor_of(settings, "paris-nine") == utc(2026, 3, 30, 7)


async def test_the_repeated_hour_of_a_fall_back_change(settings, tmp_path):
    """New York falls back on 1 November 2026 (02:00 EDT -> 01:00 EST): 01:30 fires once,
    every 15 minutes keeps firing every 15 minutes of real time."""
    project = load_project(
        write_project(
            tmp_path / "project.yaml",
            {
                "ny-half-one": schedule("30 1 * * *", "America/New_York"),
                "ny-quarter": schedule("*/15 * * * *", "America/New_York"),
            },
        ),
        {},
    )
    async with scheduler(settings, project) as ny:
        for now in every(utc(2026, 11, 1, 2), utc(2026, 11, 1, 8), timedelta(minutes=5)):
            await ny.tick(now)

    records = await fired(settings)
    quarters = list(every(utc(2026, 11, 1, 2, 15), utc(2026, 11, 1, 8), timedelta(minutes=15)))
    assert keys_by_workflow(records) == {
        "ny-half-one": [key(utc(2026, 11, 1, 5, 30))],
        "ny-quarter": [key(moment) for moment in quarters],
    }
    local = sorted(
        f.record.payload["fire_time"] for f in records if f.record.workflow == "ny-quarter"
    )
    assert "2026-11-01T01:30:00-04:00" in local
    assert "2026-11-01T01:30:00-05:00" in local


async def test_two_schedulers_at_the_same_times_fire_each_time_once(settings, tmp_path):
    project = load_project(
        write_project(
            tmp_path / "project.yaml",
            {
                "ny-half-two": schedule("30 2 * * *", "America/New_York"),
                "ny-half-hourly": schedule("*/30 * * * *", "America/New_York"),
            },
        ),
        {},
    )
    async with scheduler(settings, project) as first, scheduler(settings, project) as second:
        for now in every(utc(2026, 3, 8, 5), utc(2026, 3, 8, 8), timedelta(minutes=5)):
            await asyncio.gather(first.tick(now), second.tick(now))

    records = await fired(settings)
    # The cursor row serialises them: the second finds the fire already handled.
    assert keys_by_workflow(records) == {
        "ny-half-two": [key(utc(2026, 3, 8, 7))],  # 02:30 EST does not exist: 03:00 EDT
        "ny-half-hourly": [
            key(moment)
            for moment in every(utc(2026, 3, 8, 5, 30), utc(2026, 3, 8, 8), timedelta(minutes=30))
        ],
    }


class LosesTheFirstCursorWrite:
    """A cursor store whose first write after a fire fails, as if the scheduler died
    between Kafka's acknowledgement and the commit."""

    def __init__(self, inner: PostgresCursors) -> None:
        self.inner = inner
        self.lost: str | None = None

    async def update(
        self, workflow: str, trigger: str, spec: ScheduleSpec, step: TickStep
    ) -> datetime | None:
        async def crashing(row: Held) -> Moved | None:
            moved = await step(row)
            if self.lost is None and row.cursor is not None and moved is not None:
                self.lost = workflow
                raise StorageError("connection lost before commit")
            return moved

        return await self.inner.update(workflow, trigger, spec, crashing)


async def test_a_firing_produced_twice_has_one_key_and_one_table_entry(
    settings, tmp_path, worker_factory
):
    triggers = {
        "ny-half-two": schedule("30 2 * * *", "America/New_York"),
        "ny-hourly": schedule("@hourly", "America/New_York"),
    }
    project = load_project(write_project(tmp_path / "project.yaml", triggers), {})
    ticks = list(every(utc(2026, 3, 8, 5), utc(2026, 3, 8, 8), timedelta(minutes=5)))
    async with AsyncExitStack() as stack:
        database = await stack.enter_async_context(Database(settings))
        crashing = LosesTheFirstCursorWrite(PostgresCursors(database))
        first = await stack.enter_async_context(scheduler(settings, project, store=crashing))
        second = await stack.enter_async_context(scheduler(settings, project))
        for now in ticks:
            await first.tick(now)
            await second.tick(now + timedelta(seconds=1))
    assert crashing.lost == "ny-hourly"  # its 06:00Z fire, at the 06:00Z tick

    records = await fired(settings)
    expected = {
        "ny-half-two": [key(utc(2026, 3, 8, 7))],
        "ny-hourly": [key(utc(2026, 3, 8, hour)) for hour in (6, 7, 8)],
    }
    assert {name: sorted(set(found)) for name, found in keys_by_workflow(records).items()} == (
        expected
    )
    twice = [f for f in records if f.record.trigger_key == key(utc(2026, 3, 8, 6))]
    assert [f.record.received_at for f in twice] == [utc(2026, 3, 8, 6), utc(2026, 3, 8, 6, 0, 1)]
    assert len(records) == 5

    # The worker's gate keeps one entry per workflow and trigger key: the firing's runs and the
    # digest of its record (the same for both deliveries of a fire: they differ only in when
    # each copy was made). Its project names the same workflows with manual triggers, so that
    # it runs no scheduler of its own.
    worker_project = write_project(
        tmp_path / "worker.yaml", dict.fromkeys(triggers, "{ manual: {} }")
    )
    worker = worker_factory(project_path=worker_project)
    await worker.wait_ready()
    for item in records:
        path = f"/rflow/triggers/{item.record.workflow}:{item.record.trigger_key}/"

        async def entry(path: str = path) -> dict | None:
            status, body = await worker.get(path)
            return body if status == 200 and memory.is_remembered(body) else None

        stored = await wait_until(entry, timeout=30, what=f"{path} on the worker")
        deliveries = [
            memory.digest(f.record.model_dump(mode="json"))
            for f in records
            if (f.record.workflow, f.record.trigger_key)
            == (item.record.workflow, item.record.trigger_key)
        ]
        assert stored["digest"] == deliveries[0] and set(deliveries) == {deliveries[0]}
        assert stored["runs"] == [run_id(item.record.workflow, item.record.trigger_key)]


async def test_a_restart_after_three_hours_down_fires_each_schedule_once(settings, tmp_path):
    project = load_project(
        write_project(
            tmp_path / "project.yaml",
            {
                "ny-half-one": schedule("30 1 * * *", "America/New_York"),
                "ny-quarter": schedule("*/15 * * * *", "America/New_York"),
            },
        ),
        {},
    )
    async with scheduler(settings, project) as before:
        for now in every(utc(2026, 11, 1, 4), utc(2026, 11, 1, 5, 1), timedelta(minutes=1)):
            await before.tick(now)
    # Down from 05:01Z (01:01 EDT) to 08:01:30Z (03:01 EST), through the repeated hour.
    assert await cursor_of(settings, "ny-quarter") == utc(2026, 11, 1, 5)
    async with scheduler(settings, project) as after:
        back = utc(2026, 11, 1, 8, 1, 30)
        assert len(await after.tick(back)) == 2
        assert await after.tick(back + timedelta(seconds=20)) == []
        assert [r.trigger_key for r in await after.tick(utc(2026, 11, 1, 8, 15))] == [
            key(utc(2026, 11, 1, 8, 15))
        ]

    records = await fired(settings)
    assert keys_by_workflow(records) == {
        # 01:30 EDT (05:30Z) was missed: it fires once on return.
        "ny-half-one": [key(utc(2026, 11, 1, 5, 30))],
        "ny-quarter": [
            key(m)
            for m in every(utc(2026, 11, 1, 4, 15), utc(2026, 11, 1, 5), timedelta(minutes=15))
        ]
        + [key(utc(2026, 11, 1, 8)), key(utc(2026, 11, 1, 8, 15))],
    }


class SteppingClock:
    """Reads ``start`` once, then ``later`` ever after: one tick starts the cursors, the
    next finds a fire due."""

    def __init__(self, start: datetime, later: datetime) -> None:
        self.readings = [start]
        self.later = later

    def __call__(self) -> datetime:
        return self.readings.pop(0) if self.readings else self.later


async def test_the_service_runs_the_scheduler_until_stopped(settings, tmp_path):
    project = load_project(
        write_project(
            tmp_path / "project.yaml",
            {"paris-nine": schedule("0 9 * * *", "Europe/Paris"), "by-hand": "{ manual: {} }"},
        ),
        {},
    )
    app = create_app(settings, project)
    clock = SteppingClock(utc(2026, 3, 29, 6), utc(2026, 3, 29, 7, 0, 5))
    service = SchedulerService(app, clock=clock)
    async with app.rflow.database:
        await service.start()
        try:

            async def fire_produced() -> list[Fired]:
                return await fired(settings)

            records = await wait_until(fire_produced, timeout=30, what="the scheduled fire")
        finally:
            await service.stop()
    assert [f.record.trigger_key for f in records] == [key(utc(2026, 3, 29, 7))]
    assert service.scheduler is not None
    assert list(service.scheduler.workflows) == ["paris-nine"]


async def test_a_disabled_schedule_fires_nothing_and_does_not_catch_up_when_enabled(
    settings, tmp_path
):
    from rflow import schedules as view

    project = load_project(
        write_project(
            tmp_path / "project.yaml",
            {"quarterly": schedule("*/15 * * * *", "UTC"), "by-hand": "{ manual: {} }"},
        ),
        {},
    )
    fires: list[str] = []
    async with scheduler(settings, project) as ticking:
        assert await ticking.tick(utc(2026, 5, 1, 10, 0, 30)) == []  # first sight
        fires += [r.trigger_key for r in await ticking.tick(utc(2026, 5, 1, 10, 15, 2))]

        conn = await storage.connect(settings)
        async with conn:
            done = await view.disable(
                conn, project, "quarterly", None, by="operator", reason="maintenance"
            )
            assert done["enabled"] is False
            with pytest.raises(view.ScheduleError, match="disabled already"):
                await view.disable(conn, project, "quarterly", None, by="operator", reason="x")
            [row] = await view.listing(conn, project, utc(2026, 5, 1, 10, 20))
            assert (row["state"], row["next_fire"], row["disabled_reason"]) == (
                "disabled by operator",
                None,
                "maintenance",
            )
        # Disabled through 10:30, 10:45 and 11:00: nothing fires, the cursor passes them.
        for now in every(utc(2026, 5, 1, 10, 16), utc(2026, 5, 1, 11, 4), timedelta(minutes=4)):
            assert await ticking.tick(now) == []
        conn = await storage.connect(settings)
        async with conn:
            stored = await schedules.get(conn, "quarterly")
        assert (stored.firing, stored.last_fired) == (False, utc(2026, 5, 1, 10, 15))

        conn = await storage.connect(settings)
        async with conn:
            done = await view.enable(conn, project, "quarterly", None, at=utc(2026, 5, 1, 11, 5))
            assert done["next_fire"] == utc(2026, 5, 1, 11, 15)
            with pytest.raises(view.ScheduleError, match="was not disabled"):
                await view.enable(conn, project, "quarterly", None, at=utc(2026, 5, 1, 11, 6))
        # Enabled at 11:05: the fires skipped while disabled never fire...
        assert await ticking.tick(utc(2026, 5, 1, 11, 5, 10)) == []
        fires += [r.trigger_key for r in await ticking.tick(utc(2026, 5, 1, 11, 15, 1))]
    # ...while a fire missed with no scheduler running (12:00, 12:15) still fires once.
    async with scheduler(settings, project) as back:
        fires += [r.trigger_key for r in await back.tick(utc(2026, 5, 1, 12, 20))]

    assert fires == [
        key(utc(2026, 5, 1, 10, 15)),
        key(utc(2026, 5, 1, 11, 15)),
        key(utc(2026, 5, 1, 12, 15)),
    ]
    assert keys_by_workflow(await fired(settings)) == {"quarterly": fires}


async def test_enabled_false_fires_nothing_and_a_deploy_enabling_it_does_not_catch_up(
    settings, tmp_path
):
    from rflow import schedules as view

    off = load_project(
        write_project(
            tmp_path / "off.yaml",
            {"nightly": '{ schedule: { cron: "0 2 * * *", enabled: false } }'},
        ),
        {},
    )
    on = load_project(
        write_project(tmp_path / "on.yaml", {"nightly": schedule("0 2 * * *", "UTC")}), {}
    )
    async with scheduler(settings, off) as before:
        for day in (1, 2, 3):
            assert await before.tick(utc(2026, 5, day, 1)) == []
            assert await before.tick(utc(2026, 5, day, 2, 0, 1)) == []
    conn = await storage.connect(settings)
    async with conn:
        [row] = await view.listing(conn, off, utc(2026, 5, 3))
        assert (row["state"], row["disabled_by"], row["next_fire"]) == (
            "disabled (definition)",
            "definition",
            None,
        )
        with pytest.raises(view.ScheduleError, match=r"disabled by its definition"):
            await view.enable(conn, off, "nightly", None, at=utc(2026, 5, 3))
    # A deploy enables it on the 4th at 03:00; the 4th's 02:00 passed while it was off.
    async with scheduler(settings, on) as after:
        assert await after.tick(utc(2026, 5, 4, 3)) == []
        assert [r.trigger_key for r in await after.tick(utc(2026, 5, 5, 2, 0, 2))] == [
            key(utc(2026, 5, 5, 2))
        ]
    assert keys_by_workflow(await fired(settings)) == {"nightly": [key(utc(2026, 5, 5, 2))]}


SCHEDULED_CHECK = """
workflows:
  nightly:
    triggers:
      - schedule: { cron: "0 0 1 1 *" }
      - { id: backup, schedule: { cron: "30 0 1 1 *" } }
    steps:
      - id: check
        command: { name: assert, args: { that: "${{ trigger.ok }}", message: "not ok" } }
"""


async def test_schedules_ls_shows_failures_and_last_error_and_the_cli_switches_them(
    settings, worker_factory, tmp_path
):
    from rflow.engine.keys import run_id
    from rflow.streams.producer import produce_trigger
    from rflow.triggering import trigger_record
    from tests.integration.test_api import call
    from tests.integration.test_operations import rflow
    from tests.integration.test_runs import settled_run

    path = tmp_path / "project.yaml"
    path.write_text(SCHEDULED_CHECK)
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    project = load_project(path, {})

    async def scheduled_run(trigger_key: str, ok: bool) -> dict:
        # A firing as the scheduler produces it, with what the step checks in its payload.
        record = trigger_record(
            "nightly",
            project.workflows["nightly"],
            source="schedule",
            trigger_key=trigger_key,
            payload={"ok": ok},
            received_at=datetime.now(UTC),
        )
        await produce_trigger(settings, record)
        return await settled_run(settings, run_id("nightly", trigger_key))

    def listed() -> dict[str, dict]:
        answer = rflow(settings, "schedules", "ls", "--json")
        assert answer.returncode == 0, answer.stderr
        return {row["trigger"]: row for row in json.loads(answer.stdout)}

    assert (await scheduled_run("schedule:2031-01-01T00:00:00Z", False))["status"] == "failed"
    assert (await scheduled_run("schedule:2032-01-01T00:00:00Z", False))["status"] == "failed"
    assert (await scheduled_run("schedule@backup:2031-01-01T00:30:00Z", True))["status"] == (
        "succeeded"
    )
    rows = listed()
    assert (rows["schedule"]["consecutive_failures"], rows["schedule"]["last_error"]) == (
        2,
        "not ok",
    )
    assert (rows["backup"]["consecutive_failures"], rows["backup"]["last_error"]) == (0, None)
    assert rows["schedule"]["state"] == "enabled" and rows["schedule"]["next_fire"] is not None

    # A success resets the count; the last error stays for whoever looks.
    assert (await scheduled_run("schedule:2033-01-01T00:00:00Z", True))["status"] == "succeeded"
    status, body = await call(worker, "GET", "/api/schedules")
    by_trigger = {row["trigger"]: row for row in body["schedules"]}
    assert status == 200
    assert (
        by_trigger["schedule"]["consecutive_failures"],
        by_trigger["schedule"]["last_error"],
    ) == (
        0,
        "not ok",
    )

    # Disable and enable: by the CLI, and by the API for the other schedule.
    off = rflow(settings, "schedules", "disable", "nightly")
    assert off.returncode != 0 and "has 2 schedules (schedule, backup)" in off.stderr, off
    off = rflow(settings, "schedules", "disable", "nightly", "--trigger", "schedule")
    assert off.returncode == 0 and "disabled schedule schedule of nightly" in off.stdout, off
    again = rflow(settings, "schedules", "disable", "nightly", "--trigger", "schedule")
    assert again.returncode != 0 and "disabled already" in again.stderr
    assert listed()["schedule"]["state"] == "disabled by operator"
    status, answer = await call(worker, "POST", "/api/schedules/nightly/backup/disable", {})
    assert (status, answer["enabled"]) == (200, False), answer
    assert listed()["backup"]["disabled_by"] == "operator"
    status, answer = await call(worker, "POST", "/api/schedules/nightly/nope/disable", {})
    assert status == 404 and "no schedule 'nope'" in answer["error"]
    status, answer = await call(worker, "POST", "/api/schedules/nightly/backup/enable", {})
    assert (status, answer["enabled"]) == (200, True), answer
    on = rflow(settings, "schedules", "enable", "nightly", "--trigger", "schedule")
    assert on.returncode == 0 and "next fire" in on.stdout, on
    assert {row["state"] for row in listed().values()} == {"enabled"}
    missing = rflow(settings, "schedules", "enable", "nightly", "--trigger", "schedule")
    assert missing.returncode != 0 and "nothing to enable" in missing.stderr
