"""Where an rflow worker's time goes: py-spy samples of it, summed by what rflow was doing.

py-spy (from ``.bench/venv``, installed from the lock) reads the worker's stacks from
outside, without pausing it (``--nonblocking``), a hundred times a second for the length
of a phase. Each sample is put in the first category whose rule matches a frame of its
stack, in the order of :data:`ACTIVITIES` (the most specific first): a ``state_set``
counts with its psycopg calls, an advance started by admission counts as the engine's.
A sample matching none goes by its deepest frame of a known package (:data:`LIBRARIES`).
Samples of a thread waiting in the event loop's ``select`` are py-spy's idle samples and
are left out, so the shares are of the time the worker was running Python.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

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
            "Kafka consumer thread: fetching, handing records over",
            r"WorkerThread\.run|\(mode/threads\.py",
        ),
    )
)
"""What rflow was doing, by a frame anywhere in the stack (the first that matches)."""
LIBRARIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (label, re.compile(rule))
    for label, rule in (
        ("Kafka client on the main loop: producing", r"\(aiokafka/"),
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


def pyspy() -> Path | None:
    """py-spy beside this interpreter (the peers' virtualenv), or on the PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return beside
    found = shutil.which("py-spy")
    return Path(found) if found else None


@dataclass
class Breakdown:
    samples: int
    shares: list[tuple[str, float]]
    error: str | None = None


class Sampler:
    """py-spy recording process ``pid`` for ``seconds`` into ``out``."""

    def __init__(self, pid: int, seconds: float, out: Path) -> None:
        self.pid, self.seconds, self.out = pid, seconds, out
        self.process: asyncio.subprocess.Process | None = None
        self.error: str | None = None

    async def start(self) -> None:
        binary = pyspy()
        if binary is None:
            self.error = "py-spy is not installed"
            return
        self.process = await asyncio.create_subprocess_exec(
            str(binary),
            "record",
            "--pid",
            str(self.pid),
            "--duration",
            str(max(1, round(self.seconds))),
            "--rate",
            "100",
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            str(self.out),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )

    async def finish(self) -> Breakdown:
        if self.process is not None:
            _, err = await self.process.communicate()
            if self.process.returncode != 0 or not self.out.exists():
                # ptrace may be refused (kernel.yama.ptrace_scope): say so, measure the rest.
                self.error = (err.decode(errors="replace").strip().splitlines() or ["failed"])[-1]
        if self.error is not None:
            return Breakdown(0, [], self.error)
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
