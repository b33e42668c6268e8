"""How far the runner may decide ahead of the actions it started.

Deciding a run is quick; carrying out its actions (a Postgres row, an HTTP call) is not.
Each action runs as a task of its own, so a burst of firings would otherwise start tasks
faster than they finish, each holding its run's effect in memory: 100,000 firings of a
workflow that parks in a ``delay`` queued tens of thousands of timer rows, and the
worker grew by hundreds of megabytes. The runner agent asks :meth:`Backlog.room` before
it takes each record: above :data:`HIGH` unfinished actions it waits until they are
down to :data:`LOW`, and the records wait in Kafka meanwhile (Faust pauses fetching a
partition whose queue is full). It waits outside any partition's lock, so the actions it
waits for can decide their results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

HIGH = 10_000
"""Unfinished actions above which the runner takes no further record."""
LOW = 7_500
"""Unfinished actions below which it takes records again."""


class Backlog:
    """The unfinished tasks of a worker's actions, and room for more."""

    def __init__(self, high: int = HIGH, low: int = LOW) -> None:
        if not 0 <= low < high:
            raise ValueError(f"low ({low}) must be below high ({high})")
        self.high, self.low = high, low
        self.tasks: set[asyncio.Task[Any]] = set()
        self._room = asyncio.Event()
        self._room.set()

    def __len__(self) -> int:
        return len(self.tasks)

    def start(self, work: Awaitable[Any]) -> asyncio.Task[Any]:
        """Run ``work`` as a task counted until it finishes."""
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        if len(self.tasks) >= self.high:
            self._room.clear()
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if len(self.tasks) <= self.low:
            self._room.set()

    async def room(self) -> None:
        """Return at once while under :attr:`high`; else once down to :attr:`low`."""
        if not self._room.is_set():
            await self._room.wait()
