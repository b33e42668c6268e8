"""Memory of one worker holding K runs parked in a one-hour `delay`.

    python bench/bench_parked.py [--runs K] [--quick] [--store memory]

Needs the local stack (`scripts/stack up`). One real `rflow worker` runs a project whose
workflow is `delay: { duration: 1h }` then a `notify` to a log channel. The benchmark
reads the worker's VmRSS from /proc/<pid>/status once it is idle (the baseline, measured
in the same run, with the same project and a few runs done), then produces K triggers
and waits until Postgres holds K timers and the read model K runs, and reads VmRSS (and
VmHWM, the peak) again. Target (issue 4): under 400 MB with 100,000 parked runs.
Everything the run creates (the process, schema, topics) is removed at the end.

--store memory keeps the worker's tables in memory (RFLOW_TABLE_STORE=memory) instead of
RocksDB, the default, to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import emit
from _stack import (
    BenchError,
    Worker,
    check_stack,
    cleanup,
    fresh_settings,
    memory_of,
    prepare,
    produce_all,
    run_benchmark,
    start_producer,
    wait_stable,
)

from rflow import storage
from rflow.codecs import encode
from rflow.engine import provenance
from rflow.lang import load_project
from rflow.settings import Settings
from rflow.triggering import trigger_record

WORKFLOW = "parked"
PROJECT = """\
channels:
  ops: { type: log }
workflows:
  parked:
    trigger: { manual: {} }
    steps:
      - id: sleep
        delay: { duration: 1h }
      - id: after
        notify: { channel: ops, message: "woke ${{ trigger.seq }}" }
"""
TARGET_MB = 400.0
CHUNK = 5000


async def counts(conn) -> tuple[int, int]:
    cur = await conn.execute(
        "SELECT (SELECT count(*) FROM timers WHERE purpose = 'delay'), (SELECT count(*) FROM runs)"
    )
    timers, runs = await cur.fetchone()
    return timers, runs


async def settle_rss(pid: int, seconds: float = 3.0) -> float:
    """VmRSS after letting the worker idle a moment (its last batches flushed)."""
    await asyncio.sleep(seconds)
    return memory_of(pid)["VmRSS"]


async def run(args: argparse.Namespace, workdir: Path) -> None:
    await check_stack(Settings.from_env())
    settings = fresh_settings("park", workdir)
    path = workdir / "project.yaml"
    path.write_text(PROJECT)
    settings = settings.model_copy(update={"project_path": path})
    workflow = load_project(path, {}).workflows[WORKFLOW]
    topic = settings.topic_prefix + "rflow.triggers"
    k = args.runs
    store = args.store or "rocksdb (the default)"
    if args.store:
        settings = settings.model_copy(update={"table_store": args.store})
    print(
        f"bench_parked: {k} runs parked in a 1h delay on one worker, table store {store}; "
        f"logs in {workdir}"
    )

    def record(i: int) -> tuple[bytes, bytes]:
        rec = trigger_record(
            WORKFLOW,
            workflow,
            source="manual",
            trigger_key=f"manual:park-{i}",
            payload={"seq": i},
            received_at=datetime.now(UTC),
        )
        # As rflow's manual ingress produces it: vouched for with the workers' keys.
        return rec.partition_key.encode(), encode(provenance.vouch(rec, settings.ingress_keyring))

    worker: Worker | None = None
    producer = None
    conn = None
    try:
        await prepare(settings)
        conn = await storage.connect(settings)
        worker = Worker(
            settings,
            workdir / "worker.log",
        ).start()
        try:
            await worker.wait_ready(timeout=120)
        except AssertionError as exc:
            raise BenchError(str(exc)) from None
        await wait_stable([worker])
        producer = await start_producer(settings)

        # Baseline: the same worker, idle, after a few runs (imports, pools, caches warm).
        warm = 50
        await produce_all(producer, topic, [record(-1 - i) for i in range(warm)])
        await wait_parked(conn, warm, worker, timeout=120)
        idle = await settle_rss(worker.pid)
        print(f"  idle worker (after {warm} parked runs): VmRSS {idle:.1f} MB", flush=True)

        start = time.monotonic()
        for low in range(0, k, CHUNK):
            await produce_all(producer, topic, [record(i) for i in range(low, min(k, low + CHUNK))])
        produced = time.monotonic() - start
        print(f"  produced {k} triggers in {produced:.1f} s", flush=True)
        await wait_parked(
            conn, warm + k, worker, timeout=args.timeout, start=start, report_every=15.0
        )
        parked_after = time.monotonic() - start
        loaded = memory_of(worker.pid)
        rss = await settle_rss(worker.pid)
        hwm = memory_of(worker.pid)["VmHWM"]
        timers, runs = await counts(conn)
    finally:
        if producer is not None:
            await producer.stop()
        if worker is not None:
            worker.stop()
        if conn is not None:
            await conn.close()
        await cleanup(settings)

    delta = rss - idle
    per_thousand = delta / k * 1000
    print(
        f"  all {k} runs parked {parked_after:.1f} s after the first trigger "
        f"({k / parked_after:.0f} runs/s); Postgres: {timers} delay timers, {runs} runs"
    )
    print(f"  VmRSS when the last run parked: {loaded['VmRSS']:.1f} MB")
    emit(
        "parked",
        [
            (f"worker VmRSS, {k} parked", f"{rss:.1f} MB", f"{idle:.1f} MB (idle)",
             f"{rss / idle:.2f}", f"< {TARGET_MB:.0f} MB",
             "met" if rss < TARGET_MB else "NOT met"),
            ("added per 1,000 parked runs", f"{per_thousand:.2f} MB", "-", "-", "-", "-"),
            ("peak VmRSS (VmHWM)", f"{hwm:.1f} MB", "-", f"{hwm / idle:.2f}", "-", "-"),
            (
                "projected VmRSS, 100,000 parked",
                f"{idle + per_thousand * 100:.1f} MB",
                "-",
                "-",
                f"< {TARGET_MB:.0f} MB",
                "met" if idle + per_thousand * 100 < TARGET_MB else "NOT met",
            ),
        ],
    )  # fmt: skip


async def wait_parked(
    conn,
    want: int,
    worker: Worker,
    *,
    timeout: float,
    start: float | None = None,
    report_every: float = 0.0,
) -> None:
    """Until Postgres holds ``want`` delay timers and ``want`` runs in the read model."""
    start = start if start is not None else time.monotonic()
    deadline = time.monotonic() + timeout
    last_report = time.monotonic()
    while True:
        worker.check_alive()
        timers, runs = await counts(conn)
        if timers >= want and runs >= want:
            return
        now = time.monotonic()
        if now > deadline:
            raise BenchError(
                f"timed out after {timeout:.0f}s: {timers} timers and {runs} runs of {want}; "
                f"worker VmRSS {memory_of(worker.pid)['VmRSS']:.0f} MB"
            )
        if report_every and now - last_report >= report_every:
            last_report = now
            mem = memory_of(worker.pid)
            print(
                f"    {now - start:6.0f} s: {timers} timers, {runs} runs; "
                f"VmRSS {mem['VmRSS']:.0f} MB",
                flush=True,
            )
        await asyncio.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, help="runs to park (default 100000; quick 5000)")
    parser.add_argument("--quick", action="store_true", help="park 5,000 runs")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds to wait for every run to park"
    )
    parser.add_argument(
        "--store",
        choices=["rocksdb", "memory"],
        help="where the worker keeps its tables (RFLOW_TABLE_STORE; default rocksdb)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    args.runs = args.runs or (5000 if args.quick else 100_000)
    run_benchmark("bench_parked", lambda workdir: run(args, workdir), args.keep)


if __name__ == "__main__":
    main()
