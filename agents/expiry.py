"""The sweep: forgetting what the de-duplication window no longer covers.

What is forgotten, and when, is the engine's decision (:func:`rflow.engine.memory.sweep`,
given the entries and ``now``); this module carries it out. Each worker sweeps only the
partitions it owns, a chunk of entries at a time under the partition's lock
(:meth:`~rflow.streams.consumption.Consumption.decide`): a sweep never races an
admission or a run's event on the same partition, and its deletions are table changes
like any other, written by the next checkpoint (the tombstones on the changelogs, with
the journals and the tables' other changes, before the offsets are committed).
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

CHUNK = 500
"""Entries decided under a partition's lock at once (about a millisecond of it held)."""
LEGACY_RUN = b'{"settled":'
"""How a settled run's entry in the ``runs`` table began before the ``settled`` table."""


class Sweeper:
    """Sweeps the tables of the partitions this worker owns, every
    :func:`~rflow.engine.memory.sweep_interval`."""

    def __init__(self, app: RflowApp, runner: Runner) -> None:
        self.app = app
        self.runtime = app.rflow
        self.runner = runner
        self.tables = app.rflow.tables
        self.consumption = app.rflow.consumption
        self.passes = 0
        """Sweeps completed (for tests)."""
        self.book = memory.Book(window=self.window, live=runner.live, begun=runner.begun)

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
        return memory.sweep_interval(windows)

    async def opened(self, partitions: frozenset[int]) -> None:
        """Partitions were opened here: their tables are recovered, so current now."""
        now = time.time()
        for partition in partitions:
            self.tables.stamp(partition, now)

    async def sweep(self) -> dict[str, int]:
        """Sweep every partition this worker owns once; returns the entries each table
        holds after it."""
        seen = {"triggers": 0, "settled": 0, "runs": 0}
        for partition in sorted(self.consumption.owned()):
            complete = True
            for name in ("runs", "triggers", "settled"):
                counted = await self._sweep(name, partition)
                if counted is None:
                    complete = False  # the partition went to another worker meanwhile
                    break
                seen[name] += counted
            if complete:
                self.tables.stamp(partition, time.time())
        metrics = self.runtime.metrics
        if metrics is not None:
            for name, count in seen.items():
                metrics.remembered.labels(name).set(count)
            metrics.sweeps.inc()
        self.passes += 1
        return seen

    async def _sweep(self, name: str, partition: int) -> int | None:
        """Sweep ``name``'s entries on ``partition``, a chunk at a time; how many it keeps,
        or ``None`` if the partition was given up meanwhile."""
        table: Staged = getattr(self.tables, name)
        after: Any = None
        count = 0
        while True:
            found: list[tuple[Any, int]] = []

            async def chunk(after: Any = after, found: list[tuple[Any, int]] = found) -> None:
                found.append(self._chunk(name, table, partition, after))

            if not await self.consumption.decide(partition, chunk):
                return None
            last, seen = found[0]
            count += seen
            if last is None:
                return count
            after = last
            await asyncio.sleep(0)

    def _chunk(self, name: str, table: Staged, partition: int, after: Any) -> tuple[Any, int]:
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
        decisions = memory.sweep(name, entries, self.book, now)  # type: ignore[arg-type]
        metrics = self.runtime.metrics
        for decision in decisions:
            target: Staged = getattr(self.tables, decision.table)
            if isinstance(decision, memory.Forget):
                del target[decision.key]
                if metrics is not None:
                    metrics.forgotten.labels(decision.table).inc()
                log.debug("forgot %s %s: %s", decision.table, decision.key, decision.why)
            else:
                target[decision.key] = decision.entry
        last = stored[-1][0] if len(stored) == CHUNK else None
        held = sum(1 for key, _ in stored if not table.pending(key) or table.get(key) is not None)
        forgotten = sum(1 for d in decisions if isinstance(d, memory.Forget) and d.table == name)
        return last, held - forgotten


def attach(app: RflowApp, runner: Runner) -> Sweeper:
    """Give ``app`` its sweep: a loop on every worker, over the partitions it owns."""
    sweeper = Sweeper(app, runner)
    app.rflow.consumption.on_open.append(sweeper.opened)

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
