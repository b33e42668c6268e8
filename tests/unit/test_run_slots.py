"""max_concurrent_runs: runs holding a slot while they execute, actions of one run sharing it."""

from __future__ import annotations

import asyncio

from rflow.agents.slots import RunSlots


async def test_a_third_run_waits_for_a_slot_and_a_runs_own_actions_share_one():
    slots = RunSlots(2)
    release = asyncio.Event()
    inside: list[str] = []

    async def act(run_id: str) -> None:
        async with slots.hold(run_id):
            inside.append(run_id)
            await release.wait()

    tasks = [asyncio.create_task(act(r)) for r in ("a", "a", "b", "c")]
    while len(inside) < 3:
        await asyncio.sleep(0)
    for _ in range(10):
        await asyncio.sleep(0)
    assert sorted(inside) == ["a", "a", "b"]  # c waits: a and b hold the two slots
    assert slots.executing == 2
    release.set()
    await asyncio.gather(*tasks)
    assert sorted(inside) == ["a", "a", "b", "c"]
    assert slots.executing == 0 and slots.users == {} and slots.granted == {}


async def test_a_cancelled_wait_gives_nothing_back_it_did_not_take():
    slots = RunSlots(1)
    async with slots.hold("a"):
        waiting = asyncio.create_task(slots.hold("b").__aenter__())
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
    async with slots.hold("c"):
        assert slots.executing == 1
