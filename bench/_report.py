"""Printing a benchmark's figures, and collecting them for `bench/run`.

Every figure is a row: what it is, its value, the baseline measured in the same run,
their ratio, the target and whether it is met. :func:`emit` prints the rows as a table
and, when ``RFLOW_BENCH_REPORT`` names a file, appends them to it (one JSON object a
line) for `bench/run` to gather into one report.
"""

from __future__ import annotations

import json
import os

HEADER = ("figure", "value", "baseline", "ratio", "target", "verdict")


def print_table(rows: list[tuple[str, ...]], header: tuple[str, ...] = HEADER) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()

    print(line(header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def emit(bench: str, rows: list[tuple[str, ...]]) -> None:
    """Print ``rows`` (see :data:`HEADER`) and add them to the report being gathered."""
    print()
    print_table(rows)
    path = os.environ.get("RFLOW_BENCH_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as report:
            for row in rows:
                report.write(json.dumps({"bench": bench, "row": list(row)}) + "\n")


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"
