"""Workers as one consumer group: grow from one worker to three and back under steady load.

Every firing must start exactly one run that settles, each concurrency group's runs must
start in the order they were fired, and nothing may be left unsettled, while the
partitions move between workers twice. The load quickens while workers join and leave,
so that a group's firings are a fraction of a second apart when its partition moves.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from rflow import storage
from rflow.engine.keys import run_id
from rflow.lang import load_project
from rflow.settings import Settings
from rflow.storage import runs
from rflow.streams import kafka
from rflow.streams.producer import ProduceError, Producer
from rflow.triggering import trigger_record
from tests.integration.harness import WorkerProcess, trace, wait_until

pytestmark = [pytest.mark.usefixtures("applied_topics", "schema"), pytest.mark.ordering]

WORKFLOW = "load"
PROJECT = """
workflows:
  load:
    trigger: {{ manual: {{}} }}
    concurrency: {{ group: "${{{{ trigger.account }}}}" }}
    steps:
      - id: hit
        http_call:
          url: "{sink}/hit"
          method: POST
          body: {{ account: "${{{{ trigger.account }}}}", n: "${{{{ trigger.n }}}}" }}
"""
GROUPS = [f"acct-{i}" for i in range(6)]
RATE = 3.5  # firings per second, round robin over the groups
RUSH = 15.0  # while workers join or leave: a group's firings well under a second apart
PARTITIONS = frozenset(range(8))
TIMEOUT = 90.0


@dataclass
class Load:
    """A steady stream of firings, each group's numbered in the order they are produced."""

    settings: Settings
    project: object
    fired: list[tuple[str, int]] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    rate: float = RATE

    async def run(self) -> None:
        workflow = load_project(self.project, {}).workflows[WORKFLOW]
        counts: dict[str, int] = defaultdict(int)
        due = time.monotonic()
        async with Producer(self.settings) as producer:
            while not self.stopping.is_set():
                group = GROUPS[len(self.fired) % len(GROUPS)]
                n = counts[group]
                record = trigger_record(
                    WORKFLOW,
                    workflow,
                    source="manual",
                    trigger_key=f"load:{group}:{n}",
                    payload={"account": group, "n": n},
                    received_at=datetime.now(UTC),
                )
                # Acknowledged one at a time: Kafka keeps the group's order on its partition.
                # A firing the broker refused (it is restarting) is sent again before the
                # next, as a producer of triggers would: its key makes it one run. It may
                # have been written all the same, so it is fired until acknowledged (for
                # 60 s more once the load is told to stop).
                until = None
                while True:
                    try:
                        await producer.trigger(record)
                        break
                    except ProduceError:
                        if self.stopping.is_set():
                            until = until or time.monotonic() + 60
                            if time.monotonic() > until:
                                raise
                        await asyncio.sleep(0.5)
                counts[group] += 1
                self.fired.append((group, n))
                # Pace to the rate (a schedule, not a wait for a condition).
                due = max(due + 1 / self.rate, time.monotonic() - 1)
                await asyncio.sleep(max(0.0, due - time.monotonic()))

    async def fire_more(self, count: int, what: str) -> None:
        """Wait until ``count`` more firings are out, under the current workers."""
        target = len(self.fired) + count

        async def reached():
            return len(self.fired) >= target

        await wait_until(reached, timeout=count / RATE + 30, what=f"{count} firings {what}")


async def shares(settings: Settings) -> tuple[str, list[frozenset[int]]]:
    """The consumer group's state and each member's partitions of the triggers topic."""
    admin = kafka.admin(settings)
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([settings.app_id])
    finally:
        await admin.close()
    _, _, state, _, _, members = response.groups[0][:6]
    topic = settings.topic_prefix + "rflow.triggers"
    found = []
    for member in members:
        raw = member[-1]
        if not raw:  # mid-rebalance: joined, not yet given anything
            found.append(frozenset())
            continue
        assignment = ConsumerProtocolMemberAssignment.decode(raw)
        found.append(
            frozenset(p for name, parts in assignment.assignment if name == topic for p in parts)
        )
    return state, found


async def settle_into(settings: Settings, workers: list[WorkerProcess]) -> list[frozenset[int]]:
    """Wait until the group is exactly ``workers``, each holding a share of the partitions
    (together all of them, none twice) and answering ready."""

    seen: list[str] = []

    async def settled():
        state, found = await shares(settings)
        seen[:] = [f"group {state}, members' partitions {[sorted(f) for f in found]}"]
        if state != "Stable" or len(found) != len(workers) or not all(found):
            return None
        if frozenset().union(*found) != PARTITIONS or sum(map(len, found)) != len(PARTITIONS):
            return None
        for worker in workers:
            status, body = await worker.get("/rflow/ready/")
            if status != 200:
                seen.append(f"worker on port {worker.settings.web_port} not ready: {body}")
                return None
        return found

    try:
        return await wait_until(
            settled, timeout=TIMEOUT, what=f"the partitions to settle on {len(workers)} worker(s)"
        )
    except AssertionError as exc:
        tails = "\n".join(f"--- {w.log_path.name}:\n{w.tail()}" for w in workers)
        raise AssertionError(f"{exc}; last seen: {'; '.join(seen)}\n{tails}") from None


async def settled(settings: Settings, expected: dict[str, tuple[str, int]]) -> list[dict]:
    """The read model's rows once every expected run has settled; a timeout names the
    firings that never settled and where each was last seen."""
    latest: list[dict] = []

    async def all_settled():
        conn = await storage.connect(settings)
        async with conn:
            rows = await runs.list_runs(conn, workflow=WORKFLOW, limit=10 * len(expected))
        latest[:] = rows
        done = [row for row in rows if row["settled_at"] is not None]
        return rows if len(done) >= len(expected) else None

    try:
        return await wait_until(
            all_settled, timeout=TIMEOUT, what=f"{len(expected)} runs to settle"
        )
    except AssertionError as exc:
        done = {row["run_id"] for row in latest if row["settled_at"] is not None}
        missing = {rid: expected[rid] for rid in expected if rid not in done}
        keys = set(missing) | {f"load:{group}:{n}" for group, n in missing.values()}
        seen = "\n".join(await trace(settings, keys))
        raise AssertionError(
            f"{exc}: {len(missing)} firings never settled: {sorted(missing.values())}\n"
            f"where each was last seen:\n{seen}"
        ) from None


async def test_a_group_grows_to_three_workers_and_back_under_load(
    settings, worker_factory, tmp_path, sink
):
    project = tmp_path / "load.yaml"
    project.write_text(PROJECT.format(sink=sink.url))

    def worker(index: int) -> WorkerProcess:
        return worker_factory(project_path=project, data_dir=tmp_path / f"data-{index}")

    first = worker(0)
    await first.wait_ready()
    assert await settle_into(settings, [first]) == [PARTITIONS]

    load = Load(settings, project)
    producing = asyncio.create_task(load.run())
    try:
        await load.fire_more(35, "on one worker")

        load.rate = RUSH
        more = [worker(1), worker(2)]
        grown = await settle_into(settings, [first, *more])
        load.rate = RATE
        assert sorted(map(len, grown)) == [2, 3, 3]
        await load.fire_more(70, "on three workers")

        # Graceful stops: each leaves the group, and its partitions move back at once.
        load.rate = RUSH
        codes = await asyncio.gather(*(asyncio.to_thread(w.stop) for w in more))
        assert codes == [0, 0], [w.tail() for w in more]
        assert await settle_into(settings, [first]) == [PARTITIONS]
        load.rate = RATE
        await load.fire_more(35, "on one worker again")
    finally:
        load.stopping.set()
        await producing

    fired = list(load.fired)
    expected = {run_id(WORKFLOW, f"load:{group}:{n}"): (group, n) for group, n in fired}

    rows = await settled(settings, expected)

    # Exactly once: one run per firing, none besides, each settled once and successfully.
    assert sorted(row["run_id"] for row in rows) == sorted(expected)
    assert {row["status"] for row in rows} == {"succeeded"}
    conn = await storage.connect(settings)
    async with conn:
        assert await runs.list_runs(conn, workflow=WORKFLOW, status="running") == []
        details = [await runs.get_run(conn, row["run_id"]) for row in rows]
    for run in details:
        assert [(s["path"], s["status"], s["attempt"]) for s in run["steps"]] == [
            ("hit", "succeeded", 1)
        ], run

    # Per-group order: each group's runs started in the order they were fired.
    started: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    for row in rows:
        group, n = expected[row["run_id"]]
        assert row["group_key"] == group
        started[group].append((row["created_at"], n))
    for group in GROUPS:
        in_start_order = [n for _, n in sorted(started[group])]
        assert in_start_order == list(range(len(in_start_order))), (group, in_start_order)
        times = [at for at, _ in sorted(started[group])]
        assert len(set(times)) == len(times), f"{group}: two runs started at the same instant"

    # Every run's one effect reached the sink; a step in flight while its partition moved
    # may have been re-issued, and then under the same idempotency key.
    keys = sink.keys("/hit")
    assert set(keys) == {f"{WORKFLOW}:load:{group}:{n}:hit" for group, n in fired}
    repeated = {key: count for key, count in keys.items() if count > 1}
    print(f"{len(fired)} firings over 1 -> 3 -> 1 workers; re-issued effects: {repeated}")
