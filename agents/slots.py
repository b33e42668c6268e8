"""``config.max_concurrent_runs``: how many runs may execute steps at once on a worker.

A run holds one slot while any of its actions executes (the iterations of a parallel
``foreach`` share it) and gives it back when none does; a run parked in a delay, a wait
or a send handed to the relayer holds none. Runs over the limit wait for a slot, in the
order they asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class RunSlots:
    def __init__(self, size: int) -> None:
        self.size = size
        self.free = asyncio.Semaphore(size)
        self.users: dict[str, int] = {}
        self.granted: dict[str, asyncio.Event] = {}
        self.owed = 0
        """Slots to keep when given back, after a :meth:`resize` to fewer."""

    @asynccontextmanager
    async def hold(self, run_id: str) -> AsyncIterator[None]:
        """Execute inside this block with ``run_id`` holding a slot."""
        users = self.users.get(run_id, 0)
        self.users[run_id] = users + 1
        if users == 0:
            self.granted[run_id] = granted = asyncio.Event()
        else:
            granted = self.granted[run_id]
        try:
            if users == 0:
                await self.free.acquire()
                granted.set()
            else:
                await granted.wait()
            yield
        finally:
            self.users[run_id] -= 1
            if self.users[run_id] == 0:
                del self.users[run_id]
                if self.granted.pop(run_id).is_set():
                    if self.owed:
                        self.owed -= 1
                    else:
                        self.free.release()

    def resize(self, size: int) -> None:
        """Allow ``size`` runs at once from now on (``config.max_concurrent_runs`` was
        deployed anew). A smaller size takes effect as runs give their slots back."""
        grow = size - self.size
        if grow < 0:
            self.owed -= grow
        else:
            paid = min(grow, self.owed)
            self.owed -= paid
            for _ in range(grow - paid):
                self.free.release()
        self.size = size

    @property
    def executing(self) -> int:
        """Runs holding a slot now."""
        return sum(1 for event in self.granted.values() if event.is_set())
