"""The worker's Postgres pool, opened when the app starts and closed when it stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import psycopg
from mode import Service

from rflow.settings import Settings
from rflow.storage import Unavailable
from rflow.storage import pool as make_pool

log = logging.getLogger(__name__)
T = TypeVar("T")


class Database(Service):
    """Owns the pool; :meth:`run` retries a unit of work while the database is away."""

    def __init__(self, settings: Settings, **kwargs) -> None:
        super().__init__(**kwargs)
        self._pool = make_pool(settings)

    async def on_start(self) -> None:
        await self._pool.open(wait=False)

    async def on_stop(self) -> None:
        await self._pool.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        async with self._pool.connection() as conn:
            yield conn

    async def run(self, work: Callable[[psycopg.AsyncConnection], Awaitable[T]], *, what: str) -> T:
        """Run ``work`` on a pooled connection, retrying with backoff while Postgres is down.

        Work given here must be idempotent: a retry after a lost answer runs it again.
        """
        delay = 0.1
        while True:
            try:
                async with self._pool.connection() as conn:
                    return await work(conn)
            except (Unavailable, psycopg.OperationalError) as exc:
                if self._pool.closed:  # the worker is stopping: nothing to wait for
                    raise Unavailable(f"the database pool is closed (during {what})") from exc
                log.warning(
                    "postgres unavailable during %s, retrying in %.1fs: %s", what, delay, exc
                )
            except TimeoutError as exc:
                log.warning(
                    "no postgres connection for %s, retrying in %.1fs: %s", what, delay, exc
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
