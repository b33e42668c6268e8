"""Budget reservations per second against Postgres, beside plain single-row inserts.

    python bench/bench_reservations.py [--count N] [--rounds R] [--connections C]
                                       [--preload K]

Needs the stack's Postgres (`scripts/stack up`; `eval "$(scripts/stack env)"`). A
reservation is one statement (``budget_reserve``: the per-(budget, asset) advisory lock,
the cap check and the insert of one native charge). The baseline, measured in the same run
on the same kind of connection, is a single-row INSERT into a plain table. Each is timed
committed on its own (autocommit: one transaction, one round trip) and inside an explicit
BEGIN ... COMMIT, the way the relayer reserves within the transaction that stores a send.
Both run R rounds of N transactions, alternating, each round from the same starting rows;
the best round of each is reported, with their ratio (target: reservations at least half
the baseline rate).

The cap check sums every reservation of the budget in its window, so its cost grows with
the rows there: a round charges a budget holding K (--preload, spent charges recorded an
hour ago) up to K + N rows. The concurrent variants run C connections at once, all
charging one budget (each reservation waits for the lock of the one before) or one budget
each, beside C connections of plain inserts.

A fresh schema is created and dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import emit, verdict
from _stack import BenchError, drop_schema, fresh_settings

from rflow import storage
from rflow.budgets import NATIVE, Charge
from rflow.settings import Settings
from rflow.storage import budgets

TARGET = 0.5
WINDOW = timedelta(hours=24)
CAP = 2**255
_PLAIN = """
CREATE TABLE bench_plain (
    id         text PRIMARY KEY,
    amount     numeric(78, 0) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""
_INSERT = "INSERT INTO bench_plain (id, amount) VALUES (%s, %s)"
_PRELOAD = """
INSERT INTO budget_reservations (budget, asset, send_key, amount, status, created_at)
SELECT %s, 'native', 'preload-' || %s || '-' || i, 1, 'spent', now() - interval '1 hour'
FROM generate_series(1, %s) AS i
"""

Work = Callable[[object, range], Awaitable[None]]


class Keys:
    """Unique keys across rounds, so no reservation is a redelivery of an earlier one."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, count: int) -> range:
        start, self.next = self.next, self.next + count
        return range(start, start + count)


async def reset(conn) -> None:
    """Back to the preloaded rows: each round charges budgets holding the same rows."""
    await conn.execute("DELETE FROM budget_reservations WHERE send_key LIKE 'send-%'")
    await conn.execute("TRUNCATE bench_plain")
    await conn.execute("VACUUM ANALYZE budget_reservations")
    # The delete moved the budgets' live totals once per row, in one transaction: their
    # dead versions are vacuumed too, so every round starts from the same tables.
    await conn.execute("VACUUM ANALYZE budget_live")
    await conn.execute("VACUUM ANALYZE bench_plain")


def committing(conn, explicit: bool):
    """An explicit BEGIN ... COMMIT around one transaction's work, or nothing (autocommit:
    each statement commits on its own)."""
    return conn.transaction() if explicit else contextlib.nullcontext()


def inserting(explicit: bool) -> Work:
    async def plain(conn, keys: range) -> None:
        for i in keys:
            async with committing(conn, explicit):
                await conn.execute(_INSERT, (f"row-{i}", 1))

    return plain


def reserving(budget: str, explicit: bool) -> Work:
    charge = [Charge(budget, NATIVE, 1, CAP, WINDOW)]

    async def reserve(conn, keys: range) -> None:
        for i in keys:
            async with committing(conn, explicit):
                await budgets.reserve(
                    conn, send_key=f"send-{i}", run_id=f"run-{i}", workflow="bench", charges=charge
                )

    return reserve


async def rate(works: list[Work], conns: list, keys: Keys, count: int) -> float:
    """Transactions per second of ``works[i]`` on ``conns[i]``, all at once, ``count`` in all."""
    share = count // len(conns)
    ranges = [keys.take(share) for _ in conns]
    start = time.perf_counter()
    await asyncio.gather(
        *(work(conn, r) for work, conn, r in zip(works, conns, ranges, strict=True))
    )
    return share * len(conns) / (time.perf_counter() - start)


async def compare(
    label: str, conns: list, names: list[str], args: argparse.Namespace, *, explicit: bool = False
) -> tuple[str, ...]:
    """Alternate rounds of the baseline and of reservations; print the best of each."""
    keys = Keys()
    inserts = [inserting(explicit)] * len(conns)
    reserves = [reserving(name, explicit) for name in names]
    await rate(inserts, conns, keys, 20 * len(conns))  # prepared statements, warm caches
    await rate(reserves, conns, keys, 20 * len(conns))
    baseline, ours = [], []
    for _ in range(args.rounds):
        await reset(conns[0])
        baseline.append(await rate(inserts, conns, keys, args.count))
        ours.append(await rate(reserves, conns, keys, args.count))
    best_base, best_ours = max(baseline), max(ours)
    ratio = best_ours / best_base
    print(f"{label}:")
    print(
        f"  single-row INSERTs (baseline):        {best_base:7.0f} /s"
        f"   (median {statistics.median(baseline):.0f})"
    )
    print(
        f"  budget reservations:                  {best_ours:7.0f} /s"
        f"   (median {statistics.median(ours):.0f})"
    )
    print(f"  ratio:                                {ratio:7.2f}")
    return (
        f"reservations/s, {label}",
        f"{best_ours:.0f} /s",
        f"{best_base:.0f} /s (single-row INSERTs)",
        f"{ratio:.2f}",
        f">= {TARGET} of baseline",
        verdict(ratio >= TARGET),
    )


async def run(args: argparse.Namespace, settings: Settings) -> None:
    try:
        setup = await storage.connect(settings)
    except storage.StorageError as exc:
        raise BenchError(f"{exc}; start the stack with `scripts/stack up`") from None
    shared = "bench-shared"
    own = [f"bench-{i}" for i in range(args.connections)]
    async with setup:
        await storage.migrate(setup, settings.database_schema)
        await setup.execute(_PLAIN)
        if args.preload:
            for name in ["bench-serial", shared, *own]:
                await setup.execute(_PRELOAD, (name, name, args.preload))
        await setup.execute("VACUUM ANALYZE")
    print(
        f"Postgres {settings.database_display}, schema {settings.database_schema}: "
        f"{args.count} transactions a round, best of {args.rounds}; each budget holds "
        f"{args.preload} to {args.preload + args.count} charges in its window"
    )
    conns = [await storage.connect(settings) for _ in range(max(args.connections, 1))]
    try:
        rows = [
            await compare("sequential, 1 connection", conns[:1], ["bench-serial"], args),
            await compare(
                "sequential, in BEGIN ... COMMIT", conns[:1], ["bench-serial"], args, explicit=True
            ),
        ]
        if args.connections > 1:
            many = f"concurrent, {args.connections} connections"
            rows.append(
                await compare(f"{many} charging one budget", conns, [shared] * len(conns), args)
            )
            rows.append(await compare(f"{many} charging one budget each", conns, own, args))
        emit("reservations", rows)
    finally:
        for conn in conns:
            await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="transactions a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8, help="of the concurrent variants")
    parser.add_argument("--preload", type=int, default=0, help="spent charges in each window")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        settings = fresh_settings("budgets", Path(workdir))
        try:
            asyncio.run(run(args, settings))
        except BenchError as exc:
            sys.exit(f"error: {exc}")
        finally:
            try:
                asyncio.run(drop_schema(settings))
            except storage.StorageError as exc:
                print(
                    f"cleanup of schema {settings.database_schema} failed: {exc}", file=sys.stderr
                )


if __name__ == "__main__":
    main()
