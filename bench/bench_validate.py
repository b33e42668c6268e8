"""How long `rflow validate examples/` takes, against plain `yaml.safe_load` of the same files.

    python bench/bench_validate.py [PATH] [--repeat N]

Prints the best of N runs for each, and their ratio. Cold start (importing rflow.lang,
building the pydantic validators) is reported separately: it is paid once per process.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import emit

REPO = Path(__file__).resolve().parent.parent


def best_of(repeat: int, run: object) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=str(REPO / "examples"))
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    start = time.perf_counter()
    from rflow.lang import project_files, validate_path

    cold = time.perf_counter() - start
    path = Path(args.path)
    files = project_files(path)
    env: dict[str, str] = {}

    def baseline() -> None:
        for file in files:
            yaml.safe_load(file.read_text(encoding="utf-8"))

    def baseline_c() -> None:
        for file in files:
            yaml.load(file.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)

    def validate() -> None:
        report = validate_path(path, env)
        assert report.ok, [str(d) for d in report.errors]

    validate()  # warm caches (time zones, validators) once, as a long-lived process would
    plain = best_of(args.repeat, baseline)
    plain_c = best_of(args.repeat, baseline_c)
    ours = best_of(args.repeat, validate)
    print(f"files: {len(files)} in {path}")
    print(f"import rflow.lang (cold):      {cold * 1000:8.1f} ms")
    print(f"yaml.safe_load (baseline):     {plain * 1000:8.1f} ms")
    print(f"yaml CSafeLoader (baseline):   {plain_c * 1000:8.1f} ms")
    print(f"validate_path (load + checks): {ours * 1000:8.1f} ms")
    emit(
        "validate",
        [
            (
                f"rflow validate, {len(files)} files",
                f"{ours * 1000:.1f} ms",
                f"{plain * 1000:.1f} ms (yaml.safe_load)",
                f"{ours / plain:.2f}",
                "-",
                "-",
            )
        ],
    )


if __name__ == "__main__":
    main()
