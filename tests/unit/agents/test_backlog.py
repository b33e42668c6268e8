"""The runner takes no record while too many of its actions are unfinished."""

from __future__ import annotations

import asyncio

import pytest

from rflow.agents.backlog import Backlog


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_room_waits_above_high_until_down_to_low():
    backlog = Backlog(high=4, low=2)
    gates = [asyncio.Event() for _ in range(4)]
    for gate in gates[:3]:
        backlog.start(gate.wait())
    await asyncio.wait_for(backlog.room(), 1)  # 3 unfinished: under high
    backlog.start(gates[3].wait())
    waiting = asyncio.create_task(backlog.room())
    await settle()
    assert not waiting.done()  # 4 unfinished: at high
    gates[0].set()
    await settle()
    assert len(backlog) == 3 and not waiting.done()  # 3 is not down to low yet
    gates[1].set()
    await settle()
    assert len(backlog) == 2 and waiting.done()
    backlog.start(asyncio.sleep(0))  # 3 again, under high: room at once
    await asyncio.wait_for(backlog.room(), 1)
    for gate in gates:
        gate.set()
    await settle()
    assert len(backlog) == 0


async def test_a_failed_or_cancelled_action_makes_room_too():
    backlog = Backlog(high=2, low=0)

    async def fails() -> None:
        raise RuntimeError("boom")

    failed = backlog.start(fails())
    hanging = backlog.start(asyncio.Event().wait())
    waiting = asyncio.create_task(backlog.room())
    await settle()
    assert failed.done() and not waiting.done()
    hanging.cancel()
    await settle()
    assert waiting.done() and len(backlog) == 0
    assert isinstance(failed.exception(), RuntimeError)


def test_low_must_be_below_high():
    with pytest.raises(ValueError, match="low"):
        Backlog(high=2, low=2)
