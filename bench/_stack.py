"""Shared plumbing of the stack benchmarks (bench_pipeline.py, bench_parked.py,
bench_history.py).

Each benchmark run gets its own topic prefix, app id (consumer group) and Postgres
schema, like the integration tests, and removes them afterwards: processes it started
(by PID), its schema, and its topics (its prefix and Faust's topics under its app id).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # for tests.integration.harness (not an installed package)
    sys.path.insert(0, str(REPO))

from _cpu import CpuMeter, stack_pids  # noqa: E402, F401 (shared by the benchmarks)
from _profile import die_with_parent, start_profiler, stop_profiler  # noqa: E402, F401
from _report import print_table  # noqa: E402, F401 (shared by the benchmarks)
from aiohttp import web  # noqa: E402
from aiokafka import AIOKafkaProducer  # noqa: E402
from psycopg import sql  # noqa: E402

from rflow import storage  # noqa: E402
from rflow.settings import Settings  # noqa: E402
from rflow.streams import kafka, topics  # noqa: E402
from tests.integration.harness import WorkerProcess, free_port  # noqa: E402

T = TypeVar("T")


class BenchError(Exception):
    """A benchmark cannot go on (stack down, a worker died, a wait timed out)."""


# --- settings, stack check, setup and cleanup ------------------------------------------


def fresh_settings(tag: str, workdir: Path, **overrides: Any) -> Settings:
    """Settings with a topic prefix, app id and schema used by nothing else."""
    unique = uuid.uuid4().hex[:8]
    return Settings.from_env(
        topic_prefix=f"bench{tag}{unique}.",
        app_id=f"rflow-bench{tag}{unique}",
        database_schema=f"bench_{tag}_{unique}",
        data_dir=workdir / f"data-{tag}-{unique}",
        broker_session_timeout=6.0,
        broker_heartbeat_interval=0.5,
        **overrides,
    )


async def check_stack(settings: Settings, timeout: float = 20.0) -> None:
    """Fail with the fix when Kafka or Postgres is not reachable."""

    async def probe() -> None:
        await topics.describe(settings, [])
        conn = await storage.connect(settings)
        await conn.close()

    try:
        await asyncio.wait_for(probe(), timeout)
    except Exception as exc:  # any failure here means the same fix
        raise BenchError(
            f"the local stack is not reachable ({type(exc).__name__}: {exc}); "
            "check with `scripts/stack status`, start it with `scripts/stack up`"
        ) from None


async def prepare(settings: Settings) -> None:
    """Create the declared topics under the prefix and migrate the schema."""
    await asyncio.wait_for(topics.apply(settings), 60)
    conn = await storage.connect(settings)
    async with conn:
        await asyncio.wait_for(storage.migrate(conn, settings.database_schema), 60)


async def drop_schema(settings: Settings) -> None:
    conn = await storage.connect(settings)
    async with conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(settings.database_schema)
            )
        )


async def delete_topics(settings: Settings, prefixes: Iterable[str]) -> list[str]:
    """Delete every topic whose name starts with one of ``prefixes``."""
    prefixes = tuple(p for p in prefixes if p)
    admin = kafka.admin(settings, request_timeout_ms=15000)
    await admin.start()
    try:
        mine = [name for name in await admin.list_topics() if name.startswith(prefixes)]
        if mine:
            await admin.delete_topics(mine, timeout_ms=15000)
        return mine
    finally:
        await admin.close()


async def cleanup(settings: Settings) -> None:
    """Drop the run's schema and delete its topics; report, never raise."""
    for what, work in (
        ("schema", drop_schema(settings)),
        (
            "topics",
            delete_topics(settings, (settings.topic_prefix, settings.app_id + "-")),
        ),
    ):
        try:
            await asyncio.wait_for(work, 60)
        except Exception as exc:
            print(f"  cleanup of {what} for {settings.app_id} failed: {exc!r}", file=sys.stderr)


async def query_one(settings: Settings, query: str, params: tuple = ()) -> Any:
    conn = await storage.connect(settings)
    async with conn:
        cur = await conn.execute(query, params)
        row = await cur.fetchone()
        return row[0] if row else None


# --- processes ------------------------------------------------------------------------


class Worker(WorkerProcess):
    """``rflow worker --no-setup`` in its own process (stopped with its parent)."""

    # "info", the CLI's default: at "warning" or above Faust's worker keeps its progress
    # spinner, which sets the root logger to DEBUG for good, so every logger.debug() call
    # in faust/aiokafka builds a LogRecord (measured: about 5% of the worker's time).
    def __init__(
        self,
        settings: Settings,
        log_path: Path,
        loglevel: str = "info",
        *,
        instrumented: bool = False,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        entry = (
            (str(Path(__file__).resolve().parent / "_instrumented_worker.py"),)
            if instrumented
            else ("-m", "rflow.cli")
        )
        command = (sys.executable, *entry, "worker", "--no-setup", "-l", loglevel)
        super().__init__(settings, log_path, command)
        self.extra_env = extra_env or {}

    def start(self) -> Worker:
        env = {**os.environ, **self.settings.to_env(), **self.extra_env}
        self.settings.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            list(self.command),
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise BenchError(
                f"worker {self.pid} exited with {self.proc.returncode}; log {self.log_path}:\n"
                + self.tail(30)
            )


def start_process(
    command: list[str], env: dict[str, str], log_path: Path
) -> tuple[subprocess.Popen, Any]:
    log = log_path.open("ab")
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    return proc, log


def stop_process(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM by PID, SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def memory_of(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of ``pid`` in MB, from /proc/<pid>/status."""
    values: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                values[name] = int(rest.split()[0]) / 1024  # kB -> MB
    return values


def diagnostic_lines(path: Path) -> Iterator[dict]:
    """The lines an instrumented worker wrote to ``path`` (none if it wrote nothing)."""
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            continue


STALLED = 0.003
"""Seconds late the worker's loop woke up (watched every 5 ms) from which the report counts it as
stalled (the loop's timers are rounded to milliseconds)."""


def read_diagnostics(path: Path, since: float, until: float) -> dict[str, float]:
    """Event-loop lag, GC pauses, where triggers waited and how long checkpoints took, as
    an instrumented worker noted them between two wall times."""
    lags: list[float] = []
    pauses: list[tuple[int, float]] = []
    fetched: list[float] = []
    queued: list[float] = []
    fetched_runs: list[float] = []
    queued_runs: list[float] = []
    checkpoints: list[tuple[float, float]] = []
    stalls: list[float] = []
    for entry in diagnostic_lines(path):
        stalls.extend(late for at, late in entry.get("thread_lags", ()) if since <= at <= until)
        if since <= entry["t"] <= until + 1.0:
            lags.extend(entry["lag"])
            pauses.extend((int(g), float(d)) for g, d in entry["gc"])
            fetched.extend(entry.get("fetched", ()))
            queued.extend(entry.get("queued", ()))
            fetched_runs.extend(entry.get("fetched_runs", ()))
            queued_runs.extend(entry.get("queued_runs", ()))
            checkpoints.extend((float(a), float(b)) for a, b in entry.get("checkpoints", ()))
    full = [d for g, d in pauses if g == 2]
    return {
        "lag_p50": percentile(lags, 50) if lags else 0.0,
        "lag_p99": percentile(lags, 99) if lags else 0.0,
        "lag_max": max(lags) if lags else 0.0,
        "gc_count": len(pauses),
        "gc_total": sum(d for _, d in pauses),
        "gc2_count": len(full),
        "gc2_max": max(full) if full else 0.0,
        "gc_max": max((d for _, d in pauses), default=0.0),
        "fetched_p50": percentile(fetched, 50) if fetched else 0.0,
        "fetched_p99": percentile(fetched, 99) if fetched else 0.0,
        "queued_p50": percentile(queued, 50) if queued else 0.0,
        "queued_p99": percentile(queued, 99) if queued else 0.0,
        "fetched_runs_p50": percentile(fetched_runs, 50) if fetched_runs else 0.0,
        "queued_runs_p50": percentile(queued_runs, 50) if queued_runs else 0.0,
        "checkpoints": len(checkpoints),
        "checkpoint_p50": percentile([a for a, _ in checkpoints], 50) if checkpoints else 0.0,
        "checkpoint_p99": percentile([a for a, _ in checkpoints], 99) if checkpoints else 0.0,
        "commit_p50": percentile([b for _, b in checkpoints], 50) if checkpoints else 0.0,
        "thread_stalls": sum(1 for late in stalls if late >= STALLED),
        "thread_stall_max": max(stalls, default=0.0),
        "thread_stalled": sum(late for late in stalls if late >= STALLED),
    }


def read_fetches(path: Path) -> dict[int, tuple[list[float], list[float]]]:
    """The fetches an instrumented worker's consumer made, by each partition of the
    triggers topic they named: when each was sent, and when its response was handled
    (both in the order of the latter)."""
    found: dict[int, list[tuple[float, float]]] = {}
    for entry in diagnostic_lines(path):
        for sent, handled, partitions in entry.get("fetches", ()):
            for partition in partitions:
                found.setdefault(int(partition), []).append((float(sent), float(handled)))
    by_partition: dict[int, tuple[list[float], list[float]]] = {}
    for partition, fetches in found.items():
        fetches.sort(key=lambda fetch: fetch[1])
        by_partition[partition] = ([s for s, _ in fetches], [h for _, h in fetches])
    return by_partition


def read_trace(path: Path) -> dict[tuple[int, int], tuple[float, float, float, float]]:
    """Each trigger an instrumented worker traced, by partition and offset: the wall times
    when the fetcher handed it to Faust, when it was put into the runner's queue and when
    the runner took it, and the record's timestamp."""
    found: dict[tuple[int, int], tuple[float, float, float, float]] = {}
    for entry in diagnostic_lines(path):
        for partition, offset, drained, put, taken, stamp in entry.get("trace", ()):
            found[(int(partition), int(offset))] = (drained, put, taken, stamp)
    return found


# --- waiting --------------------------------------------------------------------------


async def wait_for(
    check: Callable[[], Awaitable[T | None] | T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    alive: Callable[[], None] | None = None,
) -> T:
    """Poll ``check`` until truthy; :class:`BenchError` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


# --- the HTTP sink --------------------------------------------------------------------


@dataclass
class TimingSink:
    """An HTTP sink on 127.0.0.1 that records when each Idempotency-Key first arrived
    (``time.time()``); answers 200 at once."""

    port: int = field(default_factory=free_port)
    arrivals: dict[str, float] = field(default_factory=dict)
    requests: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        now = time.time()
        await request.read()
        self.requests += 1
        key = request.headers.get("Idempotency-Key")
        if key is not None:
            self.arrivals.setdefault(key, now)
        return web.json_response({"ok": True})

    def count(self, keys: Iterable[str]) -> int:
        return sum(1 for key in keys if key in self.arrivals)

    async def start(self) -> TimingSink:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


# --- producing ------------------------------------------------------------------------


async def start_producer(settings: Settings, linger_ms: int = 5) -> AIOKafkaProducer:
    producer = kafka.producer(
        settings,
        acks="all",
        linger_ms=linger_ms,
        max_batch_size=1 << 20,
        request_timeout_ms=15000,
    )
    await asyncio.wait_for(producer.start(), 30)
    return producer


async def produce_all(
    producer: AIOKafkaProducer, topic: str, records: list[tuple[bytes, bytes]]
) -> float:
    """Produce ``records`` (key, value) as fast as possible; returns the wall time of the
    first send. Waits until every record is acknowledged."""
    first = time.time()
    futures = [await producer.send(topic, value=value, key=key) for key, value in records]
    await asyncio.wait_for(asyncio.gather(*futures), 120)
    return first


async def produce_paced(
    producer: AIOKafkaProducer,
    topic: str,
    rate: float,
    count: int,
    make: Callable[[int, float], tuple[bytes, bytes]],
    placed: list[tuple[int, int]] | None = None,
) -> float:
    """Produce ``count`` records at ``rate`` per second (open loop: a late send is not
    made up by waiting less later, it is sent at once). ``make(i, sent_at)`` builds
    record ``i``; ``placed`` receives each record's partition and offset, in order.
    Returns the achieved send rate."""
    start = time.monotonic()
    futures = []
    for i in range(count):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        key, value = make(i, time.time())
        futures.append(await producer.send(topic, value=value, key=key))
    elapsed = time.monotonic() - start
    written = await asyncio.wait_for(asyncio.gather(*futures), 120)
    if placed is not None:
        placed.extend((meta.partition, meta.offset) for meta in written)
    return count / elapsed if elapsed > 0 else float("inf")


# --- statistics and output ------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def install_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt so ``finally`` blocks clean up."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def run_benchmark(name: str, work: Callable[[Path], Awaitable[Any]], keep: bool = False) -> None:
    """Run ``work`` in a work directory of its own (the workers' logs) and exit: 1 after
    a :class:`BenchError` or an interrupt (SIGTERM as Ctrl-C), said on stderr under
    ``name``, with the directory kept; 0 otherwise, the directory removed unless
    ``keep``."""
    install_sigterm()
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # deleted topics' metadata noise
    workdir = Path(tempfile.mkdtemp(prefix=f"rflow-{name.replace('_', '-')}-"))
    failed = False
    try:
        asyncio.run(work(workdir))
    except BenchError as exc:
        failed = True
        print(f"{name}: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        failed = True
        print(f"{name}: interrupted (cleaned up)", file=sys.stderr)
    finally:
        if failed or keep:
            print(f"{name}: logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(1 if failed else 0)


# --- profiling ------------------------------------------------------------------------


_SCAFFOLDING = ("asyncio/", "selectors", "<frozen", "click/", "mode/", "rflow/cli/", "runpy")
_RFLOW_CODE = ("agents/", "streams/", "storage/", "codecs/", "rflow/")


def profile_summary(path: Path, top: int = 15) -> str:
    """The functions with most samples in a py-spy raw (collapsed) file: self time, and
    total time (with callees) of rflow's own functions and of library functions, leaving
    out the event loop and start-up frames every sample has."""
    own: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    libraries: Counter[str] = Counter()
    samples = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(frame) for frame in stack.split(";")]
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            where = frame.rpartition(" (")[2]
            if where.startswith(_SCAFFOLDING):
                continue
            (ours if where.startswith(_RFLOW_CODE) else libraries)[frame] += count
    if not samples:
        return "  (no samples)"

    def listing(title: str, counter: Counter[str]) -> list[str]:
        return [f"  {title}:"] + [
            f"    {100 * c / samples:5.1f}%  {f}" for f, c in counter.most_common(top)
        ]

    return "\n".join(
        [
            f"  {samples} samples (only while the worker ran Python code)",
            *listing("self time", own),
            *listing(
                "total time of rflow functions (with callees; awaits split a coroutine)", ours
            ),
            *listing("total time of library functions (with callees)", libraries),
        ]
    )


def _short(frame: str) -> str:
    # "func (path/to/site-packages/pkg/mod.py:123)" -> "func (pkg/mod.py)"
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/work/main/", "python3.11/"):
        if marker in where:
            where = where.split(marker, 1)[1]
            break
    return f"{name} ({where})"


async def group_state(settings: Settings, group: str) -> tuple[str, int]:
    """(state, member count) of consumer group ``group``."""
    admin = kafka.admin(settings, request_timeout_ms=15000)
    await admin.start()
    try:
        response = await admin.describe_consumer_groups([group])
        described = response[0].groups[0]
        return described[2], len(described[5])  # (error, group, state, type, protocol, members)
    finally:
        await admin.close()


async def wait_stable(workers: list[Worker], timeout: float = 120.0) -> None:
    """Until every worker is in the group, the group is Stable and every worker answers
    ready, twice in a row a second apart: a worker that was ready before the last one
    joined is rebalancing again, and runs fired then are not what we mean to measure."""
    settings = workers[0].settings
    streak = 0
    deadline = time.monotonic() + timeout
    while streak < 2:
        for worker in workers:
            worker.check_alive()
        state, members = await group_state(settings, settings.app_id)
        ready = [(await w.get("/rflow/ready/"))[0] == 200 for w in workers]
        streak = streak + 1 if state == "Stable" and members == len(workers) and all(ready) else 0
        if time.monotonic() > deadline:
            raise BenchError(
                f"the consumer group {settings.app_id} did not settle within {timeout:.0f}s "
                f"(state {state}, {members} members, ready {ready})"
            )
        await asyncio.sleep(1.0 if streak else 0.2)


async def written_profile(path: Path) -> None:
    """Ask the instrumented worker for its cProfile statistics and wait for the file."""
    path.unlink(missing_ok=True)
    Path(f"{path}.stop").touch()
    for _ in range(200):
        await asyncio.sleep(0.05)
        if path.exists():
            await asyncio.sleep(0.5)  # written out in full
            print(f"      the worker's cProfile statistics: {path}", flush=True)
            return
