"""What the peers benchmark measures with, the same for every engine: the HTTP sink that
sees each run's notify, CPU time of process trees, ports, processes and percentiles.

Runs in the benchmark's own virtualenv (`.bench/venv`), which has no rflow in it: nothing
here may import rflow. Completion is observed only at the sink.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _profile import die_with_parent
from aiohttp import web


class BenchError(Exception):
    """The benchmark cannot go on: a process died, a wait timed out, the stack is down."""


# --- the sink -------------------------------------------------------------------------


@dataclass
class Sink:
    """An HTTP server on 127.0.0.1 standing for the system a run notifies. Each request's
    ``Idempotency-Key`` names the run (``bench:<trigger key>:tell`` on every engine); the
    sink keeps when each key first arrived (``time.time()``) and how often it came."""

    port: int
    arrivals: dict[str, float] = field(default_factory=dict)
    deliveries: Counter[str] = field(default_factory=Counter)
    unnamed: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        now = time.time()
        await request.read()
        key = request.headers.get("Idempotency-Key")
        if key is None:
            self.unnamed += 1
        else:
            self.arrivals.setdefault(key, now)
            self.deliveries[key] += 1
        return web.json_response({"ok": True})

    def arrived(self, keys: Iterable[str]) -> int:
        return sum(1 for key in keys if key in self.arrivals)

    def duplicates(self, keys: Iterable[str]) -> int:
        """Deliveries beyond the first, over ``keys``."""
        return sum(max(0, self.deliveries[key] - 1) for key in keys)

    async def start(self) -> Sink:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


# --- CPU ------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None:
                tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def tree_cpu(roots: Iterable[int]) -> float:
    """CPU seconds (user + system) used so far by each root and every descendant: the
    live processes' own time plus what each has collected from children that exited
    (Postgres forks a backend per connection; they come and go)."""
    tree = _children()
    total = 0.0
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        fields = _stat(pid)
        if fields is None:
            continue
        # utime, stime, cutime, cstime: fields 14-17 of proc(5), here from the state on.
        total += sum(int(v) for v in fields[11:15]) / _TICK
        todo.extend(tree.get(pid, ()))
    return total


def own_cpu() -> float:
    """CPU seconds of this process alone (the driver and its sink), children left out."""
    times = os.times()
    return times.user + times.system


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / _TICK, sum(values) / _TICK


class CpuMeter:
    """CPU used between start and stop by named groups of process trees, by this process,
    and by the machine as a whole. What is left is noise: other users of the shared
    machine, and kernel threads (network and disk work, for everyone, ours included)."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups
        self.start = {name: tree_cpu(pids) for name, pids in groups.items()}
        self.own = own_cpu()
        self.busy, self.total = machine_cpu()
        self.wall = time.monotonic()

    def sample(self, name: str) -> tuple[float, float]:
        """(CPU seconds so far, monotonic time) of group ``name``."""
        return tree_cpu(self.groups[name]), time.monotonic()

    def rate(self, name: str, since: tuple[float, float]) -> tuple[float, tuple[float, float]]:
        """Cores used by group ``name`` since the sample ``since``, and a sample of now."""
        now = self.sample(name)
        cores = (now[0] - since[0]) / (now[1] - since[1]) if now[1] > since[1] else 0.0
        return cores, now

    def stop(self) -> dict[str, Any]:
        used = {name: tree_cpu(pids) - self.start[name] for name, pids in self.groups.items()}
        own = own_cpu() - self.own
        busy, total = machine_cpu()
        wall = time.monotonic() - self.wall
        cores = os.cpu_count() or 1
        machine = (busy - self.busy) / (total - self.total) if total > self.total else 0.0
        ours = sum(used.values()) + own
        return {
            "cpu": used,
            "driver": own,
            "wall": wall,
            "machine_busy": machine,  # share of all cores
            # Cores busy outside the processes metered: other users, kernel threads.
            "others": max(0.0, machine * cores - ours / wall) if wall else 0.0,
        }


# --- processes and ports --------------------------------------------------------------


class Process:
    """A server the benchmark started, logging to a file, stopped by its PID."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._out = log.open("ab")
        self.proc = subprocess.Popen(
            command,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(
                f"{self.name} (pid {self.pid}) exited with {self.proc.returncode}; "
                f"log {self.log}:\n{self.tail()}"
            )

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._out.close()


class Ports:
    """Ports for the servers the benchmark starts, taken from one range (``LO-HI``)."""

    def __init__(self, spec: str) -> None:
        lo, _, hi = spec.partition("-")
        try:
            self.lo, self.hi = int(lo), int(hi)
        except ValueError:
            raise BenchError(
                f"--ports {spec!r}: expected a range LO-HI, e.g. 19000-19099"
            ) from None
        if not 1024 <= self.lo <= self.hi <= 65535:
            raise BenchError(f"--ports {spec!r}: expected 1024 <= LO <= HI <= 65535")
        self.given: set[int] = set()

    def take(self) -> int:
        """A port of the range no one listens on and not given out before."""
        for port in range(self.lo, self.hi + 1):
            if port in self.given:
                continue
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            self.given.add(port)
            return port
        raise BenchError(f"no free port left in {self.lo}-{self.hi} (--ports)")


async def wait_until(check: Any, *, timeout: float, what: str, alive: Any = None) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.1)


# --- statistics -----------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]
