"""Child processes of the benchmarks, and py-spy on a worker (standard library only).

Shared by the benchmarks in rflow's virtualenv (through ``_stack.py``) and by the peers'
driver in ``.bench/venv``, which cannot import rflow.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import signal
import subprocess
import sys
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: SIGTERM the child if the benchmark dies, so nothing it started outlives it."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def start_profiler(
    pid: int, out: Path, rate: int = 200, errors: Path | None = None
) -> subprocess.Popen | None:
    """``py-spy record`` on ``pid`` (collapsed stacks, idle frames dropped) until stopped;
    None when py-spy is not installed. ``errors`` receives what py-spy says on failing."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        return None
    command = [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate)]
    command += ["--nonblocking", "--output", str(out)]
    with errors.open("wb") if errors is not None else contextlib.nullcontext() as stderr:
        return subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=stderr if stderr is not None else subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )


def stop_profiler(proc: subprocess.Popen) -> None:
    """py-spy writes its output when interrupted."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
