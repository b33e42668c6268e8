"""A sweep is upkeep: between two chunks it waits long enough to take at most
``expiry.SHARE`` of the worker's loop, whatever it reads."""

from __future__ import annotations

from typing import Any

import pytest

from rflow.agents import expiry


class Consumption:
    """Decides each chunk at once, as a partition this worker owns (or gave up)."""

    def __init__(self, owned: bool = True) -> None:
        self.owned = owned
        self.decided = 0

    async def decide(self, number: int, work: Any) -> bool:
        if not self.owned:
            return False
        self.decided += 1
        await work()
        return True


def sweeper(consumption: Consumption) -> expiry.Sweeper:
    made = object.__new__(expiry.Sweeper)  # only what the chunks use
    made.consumption = consumption  # type: ignore[assignment]
    return made


@pytest.fixture
def clock(monkeypatch):
    """The sweep's clock, moved on by the chunks; and what the sweep waited."""
    now = [100.0]
    waited: list[float] = []

    async def sleep(delay: float) -> None:
        waited.append(delay)

    monkeypatch.setattr(expiry.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(expiry.asyncio, "sleep", sleep)
    return now, waited


async def test_after_each_chunk_a_sweep_waits_so_as_to_take_its_share_of_the_loop(clock):
    now, waited = clock
    took = [0.004, 0.002, 0.003]  # each chunk's work

    def chunk(after: Any) -> tuple[Any, int]:
        n = 0 if after is None else after + 1
        now[0] += took[n]
        return (None if n == len(took) - 1 else n), 7

    consumption = Consumption()
    kept = await sweeper(consumption)._chunks(3, chunk)
    assert kept == 21 and consumption.decided == 3
    share = [work / (work + wait) for work, wait in zip(took, waited, strict=True)]
    assert share == pytest.approx([expiry.SHARE] * 3)


async def test_a_partition_given_up_ends_its_sweep_without_waiting(clock):
    _, waited = clock

    def chunk(after: Any) -> tuple[Any, int]:
        raise AssertionError("nothing is read of a partition given up")

    assert await sweeper(Consumption(owned=False))._chunks(3, chunk) is None
    assert waited == []
