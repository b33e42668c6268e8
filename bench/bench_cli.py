"""How long the ``rflow`` command takes to answer, beside ``python -c pass``.

    .venv/bin/python bench/bench_cli.py [--repeat N]

Each command runs N times (default 5) in a fresh interpreter; the median wall time is
printed beside the median of ``python -c pass`` measured in the same run. Commands that
read the database use the environment (``eval "$(scripts/stack env)"``); one that fails
is reported with its exit code rather than a time.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS: list[list[str]] = [
    ["--version"],
    ["--help"],
    ["validate", str(ROOT / "examples")],
    ["runs", "list"],
    ["budgets", "ls"],
]


def _median(argv: list[str], repeat: int) -> tuple[float, int]:
    times, code = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
        code = code or done.returncode
    return statistics.median(times), code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    baseline, _ = _median([sys.executable, "-c", "pass"], args.repeat)
    print(f"{'python -c pass':<32} {baseline * 1000:7.0f} ms  (baseline)")
    for command in COMMANDS:
        took, code = _median([sys.executable, "-m", "rflow.cli", *command], args.repeat)
        label = "rflow " + " ".join(c if "/" not in c else Path(c).name for c in command)
        note = f"  exit {code}" if code else ""
        print(f"{label:<32} {took * 1000:7.0f} ms  ({took / baseline:4.1f}x baseline){note}")


if __name__ == "__main__":
    main()
