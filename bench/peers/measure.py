"""What the peers benchmark measures with, the same for every engine: the HTTP sink that
sees each run's notify, ports, processes and percentiles (CPU time: ``bench/_cpu.py``).

Runs in the benchmark's own virtualenv (`.bench/venv`), which has no rflow in it: nothing
here may import rflow. Completion is observed only at the sink.
"""

from __future__ import annotations

import asyncio
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
