"""Ownership fenced by the broker: a worker stopped (SIGSTOP) past its session timeout
while it owns busy groups loses them to another worker, and when it wakes (SIGCONT) none
of its late writes is seen by a ``read_committed`` reader: no run goes back in time,
every run settles exactly once, and each group's runs start in the order they were fired.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter, defaultdict

import pytest
from aiokafka import TopicPartition

from rflow.codecs import RunJournal, decode
from rflow.engine import Settle
from rflow.engine.keys import run_id
from rflow.settings import Settings
from rflow.streams import kafka
from tests.integration.harness import topic_messages, wait_until
from tests.integration.test_scaling import (
    GROUPS,
    PARTITIONS,
    PROJECT,
    RATE,
    WORKFLOW,
    Load,
    settle_into,
    settled,
    shares,
)

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")


async def aborted_records(settings: Settings, name: str) -> int:
    """Records of topic ``name`` a ``read_uncommitted`` reader sees and a
    ``read_committed`` one does not (aborted transactions' records)."""
    counts = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = kafka.consumer(settings, enable_auto_commit=False, isolation_level=isolation)
        await consumer.start()
        seen = 0
        try:
            topic = settings.topic_prefix + name
            tps = [TopicPartition(topic, p) for p in range(len(PARTITIONS))]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            for tp in tps:
                end = (await consumer.end_offsets([tp]))[tp]
                while await consumer.position(tp) < end:
                    batch = await consumer.getmany(tp, timeout_ms=2000)
                    seen += len(batch.get(tp, []))
        finally:
            await consumer.stop()
        counts.append(seen)
    return counts[1] - counts[0]


def check_state_never_goes_back(records: list) -> None:
    """On the runs table's changelog, a run whose entry was deleted (it settled) never
    has an entry again: a late write of a fenced owner would bring it back."""
    deleted: set[bytes] = set()
    for record in records:
        if record.value is None:
            deleted.add(record.key)
        else:
            assert record.key not in deleted, f"run {record.key!r} came back after it settled"


def settles_per_run(records: list) -> Counter[str]:
    found: Counter[str] = Counter()
    for record in records:
        for entry in decode(record.value, RunJournal).journal:
            if isinstance(entry, Settle):
                found[entry.run_id] += 1
    return found


@pytest.mark.ordering
@pytest.mark.timeout(600)  # its own waits name what is missing first, on a loaded machine
async def test_a_worker_stopped_past_its_session_is_fenced_and_none_of_its_late_writes_is_seen(
    settings, worker_factory, tmp_path, sink
):
    project = tmp_path / "load.yaml"
    project.write_text(PROJECT.format(sink=sink.url))
    first = worker_factory(project_path=project, data_dir=tmp_path / "data-0")
    await first.wait_ready()
    second = worker_factory(project_path=project, data_dir=tmp_path / "data-1")
    await settle_into(settings, [first, second])

    load = Load(settings, project, rate=RATE * 3)
    producing = asyncio.create_task(load.run())
    try:
        await load.fire_more(40, "on two workers")
        # Stopped while it owns busy groups: decisions under way, a checkpoint due.
        first.proc.send_signal(signal.SIGSTOP)
        try:
            assert await settle_into(settings, [second]) == [PARTITIONS]
            await load.fire_more(30, "while the first worker is stopped")
        finally:
            first.proc.send_signal(signal.SIGCONT)

        # Awake, it finds its producers fenced: it stops, or joins the group again
        # afresh (recovering what the other worker committed).
        async def back_or_gone():
            if first.proc.poll() is not None:
                return "exited"
            state, found = await shares(settings)
            return "rejoined" if state == "Stable" and len(found) == 2 and all(found) else None

        outcome = await wait_until(back_or_gone, timeout=90, what="the woken worker to settle")
        await load.fire_more(30, f"after the first worker {outcome}")
    finally:
        load.stopping.set()
        await producing

    # Exactly once (in the read model and in the journal a read_committed reader sees),
    # no run back in time on the runs table's changelog, and per-group order.
    fired = list(load.fired)
    await check_exactly_once_in_order(settings, fired)

    log = first.log_path.read_text(errors="replace")
    # A worker that stopped did so because the broker refused its late writes.
    assert outcome == "rejoined" or "ProducerFenced" in log, (first.proc.returncode, first.tail())
    aborted = {
        name: await aborted_records(settings, name)
        for name in ("rflow.state.runs", "rflow.state.lanes", "rflow.events")
    }
    print(
        f"{len(fired)} firings; the stopped worker {outcome}; aborted records it left: "
        f"{aborted}; refused as fenced in its log: {'ProducerFenced' in log}"
    )


async def check_exactly_once_in_order(settings: Settings, fired: list[tuple[str, int]]) -> None:
    expected = {run_id(WORKFLOW, f"load:{group}:{n}"): (group, n) for group, n in fired}
    rows = await settled(settings, expected)
    assert sorted(row["run_id"] for row in rows) == sorted(expected)
    assert {row["status"] for row in rows} == {"succeeded"}
    settles = settles_per_run(await topic_messages(settings, "rflow.events"))
    assert set(settles) == set(expected)
    assert {rid: n for rid, n in settles.items() if n != 1} == {}
    check_state_never_goes_back(await topic_messages(settings, "rflow.state.runs"))
    started = defaultdict(list)
    for row in rows:
        group, n = expected[row["run_id"]]
        started[group].append((row["created_at"], n))
    for group in GROUPS:
        in_start_order = [n for _, n in sorted(started[group])]
        assert in_start_order == list(range(len(in_start_order))), (group, in_start_order)


@pytest.mark.chaos
@pytest.mark.timeout(600)
async def test_a_broker_restarted_in_the_middle_of_checkpoints_loses_and_doubles_nothing(
    settings, worker_factory, tmp_path, sink
):
    """Kafka stops and starts again (its data kept) under a steady load, with checkpoints
    every quarter of a second: a checkpoint whose transaction the broker cannot finish
    fails whole, and the worker stops rather than commit a part of it (started again,
    as a supervisor would, it recovers what was committed)."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    project = tmp_path / "load.yaml"
    project.write_text(PROJECT.format(sink=sink.url))
    worker = worker_factory(project_path=project, data_dir=tmp_path / "data-0")
    await worker.wait_ready()
    load = Load(settings, project, rate=RATE * 3)
    producing = asyncio.create_task(load.run())
    restarts = 0
    try:
        await load.fire_more(30, "before the broker restarts")
        done = await asyncio.to_thread(
            subprocess.run,
            [str(root / "scripts" / "stack"), "restart", "kafka"],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        if worker.proc.poll() is not None:
            restarts += 1
            worker = worker_factory(project_path=project, data_dir=tmp_path / "data-0")
        await worker.wait_ready(timeout=120)
        await load.fire_more(30, "after the broker restarted")
    finally:
        load.stopping.set()
        await producing
    await check_exactly_once_in_order(settings, list(load.fired))
    print(f"{len(load.fired)} firings across a broker restart; the worker restarted {restarts}x")
