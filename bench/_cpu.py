"""CPU time of process trees, of this process and of the whole machine, from /proc
(standard library only).

Shared by the benchmarks in rflow's virtualenv (through ``_stack.py``) and by the peers'
driver in ``.bench/venv``, which cannot import rflow.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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
            "cpu": used,  # CPU seconds of each group
            "cores": {name: used[name] / wall if wall else 0.0 for name in used},
            "driver": own,  # CPU seconds of this process (producer, sink, polling)
            "wall": wall,
            "machine_busy": machine,  # share of all cores
            # Cores busy outside the processes metered: other users, kernel threads.
            "others": max(0.0, machine * cores - ours / wall) if wall else 0.0,
        }


def stack_pids(repo: Path, name: str) -> list[int]:
    """The PID ``scripts/stack`` recorded for its server ``name`` (kafka, postgres), or
    none when the stack was started some other way."""
    try:
        return [int((repo / ".stack" / "run" / f"{name}.pid").read_text().strip())]
    except (FileNotFoundError, ValueError):
        return []
