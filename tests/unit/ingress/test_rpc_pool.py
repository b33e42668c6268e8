"""A network's endpoints as one client (rflow/ingress/pool.py): failover, breakers,
lagging endpoints, asking every endpoint, weights."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from rflow.ingress import pool as pools
from rflow.ingress.pool import EndpointUrl, RpcPool
from rflow.ingress.rpc import RpcError, RpcUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeRpc:
    """An endpoint's client: answers ``eth_blockNumber`` with ``head``, anything else
    with its own name; ``down`` fails every request, ``erring`` answers with an error."""

    def __init__(self, name: str, head: int = 100) -> None:
        self.name = name
        self.head = head
        self.down = False
        self.erring = False
        self.asked: Counter = Counter()

    async def call(self, method: str, *params: Any) -> Any:
        self.asked[method] += 1
        if self.down:
            raise RpcUnavailable(f"{self.name} is down")
        if self.erring:
            raise RpcError(method, -32000, "nonce too low")
        return hex(self.head) if method == "eth_blockNumber" else self.name

    async def batch(self, calls):
        return [await self.call(m, *p) for m, p in calls]

    async def answers(self, calls):
        self.asked["(batch)"] += 1
        if self.down:
            raise RpcUnavailable(f"{self.name} is down")
        found = []
        for method, params in calls:
            try:
                found.append(await self.call(method, *params))
            except RpcError as exc:
                found.append(exc)
        return found


def make(names: list[str], weights: list[int] | None = None, seed: int = 1, **options):
    clock = Clock()
    urls = [
        EndpointUrl(name, f"http://{name}.invalid", None, (weights or [1] * len(names))[i])
        for i, name in enumerate(names)
    ]
    pool = RpcPool("mainnet", urls, clock=clock, rng=random.Random(seed), **options)
    fakes = {}
    for endpoint in pool.endpoints:
        endpoint.rpc = fakes[endpoint.name] = FakeRpc(endpoint.name)
    return pool, fakes, clock


async def test_a_call_fails_over_and_the_breaker_opens_after_consecutive_failures():
    pool, fakes, clock = make(["a", "b"], weights=[1000, 1])
    assert await pool.call("eth_chainId") == "a"
    fakes["a"].down = True
    assert await pool.call("eth_chainId") == "b"
    assert pool.current.name == "b", "the endpoint that answered is read from next"
    for _ in range(pools.FAILURES - 1):
        pool.current = None  # a new pick: "a" outweighs "b"
        assert await pool.call("eth_chainId") == "b"
    a = pool.endpoints[0]
    assert a.breaker.state == "open"
    asked = fakes["a"].asked["eth_chainId"]
    pool.current = None
    assert await pool.call("eth_chainId") == "b"
    assert fakes["a"].asked["eth_chainId"] == asked, "an open breaker is not asked"
    clock.now += pools.COOL_DOWN
    assert a.breaker.state == "half_open"
    fakes["a"].down = False
    pool.current = None
    assert await pool.call("eth_chainId") == "a"
    assert a.breaker.state == "closed"


async def test_a_half_open_endpoint_that_fails_again_waits_twice_as_long():
    pool, fakes, clock = make(["a"])
    fakes["a"].down = True
    for _ in range(pools.FAILURES):
        with pytest.raises(RpcUnavailable):
            await pool.call("eth_chainId")
    breaker = pool.endpoints[0].breaker
    clock.now += pools.COOL_DOWN
    with pytest.raises(RpcUnavailable):  # tried (every other endpoint failed), fails again
        await pool.call("eth_chainId")
    assert breaker.state == "open"
    clock.now += pools.COOL_DOWN
    assert breaker.state == "open"
    clock.now += pools.COOL_DOWN
    assert breaker.state == "half_open"


async def test_an_answered_error_is_about_the_request_not_the_endpoint():
    pool, fakes, _ = make(["a", "b"], weights=[1000, 1])
    fakes["a"].erring = True
    for _ in range(pools.FAILURES + 2):
        with pytest.raises(RpcError, match="nonce too low"):
            await pool.call("eth_sendRawTransaction", "0x00")
    assert pool.endpoints[0].breaker.state == "closed"
    assert fakes["b"].asked["eth_sendRawTransaction"] == 0


async def test_an_endpoint_answering_reads_with_errors_is_failed_over_and_its_breaker_opens():
    pool, fakes, _ = make(["erring", "good"], weights=[1000, 1])
    fakes["erring"].erring = True
    for _ in range(pools.FAILURES):
        pool.current = None
        assert await pool.call("eth_getTransactionReceipt", "0x00") == "good"
    assert pool.endpoints[0].breaker.state == "open"
    fakes["good"].erring = True
    # When every endpoint answers with an error, the caller gets what the node said.
    with pytest.raises(RpcError, match="nonce too low"):
        await pool.call("eth_blockNumber")


async def test_when_every_endpoint_fails_the_error_names_each_by_name_never_by_url():
    pool, fakes, _ = make(["alchemy", "infura"])
    for fake in fakes.values():
        fake.down = True
    with pytest.raises(RpcUnavailable) as raised:
        await pool.call("eth_chainId")
    message = str(raised.value)
    assert "no endpoint of mainnet answered" in message
    assert "alchemy: alchemy is down" in message and "infura: infura is down" in message
    assert ".invalid" not in message and ".invalid" not in repr(pool.endpoints)


async def test_each_asks_every_endpoint_and_reports_those_that_did_not_answer():
    pool, fakes, _ = make(["a", "b", "c"])
    fakes["b"].down = True
    fakes["c"].erring = True
    found = dict(await pool.each([("eth_chainId", ())]))
    assert found["a"] == ["a"]
    assert isinstance(found["b"], RpcUnavailable)
    # An error to a plain read is the endpoint failing; to a transaction, an answer.
    assert isinstance(found["c"], RpcUnavailable)
    found = dict(await pool.each([("eth_sendRawTransaction", ("0x00",))]))
    assert isinstance(found["c"][0], RpcError) and found["a"] == ["a"]
    for fake in fakes.values():
        assert fake.asked["(batch)"] == 2


async def test_an_endpoint_far_behind_is_read_from_only_when_no_other_answers():
    pool, fakes, _ = make(["behind", "ahead"], weights=[1000, 1], max_lag=5)
    assert await pool.call("eth_chainId") == "behind"
    fakes["behind"].head = 80
    await pool.read_heads()
    assert pool.lag(pool.endpoints[0]) == 20 and pool.current is None
    assert await pool.call("eth_chainId") == "ahead"
    assert [e.name for e in pool.order()] == ["ahead", "behind"]
    fakes["ahead"].down = True
    assert await pool.call("eth_chainId") == "behind"
    fakes["behind"].head = 98  # caught up to within the tolerance
    fakes["ahead"].down = False
    await pool.read_heads()
    assert not pool.lagging(pool.endpoints[0])


async def test_the_current_endpoint_is_kept_and_a_new_one_is_picked_by_weight():
    picked = Counter()
    for seed in range(2000):
        pool, _, _ = make(["heavy", "light"], weights=[3, 1], seed=seed)
        picked[await pool.call("eth_chainId")] += 1
        assert [await pool.call("eth_chainId") for _ in range(5)] == [pool.current.name] * 5
    assert 0.70 < picked["heavy"] / 2000 < 0.80, picked
