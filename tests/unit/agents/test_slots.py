"""config.max_concurrent_runs: slots held by runs, and a new limit deployed while they run."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from rflow.agents.slots import RunSlots


async def holding(slots: RunSlots, run_id: str, release: asyncio.Event) -> None:
    async with slots.hold(run_id):
        await release.wait()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_larger_limit_lets_waiting_runs_in_at_once():
    slots = RunSlots(1)
    release = asyncio.Event()
    tasks = [asyncio.create_task(holding(slots, f"r{i}", release)) for i in range(3)]
    await settle()
    assert slots.executing == 1
    slots.resize(3)
    await settle()
    assert slots.executing == 3
    release.set()
    await asyncio.gather(*tasks)
    assert slots.executing == 0


async def test_a_smaller_limit_takes_effect_as_runs_give_their_slots_back():
    slots = RunSlots(3)
    releases = [asyncio.Event() for _ in range(4)]
    tasks = [asyncio.create_task(holding(slots, f"r{i}", releases[i])) for i in range(4)]
    await settle()
    assert slots.executing == 3  # r3 waits
    slots.resize(1)
    releases[0].set()
    await settle()
    assert slots.executing == 2  # the slot given back is kept: r3 still waits
    releases[1].set()
    await settle()
    assert slots.executing == 1
    releases[2].set()
    await settle()
    assert slots.executing == 1  # r3, alone, as the new limit says
    releases[3].set()
    await asyncio.gather(*tasks)
    assert slots.executing == 0
    # Back to a larger limit: owed slots are paid first, then new ones are made.
    slots.resize(2)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(slots.hold("a"))
        await stack.enter_async_context(slots.hold("b"))
        assert slots.executing == 2
