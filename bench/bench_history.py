"""What a worker costs after a long history: 0, 100k, 500k and 1M settled firings.

    python bench/bench_history.py [--levels N ...] [--window 60s] [--burst N] [--quick]
                                  [--python PATH] [--keep]

Needs the local stack (`scripts/stack up`). One real `rflow worker` runs the `order-paid`
workflow of docs/producing-triggers.md (three payload fields, 64 concurrency groups, one
inline `log` step) with its de-duplication window shortened (`config.dedup_window`, 60 s by default)
so that firings are forgotten while the run goes on. The state changelogs' compaction
timings are shortened in proportion (a copy of topics.yaml with `segment.ms` 5 s,
`delete.retention.ms` 30 s and `min.cleanable.dirty.ratio` 0.01 on them), as an hour's
segments and a day's tombstones are to a week's window.

The benchmark fills settled firings up to each level in turn (each firing a new trigger
key, produced with aiokafka as docs/producing-triggers.md shows) and at each level reads:

- the worker's VmRSS after 5 s idle, and the size of its data directory;
- every record of the state changelogs (what a worker on a new host reads): how many,
  and their bytes (keys and values);
- restart-to-ready on the same host (stopped, started again with its data directory)
  and on a new host (an empty data directory): the time from starting the process until
  it answers /rflow/ready/. The new-host worker goes on;
- runs/s and the worker's CPU per run: the best of three bursts of firings produced at
  once, over the time until every one settled, each begun once the worker is idle (it
  has swept its partitions and committed every record, the read model's included), each
  printed with the entries the sweep forgot meanwhile.

Every figure is printed beside the 0 level measured in the same run. Targets (issue 33):
VmRSS at the last level within 1.2x of the level after the first window's expiry (the
first level above 0); same-host restart under 5 s at every level; changelog records
bounded by the live window (the last level within 1.5x of the first above 0); runs/s at
the last level within 10 % of the 0 level.

--python runs the worker with another installation's interpreter (an older checkout's
virtualenv, to measure it the same way); --window none leaves the window out of the
project (for a version that has none). Everything the run creates (the processes, the
schema, the topics) is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml
from aiokafka import TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cpu import tree_cpu
from _report import emit, verdict
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
    wait_for,
    wait_stable,
)

from rflow.codecs import encode
from rflow.engine import provenance
from rflow.lang import load_project
from rflow.settings import Settings
from rflow.streams import kafka, topics
from rflow.triggering import trigger_record

WORKFLOW = "order-paid"
PROJECT = """\
{config}workflows:
  order-paid:
    trigger:
      manual: {{ inputs: [account, order, amount] }}
    concurrency:
      group: "${{{{ trigger.account }}}}"
    steps:
      - id: note
        command: {{ name: log, args: {{ message: "order ${{{{ trigger.order }}}} of ${{{{ trigger.account }}}}: ${{{{ trigger.amount }}}} wei" }} }}
"""
GROUPS = 64
LEVELS = (0, 100_000, 500_000, 1_000_000)
QUICK_LEVELS = (0, 20_000, 50_000, 100_000)
CHANGELOGS = (
    "rflow.state.triggers",
    "rflow.state.runs",
    "rflow.state.settled",
    "rflow.state.lanes",
)
COMPACTION = {
    "segment.ms": "5000",
    "delete.retention.ms": "30000",
    "min.cleanable.dirty.ratio": "0.01",
}
BURSTS = 3
"""Bursts at each level, each from an idle worker: runs/s is the best of them, CPU per
run the least (the first burst after a restart is often the slowest)."""
AHEAD = 20_000
"""Firings produced ahead of the ones settled while filling."""
CHUNK = 5_000
RSS_TARGET = 1.2
RESTART_TARGET = 5.0
RECORDS_TARGET = 1.5
RATE_TARGET = 0.9


@dataclass
class Level:
    """The figures at one level."""

    settled: int
    rss: float = 0.0
    disk: float = 0.0
    """MiB in the worker's data directory (its tables' RocksDB databases)."""
    records: int = 0
    bytes: int = 0
    rate: float = 0.0
    cpu_per_run: float = 0.0
    """The worker's CPU milliseconds per run of the burst (less sensitive than runs/s to
    the other users of a shared machine)."""
    same_host: float = 0.0
    new_host: float = 0.0
    read_same: int | None = None
    read_new: int | None = None


@dataclass
class Rig:
    settings: Settings
    workdir: Path
    python: str
    topic: str
    workflow: object
    worker: Worker | None = None
    counted: float = 0.0
    """Runs the current worker process had settled when it was last asked."""
    seq: int = 0
    hosts: int = 0
    logs: list[Path] = field(default_factory=list)

    def record(self, i: int) -> tuple[bytes, bytes]:
        account = f"acct-{i % GROUPS}"
        rec = trigger_record(
            WORKFLOW,
            self.workflow,
            source="manual",
            trigger_key=f"orders:{i}",
            payload={"account": account, "order": i, "amount": 10**18 + i},
            received_at=datetime.now(UTC),
        )
        # As rflow's manual ingress produces it: vouched for with the workers' keys.
        vouched = provenance.vouch(rec, self.settings.ingress_keyring)
        return rec.partition_key.encode(), encode(vouched)

    def start(self, data_dir: Path) -> Worker:
        settings = self.settings.model_copy(update={"data_dir": data_dir})
        log = self.workdir / f"worker-{len(self.logs)}.log"
        self.logs.append(log)
        # Another installation's interpreter must not import this checkout's rflow from
        # the working directory (PYTHONSAFEPATH: no directory of the command's own).
        worker = Worker(settings, log, extra_env={"PYTHONSAFEPATH": "1"})
        worker.command = (self.python, *worker.command[1:])
        self.worker = worker.start()
        return self.worker

    def new_host(self) -> Path:
        self.hosts += 1
        return self.workdir / f"host-{self.hosts}"


def scrape(worker: Worker) -> dict[str, float]:
    request = urllib.request.Request(worker.url + "/metrics", headers=worker.auth)
    with urllib.request.urlopen(request, timeout=10) as resp:
        text = resp.read().decode()
    found = {}
    for line in text.splitlines():
        match = re.match(r"^(rflow_[a-z_]+(?:\{[^}]*\})?) (\S+)$", line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


async def metrics(worker: Worker) -> dict[str, float]:
    try:
        return await asyncio.to_thread(scrape, worker)
    except OSError:
        return {}


def summed(found: dict[str, float], metric: str) -> float:
    """The sum of every labelled series of ``metric`` in a scrape."""
    return sum(v for k, v in found.items() if k.startswith(metric + "{"))


def forgotten_of(found: dict[str, float]) -> float:
    return summed(found, "rflow_forgotten_total")


def settled_of(found: dict[str, float]) -> float:
    return summed(found, "rflow_runs_settled_total")


async def wait_settled(rig: Rig, count: float, timeout: float) -> None:
    """Until the current worker has settled ``count`` runs (its own count)."""
    worker = rig.worker
    assert worker is not None

    async def reached() -> bool:
        rig.counted = settled_of(await metrics(worker))
        return rig.counted >= count

    await wait_for(
        reached, timeout=timeout, what=f"{count:.0f} runs settled", interval=0.2,
        alive=worker.check_alive,
    )  # fmt: skip


async def fill(rig: Rig, producer, until: int) -> None:
    """Produce firings until ``until`` in all, never more than :data:`AHEAD` ahead of the
    runs the worker has settled."""
    start, started_at = rig.seq, time.monotonic()
    base = rig.counted
    while rig.seq < until:
        room = int(base + (rig.seq - start) - rig.counted)
        if room >= AHEAD:
            await wait_settled(rig, base + (rig.seq - start) - AHEAD + CHUNK, timeout=600)
            continue
        high = min(until, rig.seq + CHUNK)
        await produce_all(producer, rig.topic, [rig.record(i) for i in range(rig.seq, high)])
        rig.seq = high
    await wait_settled(rig, base + (until - start), timeout=1200)
    took = time.monotonic() - started_at
    if until > start:
        print(
            f"  filled to {until:,} settled firings ({(until - start) / took:.0f} runs/s)",
            flush=True,
        )


async def read_changelogs(settings: Settings) -> tuple[int, int]:
    """Every record of the state changelogs, as a worker on a new host reads them: how
    many, and their bytes (keys and values)."""
    consumer = kafka.consumer(
        settings,
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 << 20,
    )
    await consumer.start()
    records = size = 0
    try:
        names = [settings.topic_prefix + name for name in CHANGELOGS]
        counts = await topics.describe(settings, names)
        tps = [TopicPartition(name, p) for name in names for p in range(counts.get(name, 0))]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        pending = {tp for tp in tps if ends[tp] > 0}
        for tp in list(pending):
            if await consumer.position(tp) >= ends[tp]:
                pending.discard(tp)
        while pending:
            batch = await consumer.getmany(timeout_ms=2000, max_records=20_000)
            if not batch:
                break
            for tp, messages in batch.items():
                for message in messages:
                    records += 1
                    size += len(message.key or b"") + len(message.value or b"")
                    if message.offset + 1 >= ends[tp]:
                        pending.discard(tp)
    finally:
        await consumer.stop()
    return records, size


async def restart(rig: Rig, data_dir: Path) -> tuple[float, int | None]:
    """Stop the worker, start one on ``data_dir``: seconds from its start until ready,
    and the changelog records it read."""
    assert rig.worker is not None
    rig.worker.stop()
    started = time.monotonic()
    worker = rig.start(data_dir)
    try:
        await worker.wait_ready(timeout=900)
    except AssertionError as exc:
        raise BenchError(str(exc)) from None
    took = time.monotonic() - started
    rig.counted = 0.0
    await wait_stable([worker])
    # The gauge is read from the tables every few seconds (a version without it has none).
    read: list[float] = []

    async def counted() -> bool:
        found = await metrics(worker)
        read[:] = [v for k, v in found.items() if k.startswith("rflow_changelog_records_read{")]
        return bool(read)

    try:
        await wait_for(counted, timeout=15, what="the records read", interval=0.5)
    except BenchError:
        return took, None
    return took, int(sum(read))


async def first_sweep(rig: Rig) -> None:
    """Until a worker just started has swept its partitions once (in full: it indexes
    what it recovered), so that the burst after it measures the steady state. A version
    without the sweep goes on at once."""
    worker = rig.worker
    assert worker is not None

    async def swept() -> bool | None:
        found = await metrics(worker)
        if not any(k.startswith("rflow_") for k in found):
            return None
        return found.get("rflow_sweeps_total", 1.0) >= 1.0

    await wait_for(swept, timeout=600, what="the first sweep", interval=0.5)


async def wait_idle(rig: Rig) -> None:
    """Until the worker has committed every record of its topics (its projection of the
    last burst into the read model included), so that each burst starts from the same
    state and not beside the tail of the one before."""
    worker = rig.worker
    assert worker is not None

    async def idle() -> bool:
        found = await metrics(worker)
        reported = any(k.startswith("rflow_consumer_lag{") for k in found)
        return reported and summed(found, "rflow_consumer_lag") == 0

    await wait_for(idle, timeout=600, what="the worker's consumer lag to reach 0", interval=0.5)


async def burst(rig: Rig, producer, count: int) -> tuple[float, float]:
    """Runs/s of ``count`` firings produced at once, and the worker's CPU ms per run."""
    assert rig.worker is not None
    await wait_idle(rig)
    base = rig.counted
    records = [rig.record(i) for i in range(rig.seq, rig.seq + count)]
    cpu = tree_cpu([rig.worker.pid])
    forgot = forgotten_of(await metrics(rig.worker))
    started = time.monotonic()
    await produce_all(producer, rig.topic, records)
    rig.seq += count
    await wait_settled(rig, base + count, timeout=600)
    took = time.monotonic() - started
    forgot = forgotten_of(await metrics(rig.worker)) - forgot
    print(
        f"    burst: {count / took:,.0f} runs/s ({forgot:,.0f} entries forgotten meanwhile)",
        flush=True,
    )
    return count / took, (tree_cpu([rig.worker.pid]) - cpu) * 1000 / count


async def measure(rig: Rig, producer, level: int, burst_size: int) -> Level:
    worker = rig.worker
    assert worker is not None
    found = Level(settled=level)
    await asyncio.sleep(5.0)
    found.rss = memory_of(worker.pid)["VmRSS"]
    found.disk = directory_size(worker.settings.data_dir) / 2**20
    found.records, found.bytes = await read_changelogs(rig.settings)
    found.same_host, found.read_same = await restart(rig, worker.settings.data_dir)
    found.new_host, found.read_new = await restart(rig, rig.new_host())
    await first_sweep(rig)
    # The best of the bursts: the machine is shared, and what others do only slows a burst.
    bursts = [await burst(rig, producer, burst_size) for _ in range(BURSTS)]
    found.rate = max(rate for rate, _ in bursts)
    found.cpu_per_run = min(cpu for _, cpu in bursts)
    print(
        f"  {level:>9,} settled: VmRSS {found.rss:7.1f} MB, data directory {found.disk:.0f} MiB "
        f"| changelogs {found.records:,} "
        f"records, {found.bytes / 2**20:.1f} MiB | {found.rate:,.0f} "
        f"runs/s, {found.cpu_per_run:.2f} ms CPU/run | ready after restart {found.same_host:.1f} s (same host, read "
        f"{found.read_same}), {found.new_host:.1f} s (new host, read {found.read_new})",
        flush=True,
    )
    return found


def directory_size(path: Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def topics_variant(settings: Settings, path: Path) -> Path:
    """topics.yaml with the state changelogs' compaction shortened like the window."""
    doc = yaml.safe_load(settings.topics_file.read_text())
    for topic in doc["topics"]:
        if topic["name"] in CHANGELOGS:
            topic.setdefault("configs", {}).update(COMPACTION)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


async def run(args: argparse.Namespace, workdir: Path) -> list[Level]:
    await check_stack(Settings.from_env())
    settings = fresh_settings("hist", workdir, api_token="bench-history")
    catalog = topics_variant(settings, workdir / "topics.yaml")
    config = f"config: {{ dedup_window: {args.window} }}\n" if args.window != "none" else ""
    path = workdir / "project.yaml"
    path.write_text(PROJECT.format(config=config))
    settings = settings.model_copy(update={"project_path": path, "topics_file": catalog})
    rig = Rig(
        settings,
        workdir,
        args.python,
        settings.topic_prefix + "rflow.triggers",
        load_project(path, {}).workflows[WORKFLOW],
    )
    print(
        f"bench_history: {WORKFLOW} on one worker ({args.python}), window {args.window}, "
        f"levels {', '.join(f'{n:,}' for n in args.levels)}; logs in {workdir}",
        flush=True,
    )
    levels: list[Level] = []
    producer = None
    try:
        await prepare(settings)
        worker = rig.start(rig.new_host())
        try:
            await worker.wait_ready(timeout=120)
        except AssertionError as exc:
            raise BenchError(str(exc)) from None
        await wait_stable([worker])
        producer = await start_producer(settings)
        warm = 200
        await produce_all(producer, rig.topic, [rig.record(i) for i in range(warm)])
        rig.seq = warm
        await wait_settled(rig, warm, timeout=120)
        for level in args.levels:
            await fill(rig, producer, max(level, rig.seq))
            levels.append(await measure(rig, producer, level, args.burst))
    finally:
        if producer is not None:
            await producer.stop()
        if rig.worker is not None:
            rig.worker.stop()
        await cleanup(settings)
    return levels


def report(levels: list[Level], args: argparse.Namespace) -> None:
    zero, first, last = levels[0], levels[1], levels[-1]
    rows: list[tuple[str, ...]] = []

    def ratio(value: float, base: float) -> str:
        return f"{value / base:.2f}" if base else "-"

    for level in levels[1:]:
        n = f"{level.settled:,}"
        rows.append((f"VmRSS, {n} settled", f"{level.rss:.0f} MB", f"{zero.rss:.0f} MB (0)",
                     ratio(level.rss, zero.rss), "-", "-"))  # fmt: skip
    rows.append((
        f"VmRSS, {last.settled:,} / {first.settled:,} (after the first window)",
        f"{last.rss:.0f} MB", f"{first.rss:.0f} MB", ratio(last.rss, first.rss),
        f"<= {RSS_TARGET}x", verdict(last.rss <= RSS_TARGET * first.rss),
    ))  # fmt: skip
    for level in levels[1:]:
        n = f"{level.settled:,}"
        rows.append((f"data directory, {n} settled", f"{level.disk:.0f} MiB",
                     f"{zero.disk:.0f} MiB (0)", ratio(level.disk, zero.disk), "-", "-"))  # fmt: skip
    for level in levels:
        n = f"{level.settled:,}"
        rows.append((f"restart to ready, same host, {n} settled", f"{level.same_host:.1f} s",
                     f"{zero.same_host:.1f} s (0)", ratio(level.same_host, zero.same_host),
                     f"< {RESTART_TARGET:.0f} s", verdict(level.same_host < RESTART_TARGET)))  # fmt: skip
    for level in levels[1:]:
        n = f"{level.settled:,}"
        rows.append((f"restart to ready, new host, {n} settled", f"{level.new_host:.1f} s",
                     f"{zero.new_host:.1f} s (0)", ratio(level.new_host, zero.new_host), "-", "-"))  # fmt: skip
    for level in levels[1:]:
        n = f"{level.settled:,}"
        rows.append((f"changelog records, {n} settled",
                     f"{level.records:,} ({level.bytes / 2**20:.1f} MiB)",
                     f"{zero.records:,} (0)", "-", "-", "-"))  # fmt: skip
    rows.append((
        f"changelog records, {last.settled:,} / {first.settled:,} (bounded by the window)",
        f"{last.records:,}", f"{first.records:,}", ratio(last.records, first.records),
        f"<= {RECORDS_TARGET}x", verdict(last.records <= RECORDS_TARGET * first.records),
    ))  # fmt: skip
    for level in levels[1:]:
        n = f"{level.settled:,}"
        met = level.rate >= RATE_TARGET * zero.rate
        rows.append((f"runs/s, {n} settled", f"{level.rate:,.0f}", f"{zero.rate:,.0f} (0)",
                     ratio(level.rate, zero.rate), f">= {RATE_TARGET}x",
                     verdict(met) if level is last else ("met" if met else "-")))  # fmt: skip
    for level in levels[1:]:
        n = f"{level.settled:,}"
        rows.append((f"worker CPU per run, {n} settled", f"{level.cpu_per_run:.2f} ms",
                     f"{zero.cpu_per_run:.2f} ms (0)", ratio(level.cpu_per_run, zero.cpu_per_run),
                     "-", "-"))  # fmt: skip
    emit("history", rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", help="settled firings to measure at")
    parser.add_argument("--window", help="config.dedup_window (default 60s; quick 15s; none)")
    parser.add_argument("--burst", type=int, help="firings of each runs/s burst (default 20000)")
    parser.add_argument("--quick", action="store_true", help="levels up to 100,000")
    parser.add_argument("--python", default=sys.executable, help="the worker's interpreter")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    args.levels = sorted({0, *(args.levels or (QUICK_LEVELS if args.quick else LEVELS))})
    args.window = args.window or ("15s" if args.quick else "60s")
    args.burst = args.burst or (5_000 if args.quick else 20_000)
    if len(args.levels) < 2:
        parser.error("give at least one level above 0")

    async def work(workdir: Path) -> None:
        report(await run(args, workdir), args)

    run_benchmark("bench_history", work, args.keep)


if __name__ == "__main__":
    main()
