"""The chain as a backtest asks it: the block of a time, a node without archive state,
and every answer asked once (the nodes are scripted; the stack's anvil is in the
integration tests)."""

from __future__ import annotations

from datetime import UTC, datetime

from rflow.backtest.chain import Chain
from rflow.ingress.rpc import RpcError
from rflow.settings import Settings
from tests.unit.backtest.world import project

GENESIS = 1_700_000_000


class Scripted(Chain):
    """A chain whose node is a function; it keeps state only from ``pruned`` on."""

    def __init__(self, *, head: int = 100, pruned: int = 0, revert: str | None = None) -> None:
        super().__init__(Settings.from_env({}), [project("")], {})
        self.height, self.pruned, self.revert = head, pruned, revert
        self.asked: list[tuple[str, tuple]] = []

    async def _ask(self, network, method, *params):
        self.asked.append((method, params))
        if method == "eth_blockNumber":
            return hex(self.height)
        if method == "eth_getBlockByNumber":
            number = int(params[0], 16)
            return {"timestamp": hex(GENESIS + 12 * number), "baseFeePerGas": hex(7)}
        tag = params[-1]
        if tag != "latest" and int(tag, 16) < self.pruned:
            raise RpcError(method, -32000, f"missing trie node {tag} (path )")
        if method == "eth_call" and self.revert:
            raise RpcError(method, 3, "execution reverted", "0x08c379a0" + _reason(self.revert))
        return hex(21000) if method == "eth_estimateGas" else "0x"


def _reason(text: str) -> str:
    from eth_abi import encode

    return encode(["string"], [text]).hex()


async def test_the_block_of_a_time_is_the_last_one_mined_by_then():
    chain = Scripted(head=100)
    at = datetime.fromtimestamp(GENESIS + 12 * 37 + 5, UTC)
    assert await chain.block_at("local", at) == 37
    assert await chain.block_at("local", datetime.fromtimestamp(GENESIS - 1, UTC)) == 0
    assert await chain.block_at("local", datetime.fromtimestamp(GENESIS + 10**6, UTC)) == 100


async def test_a_node_without_the_state_of_the_block_is_asked_at_its_latest_and_says_so():
    chain = Scripted(pruned=50)
    call = {"to": "0x" + "11" * 20, "value": "0x1", "data": "0x"}
    found = await chain.simulate("local", 60, call, None)
    assert (found.gas_used, found.revert, found.source) == (21000, None, "simulated")
    old = await chain.simulate("local", 40, call, None)
    assert (old.gas_used, old.source) == (21000, "latest")
    assert [params[-1] for method, params in chain.asked if method == "eth_call"] == [
        "0x3c",
        "0x28",
        "latest",
    ]


async def test_a_revert_says_why_and_the_same_question_is_asked_once():
    chain = Scripted(revert="paused")
    call = {"to": "0x" + "11" * 20, "value": "0x0", "data": "0x"}
    first = await chain.simulate("local", 10, call, None)
    again = await chain.simulate("local", 10, call, None)
    assert first.revert == "paused" and again is first
    assert len([m for m, _ in chain.asked if m == "eth_call"]) == 1
    assert await chain.base_fee("local", 10) == 7
