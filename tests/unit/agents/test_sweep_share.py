"""A sweep is upkeep: between two chunks it waits long enough to take at most
``expiry.SHARE`` of the worker's loop, whatever it reads; a sweep of what is due that
outlasts the interval between two sweeps waits no more (it keeps up with what comes due)."""

from __future__ import annotations

import time
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


def sweeper(consumption: Consumption, paced_for: float = 0.0) -> expiry.Sweeper:
    made = object.__new__(expiry.Sweeper)  # only what the chunks use
    made.consumption = consumption  # type: ignore[assignment]
    made.paced_until = time.monotonic() + paced_for
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


TOOK = [0.004, 0.002, 0.003]  # each chunk's work


def chunks(now: list[float]) -> Any:
    def chunk(after: Any) -> tuple[Any, int]:
        n = 0 if after is None else after + 1
        now[0] += TOOK[n]
        return (None if n == len(TOOK) - 1 else n), 7

    return chunk


@pytest.mark.parametrize("paced, paced_for", [(True, 0.0), (False, 3600.0)])
async def test_after_each_chunk_a_sweep_waits_so_as_to_take_its_share_of_the_loop(
    clock, paced, paced_for
):
    now, waited = clock
    consumption = Consumption()
    kept = await sweeper(consumption, paced_for)._chunks(3, chunks(now), paced)
    assert kept == 21 and consumption.decided == 3
    share = [work / (work + wait) for work, wait in zip(TOOK, waited, strict=True)]
    assert share == pytest.approx([expiry.SHARE] * 3)


async def test_a_sweep_of_what_is_due_past_its_interval_waits_no_more(clock):
    now, waited = clock
    assert await sweeper(Consumption(), paced_for=0.0)._chunks(3, chunks(now)) == 21
    assert waited == [0, 0, 0]  # each a turn of the loop, no longer


async def test_a_partition_given_up_ends_its_sweep_without_waiting(clock):
    _, waited = clock

    def chunk(after: Any) -> tuple[Any, int]:
        raise AssertionError("nothing is read of a partition given up")

    assert await sweeper(Consumption(owned=False))._chunks(3, chunk) is None
    assert waited == []


class Store:
    indexed = True


class Tables:
    """The swept tables, indexed; and the partitions stamped as swept."""

    def __init__(self) -> None:
        for name in expiry.SWEPT:
            setattr(self, name, type("Table", (), {"store": Store()})())
        self.stamped: list[int] = []

    def stamp(self, partition: int, now: float) -> None:
        self.stamped.append(partition)


async def test_only_the_daily_full_sweep_is_always_paced(monkeypatch):
    """The first full sweep after an opening indexes what was recovered: it is paced as a
    sweep of what is due is (until the interval is over), so that it keeps up however
    often partitions move; the daily one is upkeep, always paced."""
    made = sweeper(Consumption())
    made.consumption.owned = lambda: {1, 2}  # type: ignore[attr-defined]
    made.tables = Tables()  # type: ignore[assignment]
    made.full = {2: time.monotonic() - expiry.FULL_SWEEP}  # 2 was swept in full a day ago
    made.counts = {}
    made.runtime = type("Runtime", (), {"metrics": None})()  # type: ignore[assignment]
    made.interval = lambda: 60.0  # type: ignore[method-assign]
    full: dict[int, bool] = {}

    async def sweep_full(partition: int, paced: bool) -> bool:
        full[partition] = paced
        return True

    made._sweep_full = sweep_full  # type: ignore[method-assign]
    await made.sweep()
    assert full == {1: False, 2: True}
    assert made.tables.stamped == [1, 2] and set(made.full) == {1, 2}  # type: ignore[attr-defined]
