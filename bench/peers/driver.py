"""The peers benchmark's driver: rounds of rflow, Restate and DBOS, driven alike.

Started by bench/bench_peers.py (which installs the peers first) in `.bench/venv`; see that
file for the options. In each round (``--rounds``, two by default), for each engine in
turn, alone on the machine's engines (the others are stopped), on a fresh deployment of
it:

  warm-up  half the peak phase's firings (at least 50), not counted; an engine on Kafka
           then goes on warming (a burst like the warm-up, then 5 s at @rate, up to
           ``JIT_ROUNDS`` times) while the broker's JIT compilers used more than
           ``JIT_QUIET`` seconds of CPU in the last of them: a broker started a moment
           ago compiles for minutes (24 s of CPU in its first three, 2026-12-07), and a
           user's broker has long been past that;
  peak     N firings at once (open loop), runs/s = N / (last notify at the sink - first
           firing); CPU of the engine's processes, Kafka and Postgres from the first firing
           until the engine is idle again, per run;
  @rate    firings paced at a fixed rate (100/s) for D seconds, open loop (a late firing
           is not made up for by waiting less later); trigger-to-sink latency p50/p99;
  @half    the same at half of the engine's own peak;
  @sampled (rflow, one worker) @rate again, while py-spy samples the worker from outside
           (``where.py``): where its time goes, as shares of its samples and
           milliseconds of CPU per run; its latency is not a figure of the report.

A firing counts once the engine acknowledged it durably (``Engine.fire``); its latency is
the sink's arrival time of its notify minus when it was fired (one clock: the sink runs
in this process). A firing whose notify never reaches the sink (no arrival for
``--stall`` seconds while others are missing) is lost; a notify that arrives more than
once is a duplicate. Firings are spread over ``--groups`` concurrency groups in turn.

The report gives every round's figures and rflow against Restate in each round (each
ratio is of two figures of the same round, measured minutes apart); a target holds only
if it is met in every round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
JIT_QUIET = 0.5
"""Seconds of CPU the broker's JIT compilers may use in a warm-up round of a steady broker."""
JIT_ROUNDS = 12
"""At most this many further warm-up rounds until the broker's compilers are quiet."""


class JitMeter:
    """CPU seconds the JVMs ``pids`` spent in their JIT compiler threads (Linux /proc),
    those that ended included: HotSpot starts compiler threads as it needs them and ends
    them when idle, so each thread's last reading is kept (:meth:`read` is called every
    half second while the broker warms). Nothing to read (no /proc, another JVM): 0."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.seen: dict[tuple[int, str, str], int] = {}
        """(pid, thread id, its start time) -> the CPU ticks last read."""

    def read(self) -> float:
        for pid in self.pids:
            for task in Path(f"/proc/{pid}/task").glob("*"):
                try:
                    if "CompilerThre" not in (task / "comm").read_text():
                        continue
                    fields = (task / "stat").read_text().rpartition(")")[2].split()
                except OSError:  # the thread ended
                    continue
                ticks = int(fields[11]) + int(fields[12])  # utime, stime
                self.seen[(pid, task.name, fields[19])] = ticks  # fields[19]: its start time
        return sum(self.seen.values()) / os.sysconf("SC_CLK_TCK")

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Read every half second while the body runs."""

        async def watch() -> None:
            while True:
                self.read()
                await asyncio.sleep(0.5)

        task = asyncio.ensure_future(watch())
        try:
            yield
        finally:
            task.cancel()


sys.path.insert(0, str(HERE.parent))  # bench/_report.py (standard library only)
from _cpu import CpuMeter  # noqa: E402
from _report import emit, print_table  # noqa: E402
from engines import Dbos, Engine, Firing, Restate, Rflow, Stack  # noqa: E402
from measure import BenchError, Ports, Sink, percentile  # noqa: E402
from where import Breakdown, Sampler  # noqa: E402

ENGINES = ("rflow", "rflow-2", "restate", "dbos", "restate-fsync", "rflow-ungrouped")


@dataclass
class Phase:
    """One batch of firings and what the sink saw of it."""

    label: str
    firings: list[Firing]
    sent_at: dict[str, float] = field(default_factory=dict)
    first: float = 0.0
    last: float = 0.0
    achieved: float = 0.0
    retries: int = 0
    lost: int = 0
    cpu: dict[str, Any] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [f.sink_id for f in self.firings]

    @property
    def rate(self) -> float:
        arrived = len(self.firings) - self.lost
        return arrived / (self.last - self.first) if self.last > self.first else 0.0


class Driver:
    def __init__(
        self, args: argparse.Namespace, stack: Stack, sink: Sink, ports: Ports, workdir: Path
    ) -> None:
        self.args = args
        self.stack = stack
        self.sink = sink
        self.ports = ports
        self.workdir = workdir

    def firings(self, engine: Engine, label: str, count: int) -> list[Firing]:
        groups = self.args.groups
        return [Firing(f"{engine.tag}-{label}-{i}", f"g{i % groups}", i) for i in range(count)]

    async def fire(self, engine: Engine, phase: Phase, firing: Firing) -> None:
        phase.sent_at[firing.sink_id] = time.time()
        for attempt in range(3):
            try:
                await engine.fire(firing)
                return
            except Exception as exc:  # the engine refused or was unreachable: retry, same key
                if attempt == 2:
                    raise BenchError(
                        f"{engine.name}: firing {firing.trigger_key} failed 3 times: {exc!r}"
                    ) from None
                phase.retries += 1
                await asyncio.sleep(0.2)

    async def burst(self, engine: Engine, phase: Phase) -> None:
        await asyncio.gather(*(self.fire(engine, phase, f) for f in phase.firings))

    async def paced(self, engine: Engine, phase: Phase, rate: float) -> None:
        start = time.monotonic()
        tasks = []
        for i, firing in enumerate(phase.firings):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(self.fire(engine, phase, firing)))
        phase.achieved = len(phase.firings) / (time.monotonic() - start)
        await asyncio.gather(*tasks)

    async def arrivals(self, engine: Engine, phase: Phase) -> None:
        """Until every notify arrived, or none arrived for --stall seconds."""
        ids = phase.ids
        seen, since = -1, time.monotonic()
        while True:
            engine.alive()
            arrived = self.sink.arrived(ids)
            if arrived == len(ids):
                break
            if arrived != seen:
                seen, since = arrived, time.monotonic()
            elif time.monotonic() - since > self.args.stall:
                break
            await asyncio.sleep(0.02)
        phase.lost = len(ids) - arrived
        times = [self.sink.arrivals[i] for i in ids if i in self.sink.arrivals]
        phase.last = max(times) if times else time.time()
        phase.latencies = [
            self.sink.arrivals[i] - phase.sent_at[i] for i in ids if i in self.sink.arrivals
        ]

    async def idle(self, meter: CpuMeter, idle: float) -> None:
        """Until the engine's processes are back to their idle use of CPU (``idle`` cores,
        plus 5% of a core) over half a second, 10 s at most: work an engine does after the
        last notify (projecting, cleaning up) is part of what a run costs."""
        sample = meter.sample("engine")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            cores, sample = meter.rate("engine", sample)
            if cores < idle + 0.05:
                return

    async def idle_rate(self, engine: Engine) -> float:
        """Cores the engine's processes use when nothing is fired, over two seconds."""
        meter = CpuMeter({"engine": engine.processes()})
        sample = meter.sample("engine")
        await asyncio.sleep(2.0)
        return meter.rate("engine", sample)[0]

    async def phase(
        self,
        engine: Engine,
        label: str,
        count: int,
        rate: float | None = None,
        sampler: Sampler | None = None,
    ) -> Phase:
        phase = Phase(label, self.firings(engine, label, count))
        idle = await self.idle_rate(engine)
        meter = CpuMeter(
            {
                "engine": engine.processes(),
                "kafka": self.stack.kafka_pids,
                "postgres": self.stack.postgres_pids,
            }
        )
        phase.first = time.time()
        if sampler is not None:
            sampler.start()
        if rate is None:
            await self.burst(engine, phase)
        else:
            await self.paced(engine, phase, rate)
        await self.arrivals(engine, phase)
        await self.idle(meter, idle)
        phase.cpu = meter.stop() | {"idle": idle}
        return phase

    async def warm_broker(self, engine: Engine, jit: JitMeter, began: float) -> list[Phase]:
        """Warm on while the broker's JIT compilers are busy (see the module); the
        further warm-up phases."""
        args = self.args
        phases: list[Phase] = []
        last, rounds = jit.read() - began, 0
        async with jit.watching():
            while last > JIT_QUIET and rounds < JIT_ROUNDS:
                before = jit.read()
                phases.append(await self.phase(engine, f"warm{rounds}", max(50, args.runs // 2)))
                phases.append(
                    await self.phase(
                        engine, f"warm{rounds}-paced", max(10, round(args.rate * 5)), args.rate
                    )
                )
                last, rounds = jit.read() - before, rounds + 1
        quiet = "quiet" if last <= JIT_QUIET else f"still busy after {JIT_ROUNDS} rounds"
        print(
            f"[{engine.name}] the broker's JIT compilers: {jit.read() - began:.1f} s "
            f"of CPU since the warm-up began, {rounds} more warm-up rounds, {last:.2f} s in "
            f"the last ({quiet})",
            flush=True,
        )
        return phases

    async def run_engine(self, engine: Engine) -> dict[str, Any]:
        args = self.args
        print(f"\n[{engine.name}] starting ...", flush=True)
        started = time.monotonic()
        await engine.start()
        print(
            f"[{engine.name}] ready after {time.monotonic() - started:.1f} s; durability: {engine.durability()}",
            flush=True,
        )
        phases: list[Phase] = []
        jit = JitMeter(self.stack.kafka_pids if isinstance(engine, Rflow) else [])
        began = jit.read()
        async with jit.watching():
            warm = await self.phase(engine, "warm", max(50, args.runs // 2))
        print(
            f"[{engine.name}] warm-up: {len(warm.firings)} runs at {warm.rate:.1f} runs/s",
            flush=True,
        )
        warmed = [warm]
        if jit.pids:
            warmed += await self.warm_broker(engine, jit, began)
        peak = await self.phase(engine, "peak", args.runs)
        phases.append(peak)
        show(engine, peak, "peak (open loop)")
        fixed = await self.phase(
            engine, "fixed", max(10, round(args.rate * args.duration)), args.rate
        )
        phases.append(fixed)
        show(engine, fixed, f"paced at {args.rate:g}/s")
        half_rate = peak.rate / 2
        half = await self.phase(
            engine, "half", max(10, round(half_rate * args.duration)), half_rate
        )
        phases.append(half)
        show(engine, half, f"paced at half its peak, {half_rate:.1f}/s")
        where = sampled = None
        if isinstance(engine, Rflow) and engine.workers == 1:
            # A phase of its own: py-spy takes CPU, which the figures above do not pay.
            sampler = Sampler(engine.processes()[0], engine.workdir / "where.txt")
            sampled = await self.phase(
                engine, "sampled", max(10, round(args.rate * args.duration)), args.rate, sampler
            )
            phases.append(sampled)
            show(engine, sampled, f"paced at {args.rate:g}/s again, sampled by py-spy")
            where = await sampler.finish()
            show_where(engine, sampled, where)
        ids = [i for p in [*warmed, *phases] for i in p.ids]
        return {
            "engine": engine,
            "peak": peak,
            "fixed": fixed,
            "half": half,
            "half_rate": half_rate,
            "where": where,
            "sampled": sampled,
            "lost": sum(p.lost for p in [*warmed, *phases]),
            "duplicates": self.sink.duplicates(ids),
            "fired": len(ids),
            "retries": sum(p.retries for p in [*warmed, *phases]),
        }


def show(engine: Engine, phase: Phase, what: str) -> None:
    cpu, n = phase.cpu, len(phase.firings)
    line = f"[{engine.name}] {what}: {n} runs, {phase.rate:.1f} runs/s to the sink"
    if phase.achieved:
        line += f" (fired at {phase.achieved:.1f}/s)"
    if phase.latencies and phase.achieved:
        line += (
            f", latency p50 {percentile(phase.latencies, 50) * 1000:.1f} ms, "
            f"p99 {percentile(phase.latencies, 99) * 1000:.1f} ms, "
            f"max {max(phase.latencies) * 1000:.0f} ms"
        )
    if phase.achieved and phase.rate < 0.9 * phase.achieved:
        line += " (above its peak: a backlog builds up)"
    if phase.lost:
        line += f", LOST {phase.lost}"
    print(line, flush=True)
    print(
        f"[{engine.name}]   CPU per run: {engine.label} {cpu['cpu']['engine'] / n * 1000:.2f} ms, "
        f"Kafka {cpu['cpu']['kafka'] / n * 1000:.2f} ms, Postgres {cpu['cpu']['postgres'] / n * 1000:.2f} ms, "
        f"driver {cpu['driver'] / n * 1000:.2f} ms (idle, the engine used {cpu['idle']:.2f} "
        f"cores); machine {cpu['machine_busy']:.0%} busy, {cpu['others']:.2f} cores busy outside "
        "the metered processes",
        flush=True,
    )


def show_where(engine: Engine, phase: Phase, where: Breakdown) -> None:
    if where.error is not None:
        print(f"[{engine.name}]   where the time goes: not sampled ({where.error})", flush=True)
        return
    per_run = phase.cpu["cpu"]["engine"] / len(phase.firings) * 1000
    print(
        f"[{engine.name}]   where the worker's time goes (py-spy, {where.samples} samples; "
        "ms of CPU per run):",
        flush=True,
    )
    for label, share in where.shares:
        print(f"[{engine.name}]     {share:6.1%}  {share * per_run:5.2f} ms  {label}", flush=True)


def make_engine(
    name: str,
    stack: Stack,
    ports: Ports,
    workdir: Path,
    sink: Sink,
    rflow: Path | None,
    directory: str | None = None,
) -> Engine:
    """A fresh engine of kind ``name``, with a directory of its own in ``workdir``
    (``directory``, or its name)."""
    (workdir / (directory or name)).mkdir()
    base = (stack, ports, workdir / (directory or name), sink.url)
    if name == "rflow":
        return Rflow(*base, command=rflow)
    if name == "rflow-2":
        engine = Rflow(*base, command=rflow, workers=2)
        engine.name = name
        return engine
    if name == "rflow-ungrouped":
        engine = Rflow(*base, grouped=False, command=rflow)
        engine.name = name
        return engine
    if name == "restate":
        return Restate(*base)
    if name == "restate-fsync":
        return Restate(*base, fsync=True)
    return Dbos(*base)


# --- the report -----------------------------------------------------------------------


def ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


def figures(result: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """Each figure of one engine: (number, text)."""
    peak, fixed, half = result["peak"], result["fixed"], result["half"]
    n = len(peak.firings)

    def lat(phase: Phase, p: float) -> tuple[float, str]:
        if not phase.latencies:
            return float("nan"), "-"
        value = percentile(phase.latencies, p)
        # Fired faster than the engine ran them: the latency is mostly the backlog's.
        backlog = " (backlog)" if phase.rate < 0.9 * phase.achieved else ""
        return value, ms(value) + backlog

    cpu = {k: v / n for k, v in peak.cpu["cpu"].items()}
    # Everything the engine needs: rflow's worker needs Kafka and Postgres, DBOS Postgres.
    uses = {"rflow": ("kafka", "postgres"), "dbos": ("postgres",)}.get(
        result["engine"].name.partition("-")[0], ()
    )
    total = cpu["engine"] + sum(cpu[k] for k in uses)
    return {
        "peak runs/s": (peak.rate, f"{peak.rate:.1f}"),
        "p50 @fixed": lat(fixed, 50),
        "p99 @fixed": lat(fixed, 99),
        "p50 @half": lat(half, 50),
        "p99 @half": lat(half, 99),
        "half rate": (result["half_rate"], f"{result['half_rate']:.1f}/s"),
        "cpu engine": (cpu["engine"], ms(cpu["engine"])),
        "cpu kafka": (cpu["kafka"], ms(cpu["kafka"])),
        "cpu postgres": (cpu["postgres"], ms(cpu["postgres"])),
        "cpu total": (total, ms(total)),
        "duplicates": (result["duplicates"], str(result["duplicates"])),
        "lost": (result["lost"], f"{result['lost']} of {result['fired']}"),
        "retries": (result["retries"], str(result["retries"])),
        "noise": (peak.cpu["others"], f"{peak.cpu['others']:.2f} cores"),
    }


LABELS = {
    "peak runs/s": "peak runs/s (open loop, {runs} firings, to the last notify)",
    "p50 @fixed": "latency p50 at {rate:g} runs/s ({duration:g} s)",
    "p99 @fixed": "latency p99 at {rate:g} runs/s",
    "half rate": "half of its own peak",
    "p50 @half": "latency p50 at half its peak",
    "p99 @half": "latency p99 at half its peak",
    "cpu engine": "CPU per run, engine processes (peak phase)",
    "cpu kafka": "CPU per run, Kafka",
    "cpu postgres": "CPU per run, Postgres",
    "cpu total": "CPU per run, with the servers it needs",
    "duplicates": "duplicate notifies at the sink",
    "lost": "lost runs (never reached the sink)",
    "retries": "firings the engine refused and that were sent again",
    "noise": "cores busy outside the metered processes, peak",
}


def report(
    args: argparse.Namespace, rounds: list[dict[str, dict[str, Any]]], durability: list[str]
) -> None:
    """Every round's figures, then rflow against Restate in each round: a target is met
    only when it is met in every round."""
    for number, results in enumerate(rounds, 1):
        names = list(results)
        table = {name: figures(r) for name, r in results.items()}
        rows = [
            (
                label.format(runs=args.runs, rate=args.rate, duration=args.duration),
                *(table[n][key][1] for n in names),
            )
            for key, label in LABELS.items()
        ]
        print(
            f"\nAll engines, {which(number, len(rounds))} (CPU: "
            + "; ".join(f"{n}: {results[n]['engine'].label}" for n in names)
            + "):\n"
        )
        print_table(rows, ("figure", *names))
    print(
        "\nDurability, equal on all sides: an acknowledged write has reached the operating system"
    )
    print("(it survives the crash of any process, not of the machine):")
    for line in durability:
        print(f"  {line}")
    if any("rflow" not in results or "restate" not in results for results in rounds):
        print("\n(no ratios: the report compares rflow with restate, run both)")
        return
    missed: list[str] = []
    for number, results in enumerate(rounds, 1):
        out = against_restate(args, results)
        prefix = f"round {number}: " if len(rounds) > 1 else ""
        print(
            f"\nrflow against Restate, {which(number, len(rounds))} (ratio = rflow / Restate; "
            f"{args.groups} concurrency groups):"
        )
        emit("peers", [(prefix + row[0], *row[1:]) for row in out])
        missed += [prefix + row[0] for row in out if row[5] == "NOT met"]
        where = results["rflow"].get("where")
        if where is not None:
            why = (
                f"the targets missed: {'; '.join(r[0] for r in out if r[5] == 'NOT met')}"
                if any(r[5] == "NOT met" for r in out)
                else "every target above met"
            )
            print(
                f"\nWhere the rflow worker's time goes at {args.rate:g} runs/s, "
                f"{which(number, len(rounds))} ({why}):"
            )
            show_where(results["rflow"]["engine"], results["rflow"]["sampled"], where)
    if len(rounds) > 1:
        print(f"\nrflow against Restate, all {len(rounds)} rounds:")
        emit(
            "peers",
            [
                (
                    f"every target, in all {len(rounds)} rounds",
                    f"{len(missed)} missed" if missed else "all met",
                    "-",
                    "-",
                    "met in every round",
                    "NOT met" if missed else "met",
                )
            ],
        )
        if missed:
            print(f"  missed: {'; '.join(missed)}")


def which(number: int, rounds: int) -> str:
    """How the report names round ``number`` of ``rounds``."""
    return "this run" if rounds == 1 else f"round {number} of {rounds}"


def against_restate(
    args: argparse.Namespace, results: dict[str, dict[str, Any]]
) -> list[tuple[str, ...]]:
    """One round's rows of rflow against Restate: figure, rflow, Restate, ratio, target,
    verdict; then every other engine's main figures beside Restate's."""
    names = list(results)
    table = {name: figures(r) for name, r in results.items()}
    rf, rs = table["rflow"], table["restate"]

    def row(label: str, key: str, target: str, met: bool | None) -> tuple[str, ...]:
        ratio = rf[key][0] / rs[key][0] if rs[key][0] else float("nan")
        verdict = "-" if met is None else ("met" if met else "NOT met")
        return (label, rf[key][1], f"{rs[key][1]} (Restate)", f"{ratio:.2f}", target, verdict)

    fixed = f"{args.rate:g} runs/s"
    out = [
        row(
            "peak runs/s",
            "peak runs/s",
            ">= 1.0x Restate",
            rf["peak runs/s"][0] >= rs["peak runs/s"][0],
        ),
        row(
            f"latency p50 at {fixed}",
            "p50 @fixed",
            "<= 1.2x Restate",
            rf["p50 @fixed"][0] <= 1.2 * rs["p50 @fixed"][0],
        ),
        row(
            f"latency p99 at {fixed}",
            "p99 @fixed",
            "<= 2x Restate",
            rf["p99 @fixed"][0] <= 2 * rs["p99 @fixed"][0],
        ),
        row("latency p50 at half its own peak", "p50 @half", "-", None),
        row(
            "latency p99 at half its own peak",
            "p99 @half",
            "<= 3x Restate",
            rf["p99 @half"][0] <= 3 * rs["p99 @half"][0],
        ),
        row(
            "CPU per run, rflow worker / Restate server + service",
            "cpu engine",
            "<= 3 ms",
            rf["cpu engine"][0] <= 0.003,
        ),
        (
            "CPU per run, Kafka / Postgres (Restate needs neither)",
            f"{rf['cpu kafka'][1]} / {rf['cpu postgres'][1]}",
            "-",
            "-",
            "-",
            "-",
        ),
        row("CPU per run, with the servers each needs", "cpu total", "-", None),
        (
            "duplicates / lost at the sink",
            f"{rf['duplicates'][1]} / {rf['lost'][1]}",
            f"{rs['duplicates'][1]} / {rs['lost'][1]} (Restate)",
            "-",
            "0 / 0",
            "met" if rf["duplicates"][0] == 0 and rf["lost"][0] == 0 else "NOT met",
        ),
    ]
    for name in names:
        if name in ("rflow", "restate"):
            continue
        other = table[name]
        for key, label in (
            ("peak runs/s", "peak runs/s"),
            ("p50 @fixed", f"latency p50 at {fixed}"),
            ("p99 @fixed", f"latency p99 at {fixed}"),
            ("cpu engine", "CPU per run, engine processes"),
        ):
            ratio = other[key][0] / rs[key][0] if rs[key][0] else float("nan")
            out.append(
                (
                    f"{name}: {label}",
                    other[key][1],
                    f"{rs[key][1]} (Restate)",
                    f"{ratio:.2f}",
                    "-",
                    "-",
                )
            )
    return out


async def run(args: argparse.Namespace, workdir: Path) -> int:
    stack = Stack.from_env()
    try:
        settings = await asyncio.wait_for(stack.prepare(), 60)
    except Exception as exc:  # Kafka's, Postgres's or the network's: the same fix
        raise BenchError(
            f"the local stack is not reachable ({type(exc).__name__}: {exc}); "
            "check with `scripts/stack status`, start it with `scripts/stack up`"
        ) from None
    ports = Ports(args.ports)
    sink = await Sink(ports.take()).start()
    print(
        f"bench_peers: {', '.join(args.engines)}; {args.runs} firings per peak phase, "
        f"{args.duration:g} s paced phases, {args.groups} concurrency groups, "
        f"{os.cpu_count()} CPUs; sink {sink.url}; logs in {workdir}",
        flush=True,
    )
    if not stack.kafka_pids or not stack.postgres_pids:
        print("  (Kafka or Postgres was not started by scripts/stack: its CPU is not metered)")
    driver = Driver(args, stack, sink, ports, workdir)
    rounds: list[dict[str, dict[str, Any]]] = []
    durability = [
        "Kafka (rflow): acks=all, broker defaults: "
        + ", ".join(
            f"{k.removeprefix('kafka ')}={v}" for k, v in settings.items() if k.startswith("kafka")
        )
        + " (no fsync before acknowledging), one replica",
        f"Postgres (rflow's read model and state, DBOS): synchronous_commit="
        f"{settings['postgres synchronous_commit']} for every session of the benchmark (role peers_bench), "
        f"server fsync={settings['postgres fsync']} as scripts/stack runs it",
    ]
    try:
        # Rounds interleave the engines (rflow, Restate, ..., rflow, Restate, ...): the
        # machine's speed drifts over minutes, and each round compares engines measured
        # beside each other. Every engine of every round is a fresh deployment.
        for number in range(1, args.rounds + 1):
            if args.rounds > 1:
                print(f"\n=== round {number} of {args.rounds} ===", flush=True)
            results: dict[str, dict[str, Any]] = {}
            for name in args.engines:
                directory = name if args.rounds == 1 else f"{name}.round{number}"
                engine = make_engine(name, stack, ports, workdir, sink, args.rflow, directory)
                try:
                    results[name] = await driver.run_engine(engine)
                    if name.startswith("restate") and number == 1:
                        durability.append(f"{name}: {engine.durability()}")
                finally:
                    await engine.stop()
            rounds.append(results)
    except BaseException:
        if rounds:  # what the rounds that finished measured is not lost with the one that failed
            print(
                f"\nbench_peers: round {len(rounds) + 1} did not finish; the rounds that did:",
                file=sys.stderr,
            )
            report(args, rounds, durability)
        raise
    finally:
        await sink.stop()
    if sink.unnamed:
        print(f"  the sink got {sink.unnamed} requests without an Idempotency-Key", file=sys.stderr)
    report(args, rounds, durability)
    failed = [
        f"{n} (round {number})" if len(rounds) > 1 else n
        for number, results in enumerate(rounds, 1)
        for n, r in results.items()
        if r["lost"] or r["duplicates"]
    ]
    if failed:
        print(f"\nbench_peers: runs lost or notified twice by {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="bench/bench_peers.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="a short run (400 firings, 5 s phases, one round)"
    )
    parser.add_argument(
        "--runs", type=int, help="firings of the peak phase (default 2000; quick 400)"
    )
    parser.add_argument("--duration", type=float, help="seconds of each paced phase (20; quick 5)")
    parser.add_argument("--rate", type=float, default=100.0, help="the fixed rate (default 100/s)")
    parser.add_argument("--groups", type=int, default=64, help="concurrency groups (default 64)")
    parser.add_argument(
        "--rounds", type=int, help="rounds, each engine in turn in each (default 2; quick 1)"
    )
    parser.add_argument(
        "--engines", nargs="+", choices=ENGINES, default=["rflow", "rflow-2", "restate", "dbos"]
    )
    parser.add_argument(
        "--stall", type=float, default=30.0, help="seconds without a notify that end a phase"
    )
    parser.add_argument(
        "--ports", default="19000-19099", help="ports for the servers started (LO-HI)"
    )
    parser.add_argument(
        "--rflow",
        type=Path,
        help="the rflow executable to start workers with (default: .venv/bin/rflow), "
        "to measure another checkout",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    args.runs = args.runs or (400 if args.quick else 2000)
    args.duration = args.duration or (5.0 if args.quick else 20.0)
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    if min(args.groups, args.runs, args.rounds) < 1 or args.rate <= 0 or args.duration <= 0:
        parser.error("--groups, --runs, --rounds, --rate and --duration must be positive")

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    # Under .bench/ (git-ignored), on the disk the stack's Kafka and Postgres write to.
    runs = HERE.parent.parent / ".bench" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="peers-", dir=runs))
    code = 1
    try:
        code = asyncio.run(run(args, workdir))
    except BenchError as exc:
        print(f"bench_peers: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print("bench_peers: interrupted (cleaned up)", file=sys.stderr)
    finally:
        if code or args.keep:
            print(f"bench_peers: logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
