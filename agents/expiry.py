"""The sweep: forgetting what the de-duplication window no longer covers.

What is forgotten, and when, is the engine's decision (:func:`rflow.engine.memory.sweep`,
given the entries and ``now``); this module carries it out. Each worker sweeps only the
partitions it owns, a chunk of entries at a time under the partition's lock
(:meth:`~rflow.streams.consumption.Consumption.decide`): a sweep never races an
admission or a run's event on the same partition, and its deletions are table changes
like any other, written by the next checkpoint (the tombstones on the changelogs, with
the journals and the tables' other changes, before the offsets are committed). Between
two chunks it waits, so that it takes at most :data:`SHARE` of the worker's loop: runs
go on beside a sweep, however many entries it reads.

A partition is swept in full (every entry read) when this worker opens it, and every
:data:`FULL_SWEEP` after. In between, tables on disk are swept by their index of when
each entry comes due (:meth:`~rflow.streams.consumption.TableStore.due`), so a sweep
reads the entries due and none of the others; tables in memory are read in full each
time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rflow.engine import memory
from rflow.lang.model.resources import Config

if TYPE_CHECKING:
    from rflow.agents.runner import Runner
    from rflow.streams.app import RflowApp
    from rflow.streams.tables import Staged

log = logging.getLogger(__name__)

CHUNK = 100
"""Entries decided under a partition's lock at once: about a millisecond of the worker's
loop, the longest a run waits behind one step of a sweep."""
SHARE = 0.1
"""The most of the worker's loop a sweep takes: after each chunk it waits nine times as
long as the chunk took. A sweep is upkeep; a full one reads every entry of the partitions
(hundreds of milliseconds of work at a few thousand entries each, far more at millions),
and run at once it held every run arriving meanwhile that long. A sweep of what is due
that has not ended within the interval between two sweeps stops waiting: what the
window no longer covers is forgotten as fast as it comes due, whatever the rate."""
FULL_SWEEP = 24 * 3600.0
"""Seconds between two full sweeps of a partition whose tables know when entries come
due: what the index misses (a window shortened by a deploy) is found then."""
LEGACY_RUN = b'{"settled":'
"""How a settled run's entry in the ``runs`` table began before the ``settled`` table."""
SWEPT = ("triggers", "settled")
"""The tables whose entries expire (gates before markers: a gate goes no later)."""


class Sweeper:
    """Sweeps the tables of the partitions this worker owns, every
    :func:`~rflow.engine.memory.sweep_interval`."""

    def __init__(self, app: RflowApp, runner: Runner) -> None:
        self.app = app
        self.runtime = app.rflow
        self.runner = runner
        self.tables = app.rflow.tables
        self.consumption = app.rflow.consumption
        self.book = memory.Book(window=self.window, live=runner.live, begun=runner.begun)
        self.full: dict[int, float] = {}
        """Owned partitions -> when (monotonic) they were last swept in full."""
        self.counts: dict[tuple[str, int], int] = {}
        """(table, partition) -> the entries it held after its last full sweep."""
        self.opened_here: set[int] = set()
        """The partitions opened since every partition was last closed."""
        self.paced_until = 0.0
        """Until when (monotonic) the sweep under way of what is due takes at most
        :data:`SHARE` of the loop."""
        for name in SWEPT:
            table: Staged = getattr(self.tables, name)
            table.store.index_by(self._coming_due(name, table))

    @property
    def config(self) -> Config:
        return self.runner.config

    def window(self, workflow: str | None) -> timedelta:
        """The de-duplication window of ``workflow`` (the project's when it sets none or
        is not deployed any more)."""
        found = self.runner.workflows.get(workflow) if workflow is not None else None
        if found is not None and found.dedup_window is not None:
            return found.dedup_window
        return self.config.dedup_window

    def interval(self) -> float:
        windows = [self.config.dedup_window]
        windows += [w.dedup_window for w in self.runner.workflows.values() if w.dedup_window]
        indexed = all(getattr(self.tables, name).store.indexed for name in SWEPT)
        return memory.sweep_interval(windows, indexed=indexed)

    def _coming_due(self, name: str, table: Staged) -> Any:
        def coming_due(key: Any, stored: Any) -> float | None:
            return memory.comes_due(name, key, table.decode(stored), self.window)  # type: ignore[arg-type]

        return coming_due

    async def opened(self, partitions: frozenset[int]) -> None:
        """Partitions were opened here: their tables are recovered (current now), and
        are swept in full next (entries recovered from a changelog are not indexed)."""
        now = time.time()
        for partition in partitions:
            self.tables.stamp(partition, now)
            self.full.pop(partition, None)
        self.opened_here |= partitions

    def closed(self) -> None:
        """Every partition was closed, after its last checkpoint: their tables are current
        now (a restart soon after reads only what it has not seen)."""
        now = time.time()
        for partition in sorted(self.opened_here):
            self.tables.closed(partition, now)
        self.opened_here.clear()
        self.full.clear()
        self.counts.clear()

    async def sweep(self) -> None:
        """Sweep every partition this worker owns once."""
        self.paced_until = time.monotonic() + self.interval()
        indexed = all(getattr(self.tables, n).store.indexed for n in SWEPT)
        for partition in sorted(self.consumption.owned()):
            daily = partition in self.full
            full = time.monotonic() - self.full.get(partition, -FULL_SWEEP) >= FULL_SWEEP
            if full or not indexed:
                # Without an index a full sweep is how entries are forgotten, and the first
                # after an opening is how recovered entries get indexed: both keep up as a
                # sweep of what is due does. The daily one is upkeep, always paced.
                swept = await self._sweep_full(partition, paced=indexed and daily)
                if swept:
                    self.full[partition] = time.monotonic()
            else:
                swept = await self._sweep_due(partition)
            if swept:
                self.tables.stamp(partition, time.time())
        metrics = self.runtime.metrics
        if metrics is not None:
            for name in ("triggers", "settled", "runs"):
                held = sum(c for (n, _), c in self.counts.items() if n == name)
                metrics.remembered.labels(name).set(held)
            metrics.sweeps.inc()

    # --- full sweeps ----------------------------------------------------------------

    async def _sweep_full(self, partition: int, paced: bool) -> bool:
        """Read every entry of ``partition``; False if it was given up meanwhile."""
        for name in SWEPT:
            getattr(self.tables, name).store.rewind(partition)
        for name in ("runs", *SWEPT):
            counted = await self._chunks(
                partition, lambda after, n=name: self._full(n, partition, after), paced
            )
            if counted is None:
                return False
            self.counts[(name, partition)] = counted
        return True

    async def _chunks(self, partition: int, chunk: Any, paced: bool = False) -> int | None:
        """Run ``chunk(after)`` under the partition's lock until it returns no key to go
        on after; the entries it kept, or ``None`` if the partition was given up. After
        each chunk, wait to take at most :data:`SHARE` of the loop: always if ``paced``,
        else until :attr:`paced_until`."""
        after: Any = None
        kept = 0
        while True:
            done: list[tuple[tuple[Any, int], float]] = []

            async def work(after: Any = after, done: list = done) -> None:
                began = time.perf_counter()
                found = chunk(after)
                done.append((found, time.perf_counter() - began))

            if not await self.consumption.decide(partition, work):
                return None
            (last, counted), took = done[0]
            kept += counted
            pace = paced or time.monotonic() < self.paced_until
            await asyncio.sleep(took * (1 / SHARE - 1) if pace else 0)
            if last is None:
                return kept
            after = last

    def _full(self, name: str, partition: int, after: Any) -> tuple[Any, int]:
        table: Staged = getattr(self.tables, name)
        now = datetime.now(UTC)
        if name == "runs":
            stored = table.store.scan(partition, after, CHUNK)
            # Only a settled run's entry from before the settled table is decided: the
            # runs that have not settled stay, undecoded.
            entries = [
                (key, table.decode(value))
                for key, value in stored
                if not table.pending(key) and bytes(value).startswith(LEGACY_RUN)
            ]
        else:
            stored = table.scan(partition, after, CHUNK)
            entries = [(key, value) for key, value in stored if value is not None]
        forgotten, rewritten = self._carry_out(name, entries, now)
        if name in SWEPT and table.store.indexed:
            # Index what stays (recovered entries were not indexed when written).
            again = [
                (key, self._next_due(name, key, value, now))
                for key, value in entries
                if key not in forgotten and key not in rewritten
            ]
            table.store.reindex(partition, (), again)
        last = stored[-1][0] if len(stored) == CHUNK else None
        held = sum(1 for key, _ in stored if not table.pending(key) or table.get(key) is not None)
        return last, held - len(forgotten)

    # --- sweeps of what is due --------------------------------------------------------

    async def _sweep_due(self, partition: int) -> bool:
        for name in SWEPT:
            done = await self._chunks(partition, lambda after, n=name: self._due(n, partition))
            if done is None:
                return False
        return True

    def _due(self, name: str, partition: int) -> tuple[Any, int]:
        """Decide the entries of ``name`` due now (a chunk); (whether more may be due,
        how many were forgotten)."""
        table: Staged = getattr(self.tables, name)
        now = datetime.now(UTC)
        due = table.store.due(partition, now.timestamp(), CHUNK)
        entries = [(key, table.get(key)) for _, key in due]
        present = [(key, value) for key, value in entries if value is not None]
        forgotten, rewritten = self._carry_out(name, present, now)
        again = [
            (key, self._next_due(name, key, value, now))
            for key, value in present
            if key not in forgotten and key not in rewritten
        ]
        table.store.reindex(partition, [raw for raw, _ in due], again)
        return (True if len(due) == CHUNK else None), len(forgotten)

    def _next_due(self, name: str, key: Any, value: Any, now: datetime) -> float:
        """When a kept entry is looked at again: when it comes due as the windows are
        now, and not before the next sweep (a live run's firing waits that long)."""
        at = memory.comes_due(name, key, value, self.window)  # type: ignore[arg-type]
        return max(at or 0.0, now.timestamp() + self.interval())

    # --- carrying out -------------------------------------------------------------------

    def _carry_out(
        self, name: str, entries: list[tuple[Any, Any]], now: datetime
    ) -> tuple[set[Any], set[Any]]:
        """Carry out the sweep's decisions on ``entries`` of ``name``: the keys of
        ``name`` forgotten, and those rewritten (indexed again when written)."""
        decisions = memory.sweep(name, entries, self.book, now)  # type: ignore[arg-type]
        metrics = self.runtime.metrics
        forgotten: set[Any] = set()
        rewritten: set[Any] = set()
        for decision in decisions:
            target: Staged = getattr(self.tables, decision.table)
            if isinstance(decision, memory.Forget):
                del target[decision.key]
                if metrics is not None:
                    metrics.forgotten.labels(decision.table).inc()
                log.debug("forgot %s %s: %s", decision.table, decision.key, decision.why)
                if decision.table == name:
                    forgotten.add(decision.key)
            else:
                target[decision.key] = decision.entry
                if decision.table == name:
                    rewritten.add(decision.key)
        return forgotten, rewritten


def attach(app: RflowApp, runner: Runner) -> Sweeper:
    """Give ``app`` its sweep: a loop on every worker, over the partitions it owns."""
    sweeper = Sweeper(app, runner)
    consumption = app.rflow.consumption
    consumption.on_open.append(sweeper.opened)
    consumption.on_close.append(sweeper.closed)

    @app.task
    async def sweep_loop() -> None:
        while True:
            await asyncio.sleep(sweeper.interval())
            if app.rebalancing or app.in_recovery:
                continue
            try:
                await sweeper.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one failed sweep must not end the loop
                if app.should_stop:
                    return
                log.warning("the sweep of the tables failed: %r", exc)

    return sweeper
