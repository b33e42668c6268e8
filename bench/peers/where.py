"""Where an rflow worker's time goes: py-spy samples of it, summed by what rflow was doing.

py-spy (from ``.bench/venv``, installed from the lock; started by ``bench/_profile.py``)
reads the worker's stacks from outside, without pausing it, a hundred times a second for
the length of a phase. Each sample is put in the first category whose rule matches a frame of its
stack, in the order of :data:`ACTIVITIES` (the most specific first): a ``state_set``
counts with its psycopg calls, an advance started by admission counts as the engine's.
A sample matching none goes by its deepest frame of a known package (:data:`LIBRARIES`).
Samples of a thread waiting in the event loop's ``select`` are py-spy's idle samples and
are left out, so the shares are of the time the worker was running Python.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from _profile import start_profiler, stop_profiler

ACTIVITIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (label, re.compile(rule))
    for label, rule in (
        ("read model: projecting run events into Postgres", r"\(agents/projector\.py"),
        (
            "checkpoint: journals and table changes to Kafka, offsets",
            r"Consumption\.checkpoint|flush_journal|\b(Staged|Tables)\.flush\b",
        ),
        ("state_set: the Postgres statement (psycopg)", r"Executors\.state\b"),
        ("notify: the HTTP request (aiohttp)", r"Executors\.notify\b"),
        ("engine: advance (the run's decisions)", r"\(rflow/engine/advance\.py"),
        (
            "admission: gate, lanes, starting the run",
            r"\bRunner\.(admit|begin|start_run|settled|carry_out)\b|\(rflow/engine/admission\.py",
        ),
        (
            "Kafka consumer: fetching, handing records over",
            r"\(aiokafka/consumer/|\(faust/transport/(consumer|drivers/aiokafka)\.py"
            r"|RflowConsumer(Service)?\.|WorkerThread\.run|\(mode/threads\.py",
        ),
    )
)
"""What rflow was doing, by a frame anywhere in the stack (the first that matches)."""
LIBRARIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (label, re.compile(rule))
    for label, rule in (
        ("Kafka client: producing, the connections", r"\(aiokafka/"),
        ("Faust streams and codecs: records to the agent", r"\((faust|codecs)/|\(mode/(?!worker)"),
        ("Postgres client (psycopg): other statements", r"\(psycopg(_pool)?/"),
        ("HTTP client (aiohttp): other requests", r"\(aiohttp/"),
        (
            "other rflow code (effects, consumption, metrics)",
            r"\((rflow/(?!cli/)|agents/|streams/|storage/)",
        ),
    )
)
"""Else whose code the deepest frame of a known package is, in the callback the event
loop was running."""
OTHER = "event loop and the rest"


@dataclass
class Breakdown:
    samples: int
    shares: list[tuple[str, float]]
    error: str | None = None


class Sampler:
    """py-spy recording process ``pid`` from :meth:`start` to :meth:`finish` into ``out``."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = pid, out
        self.errors = out.with_suffix(".err")
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = start_profiler(self.pid, self.out, rate=100, errors=self.errors)

    async def finish(self) -> Breakdown:
        if self.process is None:
            return Breakdown(0, [], "py-spy is not installed")
        await asyncio.to_thread(stop_profiler, self.process)
        if not self.out.exists():
            # ptrace may be refused (kernel.yama.ptrace_scope): say so, measure the rest.
            said = self.errors.read_text(errors="replace").strip().splitlines()
            return Breakdown(0, [], said[-1] if said else "py-spy failed")
        return breakdown(self.out.read_text())


def breakdown(raw: str) -> Breakdown:
    """Shares of py-spy's raw (collapsed) stacks by category."""
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        counts[category(stack)] += int(n)
    total = sum(counts.values())
    order = [label for label, _ in (*ACTIVITIES, *LIBRARIES)] + [OTHER]
    shares = [(label, counts[label] / total) for label in order if counts[label]] if total else []
    return Breakdown(total, shares)


def category(stack: str) -> str:
    for label, rule in ACTIVITIES:
        if rule.search(stack):
            return label
    frames = stack.split(";")
    # The callback the event loop was running, not the loop and the worker around it.
    ran = max((i for i, f in enumerate(frames) if f.startswith("Handle._run ")), default=-1)
    for frame in reversed(frames[ran + 1 :]):
        for label, rule in LIBRARIES:
            if rule.search(frame):
                return label
    return OTHER
