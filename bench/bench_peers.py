"""rflow beside Restate and DBOS: the same workflow on each, driven the same way, black-box.

    python bench/bench_peers.py [--quick] [--runs N] [--duration S] [--rate R] [--groups G]
                                [--rounds N] [--engines rflow rflow-2 restate dbos ...]
                                [--stall S] [--ports LO-HI] [--rflow PATH] [--keep]

Needs the local stack (`scripts/stack up`, then `eval "$(scripts/stack env)"`) and rflow's
virtualenv (`scripts/bootstrap`). The peers are installed by this script into `.bench/`
(git-ignored), never into rflow's environment:

  .bench/venv  a virtualenv from bench/peers/requirements.lock (exact versions, hashes):
               restate-sdk, hypercorn, dbos, py-spy, and the driver's clients (aiokafka,
               aiohttp);
  .bench/npm   restate-server from npm (@restatedev/restate-server-linux-x64, pinned).

Then it runs bench/peers/driver.py in that virtualenv. The workflow is bench_pipeline.py's
three steps (state_set, choose, notify to a local HTTP sink) with a concurrency group:

  rflow    `rflow worker` with the project, started as docs/producing-triggers.md says; a client produces
           trigger records to rflow.triggers (aiokafka, acks=all, key = the group);
  rflow-2  the same with two workers in one consumer group (one per core of a 2-core
           machine: a worker is one Python process, Restate runs a multi-threaded server
           beside its Python service);
  Restate  restate-server and a Python service (a virtual object per group), called through
           the ingress (`POST /Bench/<group>/run/send`, idempotency key);
  DBOS     a DBOS application on the stack's Postgres; `DBOSClient.enqueue` on a queue
           partitioned by group, one workflow at a time per group.

The engines run in turn, in two rounds by default (`--rounds`; one with `--quick`): rflow,
rflow-2, Restate, DBOS, then all of them again, each round on fresh deployments, and the
report compares rflow with Restate round by round: a target is met only if it is met in
every round.

Completion is measured at the sink. Figures per engine: peak runs/s (open loop, to the last
notify), p50/p99 trigger-to-sink latency at 100 runs/s and at half the engine's own peak,
CPU per run of the engine's processes (Kafka and Postgres apart), duplicates and losses.
Every rflow figure is reported as a ratio to Restate's. While rflow runs at 100 runs/s,
py-spy (from the lock) samples its worker from outside and the report says where the
worker's time goes (bench/peers/where.py). Engines that are not in --engines:
`restate-fsync` (Restate with its WAL fsync, as shipped) and `rflow-ungrouped` (the
workflow without a concurrency group, keyed by trigger key, as bench_pipeline.py runs it).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
HOME = REPO / ".bench"
VENV = HOME / "venv"
NPM = HOME / "npm"
LOCK = BENCH / "peers" / "requirements.lock"
RESTATE_PACKAGE = "@restatedev/restate-server-linux-x64"
RESTATE_VERSION = "1.7.12"
RESTATE_BIN = NPM / "node_modules" / RESTATE_PACKAGE / "bin" / "restate-server"


def say(message: str) -> None:
    print(f"[bench_peers] {message}", flush=True)


def fail(message: str) -> None:
    print(f"bench_peers: {message}", file=sys.stderr)
    sys.exit(1)


def run(command: list[str], what: str) -> None:
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        fail(
            f"{what} failed (exit {result.returncode}): {' '.join(command)}\n{result.stdout[-4000:]}"
        )


def install_venv() -> Path:
    """The peers' virtualenv, (re)built whenever the lock file changes."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".lock-sha256"
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    say(f"installing the peers' Python packages into {VENV} (from {LOCK.relative_to(REPO)})")
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", "--clear", str(VENV)], "creating the virtualenv")
    run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], "upgrading pip")
    run(
        [str(python), "-m", "pip", "install", "-q", "--require-hashes", "-r", str(LOCK)],
        "installing bench/peers/requirements.lock",
    )
    stamp.write_text(digest + "\n")
    return python


def install_restate() -> None:
    """restate-server from npm, at the pinned version."""
    if RESTATE_BIN.exists():
        found = subprocess.run([str(RESTATE_BIN), "--version"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.split()[-1:] == [RESTATE_VERSION]:
            return
    if shutil.which("npm") is None:
        fail("npm is needed to fetch restate-server (Node.js with npm)")
    say(f"fetching restate-server {RESTATE_VERSION} from npm into {NPM}")
    NPM.mkdir(parents=True, exist_ok=True)
    run(
        ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(NPM),
         f"{RESTATE_PACKAGE}@{RESTATE_VERSION}"],
        "npm install restate-server",
    )  # fmt: skip
    if not RESTATE_BIN.exists():
        fail(f"restate-server not found at {RESTATE_BIN} after npm install")


def main() -> None:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        return
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        fail(
            f"needs Linux on x86_64 ({RESTATE_PACKAGE}); this is {platform.system()} {platform.machine()}"
        )
    python = install_venv()
    install_restate()
    driver = BENCH / "peers" / "driver.py"
    os.execv(str(python), [str(python), str(driver), *sys.argv[1:]])


if __name__ == "__main__":
    main()
