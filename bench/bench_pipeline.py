"""Runs per second and trigger-to-completion latency of a three-step off-chain workflow.

    python bench/bench_pipeline.py [--runs N] [--duration S] [--quick]
                                   [--profile] [--diagnose] [--variant no-state]

Needs the local stack (`scripts/stack up`). The workflow (manual trigger) is

    state_set -> choose (on a trigger field) -> notify (webhook channel -> local HTTP sink)

run by real `rflow worker` processes. Every figure is printed beside a baseline measured
in the same run, as a ratio, because the machine is shared and numbers are noisy. The
baseline is a bare Faust agent doing one table update per event (bench/_baseline_agent.py)
on its own topic with the partition count of rflow.triggers, fed the same records.

Phases:
  1. peak throughput, one worker: N triggers produced as fast as possible; runs/s is N over
     the time from the first produce to the N-th notify reaching the sink (also shown:
     until the read model has settled every run, and the workers' CPU per run);
  2. latency at half that peak rate, for a fixed duration: the sink's arrival time of
     each run's notify minus the time its trigger was produced (p50, p99), with where it
     goes (from the read model's step timestamps);
  3. the baseline: the same N records (events/s), then the same paced load (latency);
     then the same N records through a bare agent that moves as many Kafka records per
     event as a run moves (bench/_baseline_agent.py with BENCH_JOURNAL), which shows
     how much of the gap is the Kafka traffic a run needs and how much rflow's own work;
  4. two workers in one consumer group: phase 1 again (speed-up = runs/s(2) / runs/s(1)).
     Measured only once the group is Stable with both members ready, so the figure is
     throughput, not a rebalance (tests/integration/test_scaling.py covers those).

--profile adds a phase 1 under py-spy (pip install py-spy) and prints where the worker's
time goes; --diagnose runs the one-worker phases in bench/_instrumented_worker.py, which
notes event-loop lag and garbage-collector pauses, traces each trigger through the
worker (handed to Faust, put into the runner's queue, taken) and so shows, stage by
stage, where the slowest 1 % of a latency phase's runs spent their time beside every
run (with BENCH_CPROFILE=<file> it also writes the worker's cProfile statistics of phase
1 there); --variant no-state drops the state_set
step, to show what it costs.

Targets: p99 < 250 ms at half the peak rate; two workers >= 1.25x one. The runs/s target
is Restate's (bench_peers.py); the bare agent shows what Faust and Kafka alone cost. Each
peak phase also shows which processes used the machine's CPU per run: the workers, Kafka,
Postgres and this benchmark share the cores, so how busy the machine was with one worker
and with two, and what every process spent per run, tell how far two workers can go.
Everything the run creates (processes, schema, topics) is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import emit
from _stack import (
    REPO,
    STALLED,
    BenchError,
    CpuMeter,
    TimingSink,
    Worker,
    check_stack,
    cleanup,
    delete_topics,
    fresh_settings,
    memory_of,
    percentile,
    prepare,
    produce_all,
    produce_paced,
    profile_summary,
    read_diagnostics,
    read_fetches,
    read_trace,
    run_benchmark,
    stack_pids,
    start_process,
    start_producer,
    start_profiler,
    stop_process,
    stop_profiler,
    wait_for,
    wait_stable,
    written_profile,
)
from aiokafka.admin import NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from rflow import storage
from rflow.codecs import encode
from rflow.engine import provenance
from rflow.lang import load_project
from rflow.settings import Settings
from rflow.streams import kafka
from rflow.streams.topics import Catalog
from rflow.triggering import trigger_record
from tests.integration.harness import free_port

HERE = Path(__file__).resolve().parent
WORKFLOW = "bench"
PROJECT = """\
channels:
  hook: {{ type: webhook, url: "{sink}/notify" }}
workflows:
  bench:
    trigger: {{ manual: {{}} }}
    steps:
      - id: remember
        state_set: {{ last_seq: "${{{{ trigger.seq }}}}" }}
      - id: route
        choose:
          branches:
            - when: {{ value: "${{{{ trigger.priority }}}}", op: equals, to: high }}
              goto: tell
          default: continue
      - id: tell
        notify: {{ channel: hook, message: "run ${{{{ trigger.seq }}}} (${{{{ trigger.priority }}}})" }}
"""
# For diagnosis (--variant no-state): the same workflow without its Postgres step.
PROJECT_NO_STATE = "\n".join(
    line for line in PROJECT.splitlines() if "id: remember" not in line and "state_set:" not in line
)
PROJECTS = {"full": PROJECT, "no-state": PROJECT_NO_STATE}


class Phase:
    """One measured batch: trigger keys and what each produced record carries."""

    def __init__(self, label: str, count: int) -> None:
        self.label = label
        self.count = count
        self.trigger_keys = [f"manual:{label}-{i}" for i in range(count)]

    def payload(self, i: int, sent: float = 0.0) -> dict:
        return {"seq": i, "priority": "high" if i % 2 else "low", "sent": sent}


# --- rflow under test -----------------------------------------------------------------


class RflowRig:
    """Fresh topics, schema and consumer group, a project file, and N worker processes."""

    def __init__(
        self,
        tag: str,
        workdir: Path,
        sink: TimingSink,
        workers: int,
        diagnose: bool = False,
        project: str = PROJECT,
        transactions: bool | None = None,
        commit_interval: float | None = None,
    ) -> None:
        self.commit_interval = commit_interval
        self.project = project
        self.diagnose = diagnose
        self.diag_paths: list[Path] = []
        self.workdir = workdir
        self.sink = sink
        self.settings = fresh_settings(tag, workdir)
        if transactions is not None:
            self.settings = self.settings.model_copy(update={"kafka_transactions": transactions})
        self.tag = tag
        self.worker_count = workers
        self.workers: list[Worker] = []
        self.conn: psycopg.AsyncConnection | None = None
        self.topic = self.settings.topic_prefix + "rflow.triggers"

    async def start(self) -> RflowRig:
        await prepare(self.settings)
        if self.diagnose:  # the trace splits a trigger's fetch at the broker's append
            admin = kafka.admin(self.settings)
            await admin.start()
            try:
                await admin.alter_configs(
                    [
                        ConfigResource(
                            ConfigResourceType.TOPIC,
                            self.topic,
                            # alter_configs replaces a topic's configuration: keep the
                            # catalog's settings beside the one changed
                            {
                                **Catalog.from_settings(self.settings)
                                .spec("rflow.triggers")
                                .configs,
                                "message.timestamp.type": "LogAppendTime",
                            },
                        )
                    ]
                )
            finally:
                await admin.close()
        path = self.workdir / f"project-{self.tag}.yaml"
        path.write_text(self.project.format(sink=self.sink.url))
        self.settings = self.settings.model_copy(update={"project_path": path})
        self.workflow = load_project(path, {}).workflows[WORKFLOW]
        self.conn = await storage.connect(self.settings)
        for i in range(self.worker_count):
            worker_settings = self.settings.model_copy(
                update={"data_dir": self.settings.data_dir / f"w{i}"}
            )
            diag = self.workdir / f"diag-{self.tag}-{i}.jsonl"
            self.diag_paths.append(diag)
            worker = Worker(
                worker_settings,
                self.workdir / f"worker-{self.tag}-{i}.log",
                instrumented=self.diagnose or self.commit_interval is not None,
                extra_env={
                    **({"BENCH_DIAG": str(diag)} if self.diagnose else {}),
                    **(
                        {"BENCH_COMMIT_INTERVAL": str(self.commit_interval)}
                        if self.commit_interval is not None
                        else {}
                    ),
                },
            )
            self.workers.append(worker.start())
        for worker in self.workers:
            try:
                await worker.wait_ready(timeout=120)
            except AssertionError as exc:
                raise BenchError(str(exc)) from None
        await wait_stable(self.workers)
        return self

    def alive(self) -> None:
        for worker in self.workers:
            worker.check_alive()

    def record(self, trigger_key: str, payload: dict) -> tuple[bytes, bytes]:
        record = trigger_record(
            WORKFLOW,
            self.workflow,
            source="manual",
            trigger_key=trigger_key,
            payload=payload,
            received_at=datetime.now(UTC),
        )
        # As rflow's manual ingress produces it: vouched for with the workers' keys.
        vouched = provenance.vouch(record, self.settings.ingress_keyring)
        return record.partition_key.encode(), encode(vouched)

    @staticmethod
    def notify_key(trigger_key: str) -> str:
        return f"{WORKFLOW}:{trigger_key}:tell"

    async def statuses(self, label: str) -> dict[str, int]:
        assert self.conn is not None
        cur = await self.conn.execute(
            "SELECT status, count(*) FROM runs WHERE trigger_key LIKE %s GROUP BY status",
            (f"manual:{label}-%",),
        )
        return dict(await cur.fetchall())

    async def settled(self, label: str) -> int:
        assert self.conn is not None
        cur = await self.conn.execute(
            "SELECT count(*) FROM runs WHERE settled_at IS NOT NULL AND trigger_key LIKE %s",
            (f"manual:{label}-%",),
        )
        (count,) = await cur.fetchone()
        return count

    async def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        if self.conn is not None:
            await self.conn.close()
        await cleanup(self.settings)


async def rflow_peak(rig: RflowRig, producer, phase: Phase) -> dict:
    """Produce every trigger at once; runs/s until the last notify reaches the sink."""
    records = [rig.record(key, phase.payload(i)) for i, key in enumerate(phase.trigger_keys)]
    notify_keys = [rig.notify_key(key) for key in phase.trigger_keys]
    meter = CpuMeter(
        {
            "workers": [w.pid for w in rig.workers],
            "kafka": stack_pids(REPO, "kafka"),
            "postgres": stack_pids(REPO, "postgres"),
        }
    )
    sampler = LockSampler(rig.settings)
    await sampler.start()
    try:
        first = await produce_all(producer, rig.topic, records)
        produced = time.time() - first
        await wait_for(
            lambda: rig.sink.count(notify_keys) >= phase.count,
            timeout=60 + phase.count / 5,
            what=f"{phase.count} notify calls ({phase.label})",
            alive=rig.alive,
        )
    finally:
        locks = await sampler.stop()
    last = max(rig.sink.arrivals[key] for key in notify_keys)

    async def projected() -> bool:
        return await rig.settled(phase.label) >= phase.count

    await wait_for(projected, timeout=120, what="the read model to settle every run", interval=0.1)
    read_model = time.time() - first
    cpu = meter.stop()  # until the read model has every run: the projector's work included
    elapsed = last - first
    statuses = await rig.statuses(phase.label)
    return {
        "count": phase.count,
        "elapsed": elapsed,
        "rate": phase.count / elapsed,
        "produce": produced,
        "read_model": read_model,
        "read_model_rate": phase.count / read_model,
        "statuses": statuses,
        "rss": [memory_of(w.pid)["VmRSS"] for w in rig.workers],
        "cpu_per_item": cpu["cpu"]["workers"] / phase.count,
        "cpu_share": cpu["cores"]["workers"],
        "machine_busy": cpu["machine_busy"],
        # Per run, everything the machine did: which processes did it.
        "machine_per_item": {
            "workers": cpu["cpu"]["workers"] / phase.count,
            "Kafka": cpu["cpu"]["kafka"] / phase.count,
            "Postgres": cpu["cpu"]["postgres"] / phase.count,
            "this benchmark (producer, sink)": cpu["driver"] / phase.count,
            "the rest": cpu["others"] * cpu["wall"] / phase.count,
        },
        "diag": diagnostics(rig, first, last),
        "locks": locks,
    }


class LockSampler:
    """Samples, every 20 ms, the Postgres sessions running a statement and those waiting
    for an advisory lock (state_set serializes a workflow's state operations with one).
    The database is shared with other users of the stack: figures are approximate."""

    QUERY = """
    SELECT count(*) FILTER (WHERE state = 'active'),
           count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = 'advisory')
    FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.samples: list[tuple[int, int]] = []
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        self.conn = await storage.connect(self.settings)
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            cur = await self.conn.execute(self.QUERY)
            self.samples.append(await cur.fetchone())
            await asyncio.sleep(0.02)

    async def stop(self) -> dict[str, float]:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.conn.close()
        n = len(self.samples) or 1
        return {
            "active": sum(a for a, _ in self.samples) / n,
            "advisory_waiting": sum(w for _, w in self.samples) / n,
        }


def diagnostics(rig: RflowRig, since: float, until: float) -> dict | None:
    if not rig.diagnose:
        return None
    return read_diagnostics(rig.diag_paths[0], since, until)


def describe_machine(peak: dict) -> str:
    parts = ", ".join(f"{name} {ms * 1000:.2f}" for name, ms in peak["machine_per_item"].items())
    return f"      the machine's CPU per run (ms): {parts}"


def print_stages(lat: dict, indent: str) -> None:
    """A latency phase's stages (p50 and p99 of each), and its diagnosis when taken."""
    for name, p50, p99 in lat["stages"]:
        print(f"{indent}{name:46s} p50 {p50 * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms")
    if lat.get("tail"):
        print(
            f"{indent}the slowest {TAIL:.0%} of runs, stage by stage (median of every run; of the slowest, their mean):"
        )
        for name, every, slow, mean in lat["tail"]:
            print(
                f"{indent}  {name:46s} {every * 1000:7.1f} ms  {slow * 1000:7.1f} ms  {mean * 1000:7.1f} ms"
            )
    if lat["diag"]:
        print(describe_diag(lat["diag"]), flush=True)


def describe_diag(diag: dict | None) -> str:
    if not diag:
        return ""
    return (
        f"        event-loop lag p50 {diag['lag_p50'] * 1000:.1f} ms, "
        f"p99 {diag['lag_p99'] * 1000:.1f} ms, max {diag['lag_max'] * 1000:.1f} ms; "
        f"GC: {diag['gc_count']} collections, {diag['gc_total'] * 1000:.0f} ms in all, "
        f"{diag['gc2_count']} full (longest {diag['gc2_max'] * 1000:.0f} ms)\n"
        f"        a trigger from its producer to the runner's queue p50 "
        f"{diag['fetched_p50'] * 1000:.1f} ms, p99 {diag['fetched_p99'] * 1000:.1f} ms; "
        f"in the queue p50 {diag['queued_p50'] * 1000:.1f} ms, "
        f"p99 {diag['queued_p99'] * 1000:.1f} ms; a runs-topic record: p50 "
        f"{diag['fetched_runs_p50'] * 1000:.1f} ms to the queue, "
        f"{diag['queued_runs_p50'] * 1000:.1f} ms in it\n"
        f"        {diag['checkpoints']} checkpoints: p50 {diag['checkpoint_p50'] * 1000:.1f} ms, "
        f"p99 {diag['checkpoint_p99'] * 1000:.1f} ms (their commit p50 "
        f"{diag['commit_p50'] * 1000:.1f} ms)\n"
        f"        the worker's loop, watched every 5 ms: woke up {STALLED * 1000:.0f} ms or "
        f"more late {diag['thread_stalls']} times, at most {diag['thread_stall_max'] * 1000:.0f} ms "
        f"late, {diag['thread_stalled']:.1f} s late in all"
    )


async def rflow_latency(rig: RflowRig, producer, phase: Phase, rate: float) -> dict:
    sent_at: list[float] = [0.0] * phase.count
    placed: list[tuple[int, int]] = []

    def make(i: int, now: float) -> tuple[bytes, bytes]:
        sent_at[i] = now
        return rig.record(phase.trigger_keys[i], phase.payload(i, now))

    achieved = await produce_paced(producer, rig.topic, rate, phase.count, make, placed)
    notify_keys = [rig.notify_key(key) for key in phase.trigger_keys]
    await wait_for(
        lambda: rig.sink.count(notify_keys) >= phase.count,
        timeout=120,
        what=f"{phase.count} notify calls ({phase.label})",
        alive=rig.alive,
    )
    latencies = [rig.sink.arrivals[k] - sent_at[i] for i, k in enumerate(notify_keys)]
    diag = diagnostics(rig, sent_at[0], max(rig.sink.arrivals[k] for k in notify_keys))

    async def projected() -> bool:
        return await rig.settled(phase.label) >= phase.count

    await wait_for(projected, timeout=120, what="the read model to settle every run", interval=0.1)
    statuses = await rig.statuses(phase.label)
    rows = await stage_rows(rig, phase)
    stages = stage_breakdown(rig, rows)
    tail = tail_breakdown(rig, phase, rows, sent_at, placed) if rig.diagnose else []
    return summarize(latencies) | {
        "achieved": achieved,
        "statuses": statuses,
        "stages": stages,
        "tail": tail,
        "diag": diag,
    }


_STAGES = """
SELECT r.trigger_key, (r.trigger->>'sent')::float8, extract(epoch FROM r.created_at)::float8,
       extract(epoch FROM a.started_at)::float8, extract(epoch FROM a.settled_at)::float8,
       extract(epoch FROM c.started_at)::float8
FROM runs r
JOIN step_logs a ON a.run_id = r.run_id AND a.path = 'remember'
JOIN step_logs c ON c.run_id = r.run_id AND c.path = 'tell'
WHERE r.trigger_key LIKE %s
"""


async def stage_rows(rig: RflowRig, phase: Phase) -> list[tuple]:
    """The read model's timestamps of each run of ``phase`` (the engine's clock when it
    journaled each event): trigger key, sent, created, state_set started and settled,
    notify started."""
    assert rig.conn is not None
    cur = await rig.conn.execute(_STAGES, (f"manual:{phase.label}-%",))
    return await cur.fetchall()


def stage_breakdown(rig: RflowRig, rows: list[tuple]) -> list[tuple[str, float, float]]:
    """Where a run's latency goes, from the read model's timestamps (:func:`stage_rows`)
    and the sink's arrival times: (stage, p50, p99)."""
    if not rows:
        return []
    columns: dict[str, list[float]] = {}
    for key, sent, created, started, settled, tell in rows:
        arrival = rig.sink.arrivals.get(rig.notify_key(key))
        if arrival is None:
            continue
        for name, value in (
            ("trigger produced -> run started (admission)", created - sent),
            ("state_set started -> its result journaled", settled - started),
            ("state_set result -> notify started (choose)", tell - settled),
            ("notify started -> sink received it", arrival - tell),
        ):
            columns.setdefault(name, []).append(value)
    return [(name, percentile(v, 50), percentile(v, 99)) for name, v in columns.items()]


TAIL = 0.01
"""The share of the slowest runs the tail's breakdown looks at."""


def tail_breakdown(
    rig: RflowRig,
    phase: Phase,
    rows: list[tuple],
    sent_at: list[float],
    placed: list[tuple[int, int]],
) -> list[tuple[str, float, float, float]]:
    """Where the slowest :data:`TAIL` of a phase's runs spent their time, stage by stage,
    beside every run: (stage, median of all, median of the slowest, their mean), from
    the instrumented worker's trace of each trigger (appended by the broker: the topic's
    timestamps are its log-append times while diagnosing; handed to Faust, put into the
    runner's queue, taken) and the read model's (:func:`stage_rows`) and the sink's
    times. Where the worker timed its consumer's fetches, the fetch is split in three
    (:func:`fetch_stages`)."""
    trace = read_trace(rig.diag_paths[0])
    fetches = read_fetches(rig.diag_paths[0])
    by_key = {row[0]: row for row in rows}
    runs: list[tuple[float, dict[str, float | None]]] = []
    for i, key in enumerate(phase.trigger_keys):
        row = by_key.get(key)
        arrival = rig.sink.arrivals.get(rig.notify_key(key))
        times = trace.get(placed[i]) if i < len(placed) else None
        if row is None or arrival is None or times is None:
            continue
        _, _, created, started, settled, tell = row
        drained, put, taken, appended = times
        runs.append(
            (
                arrival - sent_at[i],
                {
                    "produced -> appended (the client, the broker)": appended - sent_at[i],
                    "appended -> handed to Faust (the fetch)": drained - appended,
                    **fetch_stages(fetches.get(placed[i][0]), appended, drained),
                    "handed to Faust -> in the runner's queue": put - drained,
                    "in the runner's queue": taken - put,
                    "taken -> run started (admission)": created - taken,
                    "run started -> state_set started": started - created,
                    "state_set started -> its result journaled": settled - started,
                    "state_set result -> notify started (choose)": tell - settled,
                    "notify started -> sink received it": arrival - tell,
                },
            )
        )
    if not runs:
        return []
    runs.sort(key=lambda item: item[0])
    slowest = runs[-max(1, round(len(runs) * TAIL)) :]
    names = list(dict.fromkeys(name for _, stages in runs for name in stages))
    breakdown = []
    for name in names:  # a fetch not split leaves its three parts out of the medians
        every = [stages[name] for _, stages in runs if stages.get(name) is not None]
        slow = [stages[name] for _, stages in slowest if stages.get(name) is not None]
        if every and slow:
            if len(slow) < len(slowest):
                name = f"{name} [{len(slow)} of {len(slowest)}]"
            breakdown.append(
                (name, statistics.median(every), statistics.median(slow), statistics.fmean(slow))
            )
    return breakdown


FETCH_STAGES = (
    "  of it: waiting for a fetch to be sent",
    "  of it: the fetch (sent -> response handled)",
    "  of it: response handled -> handed to Faust",
)


def fetch_stages(
    fetches: tuple[list[float], list[float]] | None, appended: float, drained: float
) -> dict[str, float | None]:
    """A trigger's fetch in three: waiting for a fetch to be sent (none that would bring
    it was under way when the broker appended it), the fetch that brought it (from when
    it was sent, or the append if later, to its response handled) and from there to
    being handed to Faust (Faust asking for it, and the turns of the loop before its
    fetcher hands it over). The fetch that brought it
    is the last one naming its partition whose response was handled before it was
    handed over. ``fetches``: the fetches naming its partition, (sent times, handled
    times) in the order of the latter. ``None`` for each where that is unknown: no such
    fetch, or one handled before the append (a fetch went unnoted)."""
    unknown: dict[str, float | None] = dict.fromkeys(FETCH_STAGES)
    if not fetches:
        return unknown
    sent_at, handled_at = fetches
    index = bisect.bisect_right(handled_at, drained) - 1
    if index < 0 or handled_at[index] < appended:
        return unknown
    handled = handled_at[index]
    began = min(max(sent_at[index], appended), handled)
    waiting, fetch, handing = FETCH_STAGES
    return {waiting: began - appended, fetch: handled - began, handing: drained - handled}


def summarize(latencies: list[float]) -> dict:
    return {
        "count": len(latencies),
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "max": max(latencies),
    }


# --- the baseline: a bare Faust agent -------------------------------------------------


class BaselineRig:
    """The bare Faust agent in its own process, on its own topics and consumer group."""

    def __init__(
        self, workdir: Path, settings: Settings, partitions: int, *, run_shaped: bool = False
    ) -> None:
        unique = uuid.uuid4().hex[:8]
        self.run_shaped = run_shaped
        self.settings = settings
        """The Kafka connection (the benchmark's settings)."""
        self.partitions = partitions
        self.prefix = f"benchbase{unique}."
        self.app_id = f"bench-baseline-{unique}"
        self.topic = self.prefix + "bench.events"
        self.changelog = self.prefix + "bench.state"
        self.journal = self.prefix + "bench.journal"
        self.out = workdir / f"baseline-{unique}.out"
        self.log = workdir / f"baseline-{unique}.log"
        self.data_dir = workdir / f"baseline-data-{unique}"
        self.proc = None
        self._log = None
        self.done: dict[str, tuple[float, float]] = {}
        self._offset = 0

    async def start(self) -> BaselineRig:
        admin = kafka.admin(self.settings, request_timeout_ms=15000)
        await admin.start()
        try:
            topics = [
                NewTopic(self.topic, self.partitions, 1),
                NewTopic(
                    self.changelog, self.partitions, 1, topic_configs={"cleanup.policy": "compact"}
                ),
            ]
            if self.run_shaped:
                topics.append(NewTopic(self.journal, self.partitions, 1))
            await admin.create_topics(topics, timeout_ms=15000)

            async def led() -> bool:
                described = await admin.describe_topics([t.name for t in topics])
                return len(described) == len(topics) and all(
                    len(t["partitions"]) == self.partitions
                    and all(p["leader"] >= 0 for p in t["partitions"])
                    for t in described
                )

            await wait_for(
                led, timeout=30, what="the baseline topics to have leaders", interval=0.1
            )
        finally:
            await admin.close()
        self.out.touch()
        env = {
            **os.environ,
            **kafka.environment(self.settings),
            "BENCH_APP_ID": self.app_id,
            "BENCH_TOPIC": self.topic,
            "BENCH_CHANGELOG": self.changelog,
            "BENCH_PARTITIONS": str(self.partitions),
            "BENCH_OUT": str(self.out),
            "BENCH_WEB_PORT": str(free_port()),
            "BENCH_DATA_DIR": str(self.data_dir),
            **({"BENCH_JOURNAL": self.journal} if self.run_shaped else {}),
        }
        command = [sys.executable, str(HERE / "_baseline_agent.py")]
        self.proc, self._log = start_process(command, env, self.log)
        return self

    def alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace").splitlines()[-30:]
            raise BenchError(
                f"baseline agent exited with {self.proc.returncode}:\n" + "\n".join(tail)
            )

    def read(self) -> dict[str, tuple[float, float]]:
        """Take in the lines the agent wrote since the last call."""
        with self.out.open("rb") as fh:
            fh.seek(self._offset)
            chunk = fh.read()
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        for line in chunk[:end].decode().splitlines():
            key, sent, done = line.split(" ")
            self.done.setdefault(key, (float(sent), float(done)))
        return self.done

    def count(self, keys: list[str]) -> int:
        done = self.read()
        return sum(1 for key in keys if key in done)

    async def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self._log.close()
        try:
            await asyncio.wait_for(
                delete_topics(self.settings, (self.prefix, self.app_id + "-")), 60
            )
        except Exception as exc:
            print(f"  cleanup of baseline topics failed: {exc!r}", file=sys.stderr)


async def baseline_peak(base: BaselineRig, rig: RflowRig, producer, phase: Phase) -> dict:
    records = [rig.record(key, phase.payload(i)) for i, key in enumerate(phase.trigger_keys)]
    meter = CpuMeter({"agent": [base.proc.pid]})
    first = await produce_all(producer, base.topic, records)
    await wait_for(
        lambda: base.count(phase.trigger_keys) >= phase.count,
        timeout=60 + phase.count / 20,
        what=f"the baseline agent to process {phase.count} events",
        alive=base.alive,
    )
    cpu = meter.stop()
    last = max(base.done[key][1] for key in phase.trigger_keys)
    elapsed = last - first
    return {
        "count": phase.count,
        "elapsed": elapsed,
        "rate": phase.count / elapsed,
        "cpu_per_item": cpu["cpu"]["agent"] / phase.count,
    }


async def baseline_latency(
    base: BaselineRig, rig: RflowRig, producer, phase: Phase, rate: float
) -> dict:
    def make(i: int, now: float) -> tuple[bytes, bytes]:
        return rig.record(phase.trigger_keys[i], phase.payload(i, now))

    achieved = await produce_paced(producer, base.topic, rate, phase.count, make)
    await wait_for(
        lambda: base.count(phase.trigger_keys) >= phase.count,
        timeout=120,
        what=f"the baseline agent to process {phase.count} events",
        alive=base.alive,
    )
    latencies = [base.done[k][1] - base.done[k][0] for k in phase.trigger_keys]
    return summarize(latencies) | {"achieved": achieved}


async def profile_peak(rig: RflowRig, producer, workdir: Path, n: int) -> str:
    out = workdir / "worker-profile.txt"
    spy = start_profiler(rig.workers[0].pid, out)
    if spy is None:
        return "  py-spy is not installed (pip install py-spy): no profile"
    try:
        await asyncio.sleep(1.0)  # let py-spy attach
        peak = await rflow_peak(rig, producer, Phase(f"{rig.tag}prof", n))
    finally:
        stop_profiler(spy)
    head = f"  worker profile during {n} runs ({peak['rate']:.1f} runs/s under py-spy), {out}:"
    return head + "\n" + profile_summary(out)


# --- the run --------------------------------------------------------------------------


async def warm_up_rflow(rig: RflowRig, producer, count: int) -> None:
    phase = Phase(f"warm{rig.tag}", count)
    await rflow_peak(rig, producer, phase)


async def compare_transactions(args: argparse.Namespace, workdir: Path) -> None:
    """Phases 1 and 2 with the checkpoints' Kafka transactions off, then on (and so for
    ``rounds``), each beside the other in the same run: what fencing costs."""
    probe = Settings.from_env()
    await check_stack(probe)
    n, duration = args.runs, args.duration
    warm = min(100, max(20, n // 10))
    print(
        f"bench_pipeline --compare-transactions: {n} runs per peak phase, {duration:g}s "
        f"latency phases, {args.rounds} round(s); logs in {workdir}",
        flush=True,
    )
    sink = await TimingSink().start()
    producer = await start_producer(probe, linger_ms=args.linger_ms)
    found: dict[bool, list[dict]] = {False: [], True: []}
    try:
        for round_ in range(args.rounds):
            for transactions in (False, True):
                label = "on" if transactions else "off"
                tag = f"t{label}{round_}"
                rig = RflowRig(
                    tag,
                    workdir,
                    sink,
                    workers=1,
                    diagnose=args.diagnose,
                    project=PROJECTS[args.variant],
                    transactions=transactions,
                    commit_interval=args.commit_interval if transactions else None,
                )
                try:
                    await rig.start()
                    await warm_up_rflow(rig, producer, warm)
                    peak = await rflow_peak(rig, producer, Phase(f"{tag}peak", n))
                    rate = args.rate or peak["rate"] / 2
                    count = max(10, round(rate * duration))
                    lat = await rflow_latency(rig, producer, Phase(f"{tag}lat", count), rate)
                finally:
                    await rig.stop()
                found[transactions].append({"peak": peak, "lat": lat})
                kafka_cpu = peak["machine_per_item"]["Kafka"]
                print(
                    f"  round {round_ + 1}, transactions {label}: peak {peak['rate']:.1f} runs/s "
                    f"(worker CPU {peak['cpu_per_item'] * 1000:.2f} ms/run, Kafka "
                    f"{kafka_cpu * 1000:.2f} ms/run); at {rate:.1f}/s p50 "
                    f"{lat['p50'] * 1000:.1f} ms, p99 {lat['p99'] * 1000:.1f} ms",
                    flush=True,
                )
                print_stages(lat, "      ")
    finally:
        await producer.stop()
        await sink.stop()
    for key, what in (("p50", "p50 at half peak"), ("p99", "p99 at half peak")):
        off = statistics.median(r["lat"][key] for r in found[False])
        on = statistics.median(r["lat"][key] for r in found[True])
        print(
            f"  {what:18s} on {on * 1000:7.1f} ms  off {off * 1000:7.1f} ms  on/off {on / off:.2f}"
        )
    off = statistics.median(r["peak"]["rate"] for r in found[False])
    on = statistics.median(r["peak"]["rate"] for r in found[True])
    print(f"  {'peak runs/s':18s} on {on:7.1f}     off {off:7.1f}     on/off {on / off:.2f}")


async def run(args: argparse.Namespace, workdir: Path) -> None:
    probe = Settings.from_env()
    await check_stack(probe)
    partitions = Catalog.from_settings(probe).spec("rflow.triggers").partitions
    n = args.runs
    duration = args.duration
    warm = min(100, max(20, n // 10))
    print(
        f"bench_pipeline: workflow {args.variant}, {n} runs per peak phase, "
        f"{duration:g}s latency phases, "
        f"{partitions} partitions, {os.cpu_count()} CPUs; logs in {workdir}"
    )

    sink = await TimingSink().start()
    producer = await start_producer(probe, linger_ms=args.linger_ms)
    opened: list = []
    results: dict = {}
    try:
        # 1 + 2: one worker, peak then latency at half the peak.
        print("[1/4] one rflow worker: starting ...", flush=True)
        project = PROJECTS[args.variant]
        one = RflowRig("p1", workdir, sink, workers=1, diagnose=args.diagnose, project=project)
        opened.append(one)
        await one.start()
        await warm_up_rflow(one, producer, warm)
        cprofile = os.environ.get("BENCH_CPROFILE") if args.diagnose else None
        if cprofile:
            Path(f"{cprofile}.start").touch()
            await asyncio.sleep(0.1)
        peak1 = await rflow_peak(one, producer, Phase("p1peak", n))
        if cprofile:
            await written_profile(Path(cprofile))
        results["peak1"] = peak1
        print(
            f"      peak: {n} runs in {peak1['elapsed']:.2f} s = {peak1['rate']:.1f} runs/s "
            f"(produced in {peak1['produce']:.2f} s; read model settled after "
            f"{peak1['read_model']:.2f} s; statuses {peak1['statuses']}; "
            f"worker RSS {peak1['rss'][0]:.0f} MB)",
            flush=True,
        )
        print(
            f"      worker CPU {peak1['cpu_per_item'] * 1000:.2f} ms per run "
            f"({peak1['cpu_share']:.2f} cores); machine {peak1['machine_busy']:.0%} busy; "
            f"Postgres sessions: {peak1['locks']['active']:.1f} active, "
            f"{peak1['locks']['advisory_waiting']:.1f} waiting on an advisory lock (mean)",
            flush=True,
        )
        print(describe_machine(peak1), flush=True)
        if peak1["diag"]:
            print(describe_diag(peak1["diag"]), flush=True)
        rate = peak1["rate"] / 2
        lat_count = max(10, round(rate * duration))
        print(f"[2/4] latency at {rate:.1f} runs/s for {duration:g} s ...", flush=True)
        lat1 = await rflow_latency(one, producer, Phase("p1lat", lat_count), rate)
        results["lat1"] = lat1
        print(
            f"      {lat1['count']} runs (sent at {lat1['achieved']:.1f}/s): "
            f"p50 {lat1['p50'] * 1000:.1f} ms, p99 {lat1['p99'] * 1000:.1f} ms, "
            f"max {lat1['max'] * 1000:.1f} ms; statuses {lat1['statuses']}",
            flush=True,
        )
        print_stages(lat1, "        ")
        if args.profile:
            print(
                "      profiling one worker with py-spy during another peak phase ...", flush=True
            )
            results["profile"] = await profile_peak(one, producer, workdir, n)
        opened.remove(one)
        await one.stop()

        # 3: the baseline, same records, same pacing.
        print("[3/4] baseline (bare Faust agent): starting ...", flush=True)
        base = BaselineRig(workdir, probe, partitions)
        opened.append(base)
        await base.start()
        await baseline_peak(base, one, producer, Phase("bwarm", warm))
        bpeak = await baseline_peak(base, one, producer, Phase("bpeak", n))
        results["bpeak"] = bpeak
        print(
            f"      peak: {n} events in {bpeak['elapsed']:.3f} s = {bpeak['rate']:.1f} events/s "
            f"(agent CPU {bpeak['cpu_per_item'] * 1000:.3f} ms per event)",
            flush=True,
        )
        blat = await baseline_latency(base, one, producer, Phase("blat", lat_count), rate)
        results["blat"] = blat
        print(
            f"      latency at {rate:.1f}/s: p50 {blat['p50'] * 1000:.1f} ms, "
            f"p99 {blat['p99'] * 1000:.1f} ms, max {blat['max'] * 1000:.1f} ms",
            flush=True,
        )
        opened.remove(base)
        await base.stop()
        shaped = BaselineRig(workdir, probe, partitions, run_shaped=True)
        opened.append(shaped)
        await shaped.start()
        await baseline_peak(shaped, one, producer, Phase("swarm", warm))
        speak = await baseline_peak(shaped, one, producer, Phase("speak", n))
        results["speak"] = speak
        print(
            f"      with a run's Kafka records (4 table updates, 3 journal records written "
            f"and read per event): {speak['rate']:.1f} events/s "
            f"(agent CPU {speak['cpu_per_item'] * 1000:.3f} ms per event)",
            flush=True,
        )
        opened.remove(shaped)
        await shaped.stop()

        # 4: two workers in one consumer group.
        if not args.skip_two:
            print("[4/4] two rflow workers: starting ...", flush=True)
            two = RflowRig("p2", workdir, sink, workers=2, project=project)
            opened.append(two)
            await two.start()
            await warm_up_rflow(two, producer, warm)
            peak2 = await rflow_peak(two, producer, Phase("p2peak", n))
            results["peak2"] = peak2
            print(
                f"      peak: {n} runs in {peak2['elapsed']:.2f} s = {peak2['rate']:.1f} runs/s "
                f"(read model settled after {peak2['read_model']:.2f} s; "
                f"statuses {peak2['statuses']})",
                flush=True,
            )
            print(
                f"      workers' CPU {peak2['cpu_per_item'] * 1000:.2f} ms per run "
                f"({peak2['cpu_share']:.2f} cores); machine {peak2['machine_busy']:.0%} busy; "
                f"Postgres sessions: {peak2['locks']['active']:.1f} active, "
                f"{peak2['locks']['advisory_waiting']:.1f} waiting on an advisory lock (mean)",
                flush=True,
            )
            print(describe_machine(peak2), flush=True)
            opened.remove(two)
            await two.stop()
    finally:
        for rig in reversed(opened):
            await rig.stop()
        await producer.stop()
        await sink.stop()

    report(results, rate)
    if "profile" in results:
        print()
        print(results["profile"])


def report(results: dict, rate: float) -> None:
    peak1, lat1, bpeak, blat = results["peak1"], results["lat1"], results["bpeak"], results["blat"]
    ratio = peak1["rate"] / bpeak["rate"]
    rows = [
        (
            "peak throughput, 1 worker (runs/s to last notify)",
            f"{peak1['rate']:.1f} runs/s",
            f"{bpeak['rate']:.1f} events/s",
            f"{ratio:.3f}",
            "report (the target is Restate's: bench_peers.py)",
            "-",
        ),
        (
            "  same, until the read model has settled every run",
            f"{peak1['read_model_rate']:.1f} runs/s",
            f"{bpeak['rate']:.1f} events/s",
            f"{peak1['read_model_rate'] / bpeak['rate']:.3f}",
            "-",
            "-",
        ),
        (
            "CPU per run / per event (worker incl. projector)",
            f"{peak1['cpu_per_item'] * 1000:.2f} ms",
            f"{bpeak['cpu_per_item'] * 1000:.3f} ms",
            f"{peak1['cpu_per_item'] / bpeak['cpu_per_item']:.1f}",
            "-",
            "-",
        ),
        (
            f"latency p50 at {rate:.0f}/s",
            f"{lat1['p50'] * 1000:.1f} ms",
            f"{blat['p50'] * 1000:.1f} ms",
            f"{lat1['p50'] / blat['p50']:.1f}",
            "-",
            "-",
        ),
        (
            f"latency p99 at {rate:.0f}/s",
            f"{lat1['p99'] * 1000:.1f} ms",
            f"{blat['p99'] * 1000:.1f} ms",
            f"{lat1['p99'] / blat['p99']:.1f}",
            "< 250 ms",
            "met" if lat1["p99"] < 0.25 else "NOT met",
        ),
    ]
    if "speak" in results:
        speak = results["speak"]
        rows.append(
            (
                "  bare agent moving a run's Kafka records",
                f"{speak['rate']:.1f} events/s",
                f"{bpeak['rate']:.1f} events/s",
                f"{speak['rate'] / bpeak['rate']:.3f}",
                "-",
                "-",
            )
        )
        rows.append(
            (
                "  rflow against that bare agent",
                f"{peak1['rate']:.1f} runs/s",
                f"{speak['rate']:.1f} events/s",
                f"{peak1['rate'] / speak['rate']:.3f}",
                "-",
                "-",
            )
        )
    if "peak2" in results:
        peak2 = results["peak2"]
        speedup = peak2["rate"] / peak1["rate"]
        rows.append(
            (
                "peak throughput, 2 workers",
                f"{peak2['rate']:.1f} runs/s",
                f"{peak1['rate']:.1f} runs/s (1 worker)",
                f"{speedup:.2f}",
                ">= 1.25",
                "met" if speedup >= 1.25 else "NOT met",
            )
        )
        rows.append(
            (
                "  same, until the read model has settled every run",
                f"{peak2['read_model_rate']:.1f} runs/s",
                f"{peak1['read_model_rate']:.1f} runs/s (1 worker)",
                f"{peak2['read_model_rate'] / peak1['read_model_rate']:.2f}",
                "-",
                "-",
            )
        )
        # Workers, Kafka, Postgres and this benchmark share the cores: how busy the
        # machine was, and what every process spent per run, tell how far two can go.
        total1, total2 = (sum(p["machine_per_item"].values()) for p in (peak1, peak2))
        rows.append(
            (
                "  the machine: share busy, CPU per run of every process",
                f"{peak2['machine_busy']:.0%}, {total2 * 1000:.2f} ms",
                f"{peak1['machine_busy']:.0%}, {total1 * 1000:.2f} ms (1 worker)",
                f"{total2 / total1:.2f}",
                "-",
                "-",
            )
        )
    emit("pipeline", rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, help="runs per peak phase (default 2000; quick 300)")
    parser.add_argument("--duration", type=float, help="seconds of each latency phase (20; 5)")
    parser.add_argument("--quick", action="store_true", help="a short run (300 runs, 5 s)")
    parser.add_argument("--linger-ms", type=int, default=5, help="producer linger (default 5)")
    parser.add_argument("--skip-two", action="store_true", help="skip the two-worker phase")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    parser.add_argument(
        "--profile", action="store_true", help="also profile one worker with py-spy (extra phase)"
    )
    parser.add_argument(
        "--variant",
        choices=sorted(PROJECTS),
        default="full",
        help="the workflow: full (state_set, choose, notify) or, for diagnosis, no-state",
    )
    parser.add_argument(
        "--diagnose",
        action="store_true",
        help="run the one-worker phases in bench/_instrumented_worker.py: event-loop lag, GC",
    )
    parser.add_argument(
        "--compare-transactions",
        action="store_true",
        help="only phases 1 and 2, with the checkpoints' Kafka transactions off, then on",
    )
    parser.add_argument(
        "--commit-interval",
        type=float,
        help="with --compare-transactions: seconds between checkpoints with transactions on",
    )
    parser.add_argument(
        "--rate",
        type=float,
        help="with --compare-transactions: runs/s of the latency phases (half each peak)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds of --compare-transactions (default 1)"
    )
    args = parser.parse_args()
    args.runs = args.runs or (300 if args.quick else 2000)
    args.duration = args.duration or (5.0 if args.quick else 20.0)
    work = compare_transactions if args.compare_transactions else run
    run_benchmark("bench_pipeline", lambda workdir: work(args, workdir), args.keep or args.profile)


if __name__ == "__main__":
    main()
