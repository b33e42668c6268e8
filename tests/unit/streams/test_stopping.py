"""A stopping worker is quiet: work cut short by the stop logs no warning."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from rflow.settings import Settings
from rflow.storage import Unavailable
from rflow.streams import loops
from rflow.streams.database import Database


async def test_work_on_a_closed_pool_fails_at_once_and_quietly(caplog) -> None:
    database = Database(Settings(database_url="postgresql://nobody@127.0.0.1:1/none"))
    caplog.set_level(logging.WARNING)

    async def work(conn):  # never reached: the pool was never opened, or was closed
        raise AssertionError("no connection")

    with pytest.raises(Unavailable, match=r"pool is closed \(during due timers\)"):
        await asyncio.wait_for(database.run(work, what="due timers"), timeout=5)
    assert caplog.records == []


async def test_a_repeated_run_cut_short_by_the_stop_ends_the_loop_quietly(caplog) -> None:
    tasks = []
    app = SimpleNamespace(should_stop=False, task=tasks.append)
    caplog.set_level(logging.WARNING)
    runs = []

    @loops.every(app, 0, "due timers")
    async def scan() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("postgres away")  # while running: a warning, and on
        app.should_stop = True
        raise RuntimeError("the pool is closed")  # while stopping: the loop ends

    await asyncio.wait_for(tasks[0](), timeout=5)
    assert len(runs) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "due timers failed: RuntimeError('postgres away')"
    ]
