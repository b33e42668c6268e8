"""What a worker's consumer spends on fetching, in incremental fetch sessions and without.

    .venv/bin/python bench/bench_fetch.py [--partitions 8 32] [--rate 100] [--duration 10]
                                          [--rounds 3]

A consumer reads three fresh topics of N partitions each (as a worker reads the runs,
events and triggers topics) with the worker's fetcher (``streams/consumption.py``:
records handed over at once, the next fetch sent as the last records are drained), while
a producer in the same process writes records at a fixed rate to partitions in turn;
then it reads them idle (nothing written: a fetch every ``FETCH_MAX_WAIT_MS``). The
process's CPU time per record, and per second idle, is measured with the fetches in
incremental sessions (KIP-227: each fetch names only the partitions whose position
moved) and, as the baseline in the same run, with every fetch naming every partition
(aiokafka's own way), in interleaved rounds; the medians and their ratio are printed.
The producer's share is the same on both sides.

Needs the stack (``scripts/stack up``; ``eval "$(scripts/stack env)"``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import emit
from _stack import check_stack, run_benchmark
from aiokafka.admin import NewTopic

from rflow.settings import Settings
from rflow.streams import consumption, kafka

TOPICS = ("runs", "events", "triggers")


@contextmanager
def every_partition_named() -> Any:
    """The baseline: no session, each fetch names every partition."""
    real = consumption.FetchSession.fetch
    consumption.FetchSession.fetch = lambda session, request: request  # type: ignore[method-assign]
    try:
        yield
    finally:
        consumption.FetchSession.fetch = real  # type: ignore[method-assign]


async def create(settings: Settings, prefix: str, partitions: int) -> list[str]:
    names = [f"{prefix}{name}" for name in TOPICS]
    admin = kafka.admin(settings)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1) for name in names])
    finally:
        await admin.close()
    return names


async def delete(settings: Settings, names: list[str]) -> None:
    admin = kafka.admin(settings)
    await admin.start()
    try:
        await admin.delete_topics(names)
    finally:
        await admin.close()


async def measure(
    settings: Settings, names: list[str], partitions: int, rate: float, duration: float
) -> dict[str, float]:
    """CPU seconds per record at ``rate``, and per second idle, of one consumer."""
    consumer = kafka.consumer(
        settings,
        *names,
        group_id=None,
        auto_offset_reset="latest",
        fetch_max_wait_ms=consumption.FETCH_MAX_WAIT_MS,
    )
    producer = kafka.producer(settings, linger_ms=0)
    await consumer.start()
    await producer.start()
    consumption.hand_over_at_once(consumer._fetcher)
    got = [0]
    stop = asyncio.Event()

    async def read() -> None:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=100)
            if batch:
                got[0] += sum(len(records) for records in batch.values())
                consumption.fetch_next(consumer._fetcher)

    reader = asyncio.create_task(read())
    try:
        # Every partition's position known before the clock starts.
        await asyncio.sleep(1.0)
        count = max(1, round(rate * duration))
        topic = names[-1]
        before = time.process_time()
        start = time.monotonic()
        for i in range(count):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await producer.send(topic, b"x", partition=i % partitions)
        while got[0] < count and time.monotonic() < start + duration + 10:
            await asyncio.sleep(0.01)
        busy = (time.process_time() - before) / max(got[0], 1)
        before = time.process_time()
        await asyncio.sleep(duration / 2)
        idle = (time.process_time() - before) / (duration / 2)
        return {"per_record": busy, "idle": idle, "read": got[0], "sent": count}
    finally:
        stop.set()
        await reader
        await producer.stop()
        await consumer.stop()


async def run(args: argparse.Namespace, workdir: Path) -> None:
    settings = Settings.from_env()
    await check_stack(settings)
    print(
        f"bench_fetch: 3 topics of {' / '.join(map(str, args.partitions))} partitions, "
        f"{args.rate:g} records/s for {args.duration:g} s, then idle for {args.duration / 2:g} s; "
        f"{args.rounds} interleaved rounds; {os.cpu_count()} CPUs",
        flush=True,
    )
    rows = []
    for partitions in args.partitions:
        figures: dict[str, list[dict[str, float]]] = {"sessions": [], "every": []}
        for round_ in range(1, args.rounds + 1):
            for mode in ("every", "sessions"):
                prefix = f"bf{uuid.uuid4().hex[:8]}."
                names = await create(settings, prefix, partitions)
                try:
                    if mode == "every":
                        with every_partition_named():
                            result = await measure(
                                settings, names, partitions, args.rate, args.duration
                            )
                    else:
                        result = await measure(
                            settings, names, partitions, args.rate, args.duration
                        )
                finally:
                    await delete(settings, names)
                figures[mode].append(result)
                print(
                    f"  {partitions} partitions, round {round_}, "
                    f"{'sessions' if mode == 'sessions' else 'every partition named'}: "
                    f"{result['per_record'] * 1000:.3f} ms CPU a record "
                    f"({result['read']:.0f} of {result['sent']:.0f} read), "
                    f"idle {result['idle']:.3f} cores",
                    flush=True,
                )
        for key, what, unit, scale in (
            ("per_record", f"CPU a record at {args.rate:g}/s, {partitions} partitions", "ms", 1000),
            ("idle", f"CPU idle, {partitions} partitions", "cores", 1),
        ):
            value = statistics.median(r[key] for r in figures["sessions"])
            base = statistics.median(r[key] for r in figures["every"])
            rows.append(
                (
                    what,
                    f"{value * scale:.3f} {unit}",
                    f"{base * scale:.3f} {unit} (every partition named)",
                    f"{value / base:.2f}" if base else "-",
                    "< 1",
                    "met" if value < base else "not met",
                )
            )
    emit("fetch", rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--rate", type=float, default=100.0, help="records a second (100)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds a round (10)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    args = parser.parse_args()
    run_benchmark("bench_fetch", lambda workdir: run(args, workdir))


if __name__ == "__main__":
    main()
