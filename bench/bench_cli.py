"""How long the ``rflow`` command takes to answer, beside ``python -c pass``.

    .venv/bin/python bench/bench_cli.py [--repeat N] [--project PATH]

Each command runs N times (default 5) in a fresh interpreter, after one run that is not
counted (it writes the bytecode caches a user's second call finds). Its best and median
wall times are printed beside those of ``python -c pass`` measured in the same run, with
the median CPU time (user + system) of the process. On a busy machine the load adds to
every run, unevenly: the best of several is the closest to the command's own cost, and
the ratio to ``python -c pass`` travels between machines better than milliseconds. Commands that read the database use the environment
(``eval "$(scripts/stack env)"``), and act as the principal of ``RFLOW_CLI_TOKEN`` or
``RFLOW_API_TOKEN`` (set one: a command without a token is refused); ``runs show`` shows
the newest run. A command that
fails is reported with its exit code rather than a time.

Targets (issue 18): ``--help``, ``--version`` and ``validate`` under 0.3 s; ``runs list``,
``runs show`` and ``budgets ls`` under 0.5 s on the local stack.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"--version": 0.3, "--help": 0.3, "validate": 0.3, "runs": 0.5, "budgets": 0.5}


def _environment() -> dict[str, str]:
    # A user's interpreter writes and reads bytecode caches; measure that case.
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _one(argv: list[str]) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, cwd=ROOT, env=_environment())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, done.returncode


def _times(argv: list[str], repeat: int) -> tuple[float, float, float, int]:
    """Best wall, median wall, median CPU (seconds) and the first non-zero exit code."""
    _one(argv)
    walls, cpus, code = [], [], 0
    for _ in range(repeat):
        wall, cpu, status = _one(argv)
        walls.append(wall)
        cpus.append(cpu)
        code = code or status
    return min(walls), statistics.median(walls), statistics.median(cpus), code


def _newest_run() -> str | None:
    done = subprocess.run(
        [sys.executable, "-m", "rflow.cli", "runs", "list", "--limit", "1", "--json"],
        capture_output=True,
        cwd=ROOT,
        env=_environment(),
        text=True,
    )
    rows = json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else []
    return rows[0]["run_id"] if rows else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--project", default=str(ROOT / "examples"))
    args = parser.parse_args()
    commands: list[list[str]] = [
        ["--version"],
        ["--help"],
        ["validate", str(ROOT / "examples")],
        ["runs", "list"],
        ["runs", "show", _newest_run() or "(no run yet: run scripts/demo first)"],
        ["budgets", "ls", "--project", args.project],
    ]
    best, wall, cpu, _ = _times([sys.executable, "-c", "pass"], args.repeat)
    print(f"{'command':<38} {'best':>7} {'median':>7} {'cpu':>7}  best beside python -c pass")
    print(f"{'python -c pass':<38} {best * 1e3:4.0f} ms {wall * 1e3:4.0f} ms {cpu * 1e3:4.0f} ms")
    for command in commands:
        top, took, used, code = _times([sys.executable, "-m", "rflow.cli", *command], args.repeat)
        label = "rflow " + " ".join(c if "/" not in c else Path(c).name for c in command)
        target = TARGETS.get(command[0])
        verdict = "" if target is None else ("  met" if top < target else "  NOT met")
        note = f"  exit {code}" if code else f"  {top / best:4.1f}x, target {target} s{verdict}"
        print(
            f"{label[:38]:<38} {top * 1e3:4.0f} ms {took * 1e3:4.0f} ms {used * 1e3:4.0f} ms{note}"
        )


if __name__ == "__main__":
    main()
