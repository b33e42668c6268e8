"""How the relayer reads its endpoints (rflow/relayer/node.py): finding the transaction
that took a nonce, and what several endpoints' answers to a broadcast mean together."""

from __future__ import annotations

from typing import Any

import pytest

from rflow.failures import FailureKind, RflowError
from rflow.ingress.rpc import RpcError, RpcUnavailable
from rflow.relayer.node import Broadcast, _taker_on, combined

ME = "0x" + "11" * 20
OTHER = "0x" + "22" * 20


class Chain:
    """A chain of ``head + 1`` blocks: ``mined[n]`` are block n's transactions, each
    ``(from, nonce, hash)``; blocks below ``oldest`` are pruned (a node without archive)."""

    def __init__(self, head: int, mined: dict[int, list[tuple[str, int, str]]], oldest: int = 0):
        self.head = head
        self.mined = mined
        self.oldest = oldest
        self.requests = 0

    def count(self, address: str, block: int) -> int:
        return sum(
            1
            for number, txs in self.mined.items()
            if number <= block
            for sender, _, _ in txs
            if sender == address
        )

    async def call(self, method: str, *params: Any) -> Any:
        self.requests += 1
        return self._answer(method, *params)

    def _answer(self, method: str, *params: Any) -> Any:
        if method == "eth_blockNumber":
            return hex(self.head)
        if method == "eth_getTransactionCount":
            block = int(params[1], 16)
            if block < self.oldest:
                raise RpcError(method, -32000, "missing trie node")
            return hex(self.count(params[0], block))
        if method == "eth_getBlockByNumber":
            number = int(params[0], 16)
            txs = [
                {"from": sender, "nonce": hex(nonce), "hash": tx_hash}
                for sender, nonce, tx_hash in self.mined.get(number, [])
            ]
            return {"number": hex(number), "hash": f"0xblock{number}", "transactions": txs}
        raise AssertionError(method)

    async def answers(self, calls):
        self.requests += 1
        found = []
        for method, params in calls:
            try:
                found.append(self._answer(method, *params))
            except RpcError as exc:
                found.append(exc)
        return found

    async def batch(self, calls):
        self.requests += 1
        return [self._answer(m, *p) for m, p in calls]


def mined_at(spots: dict[int, int]) -> dict[int, list[tuple[str, int, str]]]:
    """My transactions: nonce -> block."""
    mined: dict[int, list[tuple[str, int, str]]] = {}
    for nonce, block in spots.items():
        mined.setdefault(block, []).append((ME, nonce, f"0xtx{nonce}"))
        mined.setdefault(block, []).append((OTHER, nonce, f"0xother{nonce}"))
    return mined


@pytest.mark.parametrize(
    ("head", "spots", "nonce", "block"),
    [
        (10, {0: 3, 1: 10}, 1, 10),  # in the head block
        (10, {0: 3, 1: 9}, 0, 3),
        (5000, {0: 7, 1: 7, 2: 4321, 3: 4999}, 2, 4321),  # halved, then read whole
        (2_000_000, {0: 1, 1: 12}, 1, 12),  # far back: doubling steps
    ],
)
async def test_the_transaction_that_took_a_nonce_is_found_from_nonce_counts(
    head, spots, nonce, block
):
    chain = Chain(head, mined_at(spots))
    found = await _taker_on(chain, ME, nonce)
    assert found == (f"0xtx{nonce}", block, f"0xblock{block}", head - block + 1)
    assert chain.requests <= 4 + head.bit_length(), "a few requests, not one per block"


async def test_a_nonce_the_endpoint_does_not_show_used_has_no_taker():
    chain = Chain(10, mined_at({0: 3}))
    assert await _taker_on(chain, ME, 1) is None


async def test_an_endpoint_that_pruned_the_block_cannot_tell():
    chain = Chain(5000, mined_at({0: 10, 1: 4990}), oldest=4900)
    assert await _taker_on(chain, ME, 0) is None
    assert await _taker_on(chain, ME, 1) == ("0xtx1", 4990, "0xblock4990", 11)


async def test_a_block_that_does_not_hold_the_transaction_its_counts_promise_proves_nothing():
    chain = Chain(10, mined_at({0: 3}))
    chain.mined[3] = [(OTHER, 0, "0xother0")]  # an inconsistent node
    chain.count = lambda address, block: 1 if block >= 3 else 0  # type: ignore[method-assign]
    assert await _taker_on(chain, ME, 0) is None


def test_broadcast_answers_of_several_endpoints_combined():
    refused = RflowError(FailureKind.INSUFFICIENT_FUNDS, "no funds")
    lost = RpcUnavailable("timed out")
    assert combined([refused, Broadcast.ACCEPTED, lost]) is Broadcast.ACCEPTED
    assert combined([Broadcast.NOT_NOW, Broadcast.KNOWN]) is Broadcast.KNOWN
    assert combined([refused, Broadcast.NONCE_TOO_LOW, lost]) is Broadcast.NONCE_TOO_LOW
    # An answer lost: it may be out, whatever the others refused.
    assert combined([refused, lost, Broadcast.NOT_NOW]) is lost
    assert combined([refused, Broadcast.NOT_NOW]) is Broadcast.NOT_NOW
    assert combined([refused, refused]) is refused
