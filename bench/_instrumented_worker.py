"""`rflow worker` with diagnostics, for the benchmarks' --diagnose option.

    python bench/_instrumented_worker.py worker --no-setup -l info

Runs the real CLI (`rflow.cli.main`) after wrapping `create_app`; nothing in the
engine changes. Environment variables:

    BENCH_DIAG   file receiving one JSON line per second: event-loop lag samples (how
                 late a 10 ms sleep woke up, in seconds) and garbage-collector pauses
                 (generation, seconds) of that second, with the wall-clock time; how
                 long each trigger took from its producer to the runner's queue
                 ("fetched") and in that queue ("queued"), and so for the runs topic's
                 records ("fetched_runs", "queued_runs"); each checkpoint's duration
                 and its transactions' commit ("checkpoints"); and each trigger's
                 partition, offset and wall times when the fetcher handed it to Faust,
                 when it was put into the runner's queue and when the runner took it,
                 and its record's timestamp ("trace"), so that a run's latency can be
                 split at each of them; when each fetch of the consumer was sent and
                 when its response was handled, and the partitions of the triggers
                 topic it named ("fetches"), and each time the loop the consumer runs
                 on woke up over a millisecond late, watched every 5 ms (wall time,
                 seconds late: "thread_lags"), so that a trigger's fetch can be split
                 into waiting for a fetch to be sent, the fetch, and from its response
                 to being handed to Faust
    BENCH_CPROFILE  file receiving the worker's cProfile statistics: profiling starts when
                 a file named like it plus ".start" appears, and is written out when one
                 plus ".stop" does (read it with pstats; profiled, the worker runs about
                 half as fast)
    BENCH_COMMIT_INTERVAL  seconds between checkpoints instead of COMMIT_INTERVAL
    BENCH_SWITCH_INTERVAL  Python's thread switch interval (sys.setswitchinterval)
                 (the worker's other threads: its clients' DNS lookups and the like)
    BENCH_FETCH_MAX_WAIT_MS  how long the broker may hold a fetch, instead of
                 FETCH_MAX_WAIT_MS

The fetch timings wrap aiokafka's ``Fetcher._proc_fetch_request`` (a private name: where
the installed aiokafka lacks it, no fetch is timed and the tail's breakdown shows the fetch
whole).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any


async def late_wakeups(interval: float, note: Callable[[float], Any]) -> None:
    """Sleep ``interval`` over and over on the running loop, noting each time how many
    seconds late it woke up."""
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(interval)
        note(loop.time() - before - interval)


def taken(items: list[Any]) -> list[Any]:
    """What ``items`` holds now, removed from it; what another thread appends meanwhile
    stays (each step is atomic under the GIL)."""
    count = len(items)
    found = items[:count]
    del items[:count]
    return found


def main() -> None:
    diag_path = os.environ.get("BENCH_DIAG")
    cprofile = os.environ.get("BENCH_CPROFILE")
    lags: list[float] = []
    pauses: list[tuple[int, float]] = []
    started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append((info["generation"], time.perf_counter() - started[0]))

    if diag_path:
        gc.callbacks.append(on_gc)

    from rflow.streams import app as app_module
    from rflow.streams import consumption

    # Where a trigger's admission waits: produced -> put into the runner's queue (the
    # broker and the fetcher) -> taken by the runner (the queue); and how long each
    # checkpoint takes, and its transactions' commit within it.
    fetched: list[float] = []
    queued: list[float] = []
    fetched_runs: list[float] = []
    queued_runs: list[float] = []
    checkpoints: list[tuple[float, float]] = []
    put_at: dict[tuple[Any, int], float] = {}
    drained_at: dict[tuple[int, int], tuple[float, float]] = {}
    traced: list[tuple[int, int, float, float, float, float]] = []
    commit_took = [0.0]

    original_put = consumption.Queue._put
    original_take = consumption.Consumption.take
    original_checkpoint = consumption.Consumption.checkpoint
    original_commit = consumption.Checkpoint.commit
    original_fetch = consumption.RflowConsumerService._fetch_records

    from aiokafka.consumer import fetcher as aiokafka_fetcher

    # Each fetch: when its task began, when its response was handled and the partitions
    # of the triggers topic it named.
    fetches: list[tuple[float, float, list[int]]] = []
    original_proc = getattr(aiokafka_fetcher.Fetcher, "_proc_fetch_request", None)

    async def _proc_fetch_request(self: Any, assignment: Any, node_id: Any, request: Any) -> Any:
        sent = time.time()
        try:
            return await original_proc(self, assignment, node_id, request)
        finally:
            named = [
                partition
                for topic, partitions in getattr(request, "topics", ())
                if topic.endswith("rflow.triggers")
                for partition, *_ in partitions
            ]
            fetches.append((sent, time.time(), named))

    if diag_path and original_proc is not None:
        aiokafka_fetcher.Fetcher._proc_fetch_request = _proc_fetch_request

    # How late the loop the consumer runs on wakes up (only when over 1 ms).
    thread_lags: list[tuple[float, float]] = []
    watch: list[asyncio.Task[None]] = []

    def stalled(late: float) -> None:
        if late > 0.001:
            thread_lags.append((time.time(), late))

    async def _fetch_records(self: Any, consumer: Any, active: Any, **kwargs: Any) -> Any:
        if not watch:  # the first call starts the watch, on the consumer's loop
            watch.append(asyncio.get_running_loop().create_task(late_wakeups(0.005, stalled)))
        records = await original_fetch(self, consumer, active, **kwargs)
        now = time.time()
        for tp, found in records.items():
            if tp.topic.endswith("rflow.triggers"):
                for record in found:
                    drained_at[(tp.partition, record.offset)] = (now, record.timestamp / 1000)
        return records

    def _put(self: Any, item: Any) -> None:
        message = getattr(item, "message", item)
        topic = getattr(message, "topic", "")
        if topic.endswith(("rflow.triggers", "rflow.runs")):
            now = time.time()
            put_at[(message.tp, message.offset)] = now
            into = fetched if topic.endswith("rflow.triggers") else fetched_runs
            into.append(now - message.timestamp)  # Faust's: seconds
        original_put(self, item)

    def take(self: Any, message: Any) -> bool:
        accepted = original_take(self, message)
        put = put_at.pop((message.tp, message.offset), None)
        if accepted and put is not None:
            now = time.time()
            trigger = message.topic.endswith("rflow.triggers")
            (queued if trigger else queued_runs).append(now - put)
            if trigger:
                drained, stamp = drained_at.pop((message.tp.partition, message.offset), (put, 0.0))
                traced.append((message.tp.partition, message.offset, drained, put, now, stamp))
        return accepted

    async def checkpoint(self: Any) -> bool:
        began = time.perf_counter()
        commit_took[0] = 0.0
        try:
            return await original_checkpoint(self)
        finally:
            checkpoints.append((time.perf_counter() - began, commit_took[0]))

    async def commit(self: Any, *args: Any, **kwargs: Any) -> None:
        began = time.perf_counter()
        try:
            await original_commit(self, *args, **kwargs)
        finally:
            commit_took[0] = time.perf_counter() - began

    switch = os.environ.get("BENCH_SWITCH_INTERVAL")
    if switch:  # how often Python's threads take turns
        sys.setswitchinterval(float(switch))
    max_wait = os.environ.get("BENCH_FETCH_MAX_WAIT_MS")
    if max_wait:
        consumption.FETCH_MAX_WAIT_MS = int(max_wait)
    interval = os.environ.get("BENCH_COMMIT_INTERVAL")
    if interval:
        consumption.COMMIT_INTERVAL = float(interval)
    if diag_path:
        consumption.Queue._put = _put
        consumption.Consumption.take = take
        consumption.Consumption.checkpoint = checkpoint
        consumption.Checkpoint.commit = commit
        consumption.RflowConsumerService._fetch_records = _fetch_records

    original = app_module.create_app

    def create_app(*args: Any, **kwargs: Any) -> Any:
        app = original(*args, **kwargs)
        if diag_path:
            out = open(diag_path, "a", buffering=1)  # noqa: SIM115 - lives with the process

            @app.task
            async def lag_monitor() -> None:
                await late_wakeups(0.01, lags.append)

            @app.timer(interval=1.0, name="bench.diag")
            async def flush() -> None:
                line = {
                    "t": time.time(),
                    "lag": lags[:],
                    "gc": taken(pauses),
                    "fetched": fetched[:],
                    "queued": queued[:],
                    "fetched_runs": fetched_runs[:],
                    "queued_runs": queued_runs[:],
                    "checkpoints": checkpoints[:],
                    "trace": traced[:],
                    # taken without losing one appended meanwhile
                    "fetches": taken(fetches),
                    "thread_lags": taken(thread_lags),
                }
                for each in (
                    lags,
                    fetched,
                    queued,
                    fetched_runs,
                    queued_runs,
                    checkpoints,
                    traced,
                ):
                    each.clear()
                out.write(json.dumps(line) + "\n")

        if cprofile:
            import cProfile

            profiler = cProfile.Profile()
            start, stop = f"{cprofile}.start", f"{cprofile}.stop"

            @app.timer(interval=0.02, name="bench.cprofile")
            async def toggle() -> None:
                # On the event loop's thread: a profiler sees only the thread enabling it.
                if os.path.exists(start):
                    os.unlink(start)
                    profiler.enable()
                if os.path.exists(stop):
                    os.unlink(stop)
                    profiler.disable()
                    profiler.dump_stats(cprofile)

        return app

    app_module.create_app = create_app
    from rflow.cli import main as cli

    sys.argv[0] = "rflow"
    cli()


if __name__ == "__main__":
    main()
