"""The chain follower's I/O shell against an in-memory node, store and sink.

The node is a small JSON-RPC server on 127.0.0.1 with no websocket, so these followers
also exercise the polling fallback. Real anvil, Kafka and Postgres are exercised by
``tests/integration/test_chain_events.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from eth_abi import encode

from rflow.codecs import TriggerRecord, TriggerRetracted
from rflow.ingress.chain import ChainFollower
from rflow.ingress.chain_state import ChainState, Emission, StoredBlock
from rflow.ingress.logs import find_events
from rflow.lang import load_project
from rflow.settings import Settings
from rflow.storage import Unavailable
from rflow.streams.producer import ProduceError
from tests.unit.ingress.test_chain_listeners import EMITTER, EMITTER_ABI, SENDER, write_project

pytestmark = pytest.mark.ordering

SWAP = find_events(json.loads(EMITTER_ABI.read_text())["abi"], "Swap")[0]


def digest(*parts: object) -> str:
    return "0x" + hashlib.sha256(repr(parts).encode()).hexdigest()


@dataclass
class FakeNode:
    """A chain in memory, answering the JSON-RPC calls a follower makes."""

    chain_id: int = 31337
    blocks: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    batches: bool = True
    down: bool = False
    forks: int = 0
    port: int = 0

    def __post_init__(self) -> None:
        self.blocks.append(self._block(0, "0x" + "00" * 32))

    def _block(self, number: int, parent: str) -> dict[str, Any]:
        return {
            "number": hex(number),
            "hash": digest(number, parent, self.forks),
            "parentHash": parent,
            "timestamp": hex(1_700_000_000 + number),
        }

    def mine(self, *amounts: int, raw: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        """A new block holding one Swap log per amount (and ``raw`` logs)."""
        block = self._block(len(self.blocks), self.blocks[-1]["hash"])
        self.blocks.append(block)
        entries = [
            {
                "address": EMITTER.lower(),
                "topics": [SWAP.topic0, "0x" + encode(["address"], [SENDER]).hex()],
                "data": "0x" + encode(["uint256", "uint256"], [amount, 1]).hex(),
            }
            for amount in amounts
        ] + [{"address": EMITTER.lower(), **r} for r in raw]
        self.logs[block["hash"]] = [
            {
                **entry,
                "blockNumber": block["number"],
                "blockHash": block["hash"],
                "transactionHash": digest("tx", block["hash"], i),
                "transactionIndex": hex(i),
                "logIndex": hex(i),
                "removed": False,
            }
            for i, entry in enumerate(entries)
        ]
        return block

    def reorg(self, depth: int) -> None:
        """Replace the last ``depth`` blocks with empty ones (same height)."""
        self.forks += 1
        del self.blocks[-depth:]
        for _ in range(depth):
            self.mine()

    # --- JSON-RPC -------------------------------------------------------------------

    def answer(self, method: str, params: list[Any]) -> Any:
        by_hash = {b["hash"]: b for b in self.blocks}
        if method == "eth_chainId":
            return hex(self.chain_id)
        if method == "eth_blockNumber":
            return hex(len(self.blocks) - 1)
        if method == "eth_getBlockByNumber":
            number = len(self.blocks) - 1 if params[0] == "latest" else int(params[0], 16)
            return self.blocks[number] if number < len(self.blocks) else None
        if method == "eth_getBlockByHash":
            return by_hash.get(params[0])
        if method == "eth_getLogs":
            query = params[0]
            if "blockHash" in query:
                if query["blockHash"] not in by_hash:
                    raise LookupError("unknown block")
                hashes = [query["blockHash"]]
            else:
                lo, hi = int(query["fromBlock"], 16), int(query["toBlock"], 16)
                hashes = [b["hash"] for b in self.blocks[lo : hi + 1]]
            wanted = set(query["topics"][0])
            return [e for h in hashes for e in self.logs.get(h, []) if e["topics"][0] in wanted]
        raise LookupError(f"method {method} not found")

    def _one(self, call: dict[str, Any]) -> dict[str, Any]:
        try:
            return {
                "jsonrpc": "2.0",
                "id": call["id"],
                "result": self.answer(call["method"], call["params"]),
            }
        except LookupError as exc:
            return {
                "jsonrpc": "2.0",
                "id": call["id"],
                "error": {"code": -32000, "message": str(exc)},
            }

    async def handle(self, request: web.Request) -> web.Response:
        if self.down:
            return web.Response(status=503, text="down for maintenance")
        body = await request.json()
        if isinstance(body, list):
            if not self.batches:
                return web.json_response(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {"code": -32600, "message": "no batches"},
                    }
                )
            return web.json_response([self._one(c) for c in body])
        return web.json_response(self._one(body))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@asynccontextmanager
async def serving(node: FakeNode) -> AsyncIterator[FakeNode]:
    app = web.Application()
    app.router.add_post("/", node.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    node.port = runner.addresses[0][1]
    try:
        yield node
    finally:
        await runner.cleanup()


@dataclass
class MemoryStore:
    """The :class:`~rflow.ingress.chain_state.ChainStore` protocol in memory."""

    blocks: dict[int, StoredBlock] = field(default_factory=dict)
    cursors: dict[int, int] = field(default_factory=dict)
    origin: tuple[int, str] | None = None
    emissions: dict[tuple[str, str], Emission] = field(default_factory=dict)
    fail_saves: int = 0

    async def load(self, network: str) -> ChainState:
        return ChainState(
            frozenset({self.origin}) if self.origin else frozenset(),
            sorted(self.blocks.values(), key=lambda b: b.number),
            dict(self.cursors),
        )

    async def reset(self, network: str) -> None:
        self.blocks, self.cursors, self.origin, self.emissions = {}, {}, None, {}

    async def save(self, network, origin, *, blocks, tip, floor, cursors, retracted=()) -> None:
        if self.fail_saves:
            self.fail_saves -= 1
            raise Unavailable("the database went away")
        self.origin = origin
        for b in blocks:
            self.blocks[b.number] = b
        self.blocks = {n: b for n, b in self.blocks.items() if floor <= n <= tip}
        self.cursors.update(cursors)
        for key, e in self.emissions.items():
            if e.block_hash in retracted:
                self.emissions[key] = replace(e, retracted_at=datetime.now(UTC))

    async def record_emissions(self, network: str, emissions: Sequence[Emission]) -> None:
        for e in emissions:
            self.emissions[(e.workflow, e.trigger_key)] = e

    async def emitted_from(self, network: str, block_hashes: Sequence[str]) -> list[Emission]:
        return [
            e
            for e in self.emissions.values()
            if e.block_hash in block_hashes and e.retracted_at is None
        ]


@dataclass
class Sink:
    records: list[TriggerRecord | TriggerRetracted] = field(default_factory=list)
    failures: int = 0

    async def trigger(self, record: TriggerRecord | TriggerRetracted) -> tuple[int, int]:
        if self.failures:
            self.failures -= 1
            raise ProduceError("Kafka is away")
        self.records.append(record)
        return 0, len(self.records)


async def eventually(check, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@asynccontextmanager
async def following(
    node: FakeNode, store: MemoryStore, sink: Sink, tmp_path, confirmations: int = 0, **options: Any
) -> AsyncIterator[ChainFollower]:
    text = (
        write_project(tmp_path)
        .read_text()
        .replace("confirmations: 2", f"confirmations: {confirmations}")
    )
    (tmp_path / "project.yaml").write_text(text)
    settings = Settings(rpc_urls={"local": node.url}, project_path=tmp_path / "project.yaml")
    project = load_project(tmp_path / "project.yaml", {})
    options = {"poll_interval": 0.01, "idle": 0.05, **options}
    follower = ChainFollower(settings, project, sink, store, "local", **options)
    task = asyncio.create_task(follower.run())
    try:
        await eventually(lambda: follower.tracker is not None or task.done(), "the follower")
        if task.done():
            task.result()
        yield follower
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def amounts(sink: Sink) -> list[int]:
    return [r.payload["args"]["amountIn"] for r in sink.records if isinstance(r, TriggerRecord)]


@pytest.fixture
async def node() -> AsyncIterator[FakeNode]:
    async with serving(FakeNode()) as node:
        yield node


async def test_heads_are_polled_and_each_swap_fires_once(node, tmp_path):
    store, sink = MemoryStore(), Sink()
    async with following(node, store, sink, tmp_path, start_block=1) as follower:
        await eventually(lambda: follower.mode == "polling", "the websocket to be given up")
        block = node.mine(5, 6)
        await eventually(lambda: len(sink.records) == 2, "two firings")
        node.mine()
        await eventually(lambda: store.cursors.get(0) == 2, "the stored cursor")
    assert amounts(sink) == [5, 6]
    assert [r.trigger_key for r in sink.records] == [
        f"event:31337:{block['hash']}:0",
        f"event:31337:{block['hash']}:1",
    ]
    assert store.origin == (31337, node.blocks[0]["hash"])


async def test_a_reorg_retracts_what_the_replaced_block_emitted(node, tmp_path):
    store, sink = MemoryStore(), Sink()
    async with following(node, store, sink, tmp_path, start_block=1):
        block = node.mine(7)
        await eventually(lambda: len(sink.records) == 1, "the firing")
        node.reorg(1)
        await eventually(lambda: len(sink.records) == 2, "the retraction")
        await eventually(lambda: store.blocks[1].hash != block["hash"], "the new block stored")
    fired, retracted = sink.records
    assert isinstance(retracted, TriggerRetracted)
    assert (retracted.workflow, retracted.trigger_key) == (fired.workflow, fired.trigger_key)
    assert all(e.retracted_at for e in store.emissions.values())


async def test_confirmations_let_a_replaced_block_pass_unfired(node, tmp_path):
    store, sink = MemoryStore(), Sink()
    async with following(node, store, sink, tmp_path, confirmations=2, start_block=1) as follower:
        node.mine(1)
        await eventually(lambda: follower.tracker.tip.number == 1, "the block to be seen")
        node.reorg(1)
        node.mine()
        node.mine(2)
        node.mine()
        node.mine()
        # The stored cursor moves once the block's firings are produced (the tracker's
        # moves before): waiting on it leaves no firing in flight.
        await eventually(lambda: store.cursors.get(2) == 3, "three confirmed blocks stored")
    assert amounts(sink) == [2]


async def test_a_node_without_batches_is_asked_call_by_call(node, tmp_path):
    node.batches = False
    store, sink = MemoryStore(), Sink()
    for amount in range(1, 6):
        node.mine(amount)
    async with following(node, store, sink, tmp_path, start_block=1, batch_size=2):
        await eventually(lambda: len(sink.records) == 5, "five firings")
    assert amounts(sink) == [1, 2, 3, 4, 5]


async def test_a_node_that_is_down_is_waited_for_and_nothing_is_skipped(node, tmp_path, caplog):
    node.mine(1)
    node.down = True
    store, sink = MemoryStore(), Sink()

    async def bring_back() -> None:
        await eventually(lambda: "following local failed" in caplog.text, "a failed attempt")
        node.mine(2)
        node.down = False

    back = asyncio.create_task(bring_back())
    async with following(node, store, sink, tmp_path, start_block=1):
        await back
        await eventually(lambda: len(sink.records) == 2, "both firings")
    assert amounts(sink) == [1, 2]


async def test_kafka_refusing_a_firing_repeats_it_and_skips_nothing(node, tmp_path):
    store, sink = MemoryStore(), Sink(failures=2)
    node.mine(1)
    node.mine(2)
    async with following(node, store, sink, tmp_path, start_block=1):
        await eventually(lambda: len(sink.records) == 2, "both firings")
        node.mine(3)
        await eventually(lambda: len(sink.records) == 3, "the next firing")
    assert amounts(sink) == [1, 2, 3]


async def test_a_lost_save_repeats_firings_under_the_same_keys(node, tmp_path):
    store, sink = MemoryStore(fail_saves=0), Sink()
    async with following(node, store, sink, tmp_path, start_block=1) as follower:
        store.fail_saves = 1  # the save after producing the firing fails once
        node.mine(4)
        await eventually(lambda: store.cursors.get(0) == 1, "the stored cursor")
        assert follower.cursor(0) == 1
    keys = [r.trigger_key for r in sink.records]
    assert len(keys) == 2 and len(set(keys)) == 1  # repeated, deduplicated downstream by key


async def test_a_malformed_log_is_skipped_and_the_rest_still_fire(node, tmp_path, caplog):
    store, sink = MemoryStore(), Sink()
    bad = {"topics": [SWAP.topic0, "0x" + encode(["address"], [SENDER]).hex()], "data": "0x12"}
    async with following(node, store, sink, tmp_path, start_block=1):
        node.mine(8, raw=[bad])
        node.mine(9)
        await eventually(lambda: len(sink.records) == 2, "the good firings")
        await eventually(lambda: store.cursors.get(0) == 2, "the stored cursor")
    assert amounts(sink) == [8, 9]
    assert "cannot decode Swap" in caplog.text


async def test_a_restart_resumes_from_the_store(node, tmp_path):
    store, sink = MemoryStore(), Sink()
    async with following(node, store, sink, tmp_path, start_block=1):
        node.mine(1)
        await eventually(lambda: store.cursors.get(0) == 1, "the stored cursor")
    node.mine(2)
    node.mine(3)
    # start_block is ignored now: the stored cursor says where to go on.
    async with following(node, store, sink, tmp_path, start_block=1):
        await eventually(lambda: store.cursors.get(0) == 3, "the stored cursor")
    assert amounts(sink) == [1, 2, 3]


async def test_a_first_start_begins_at_the_head(node, tmp_path):
    node.mine(1)
    store, sink = MemoryStore(), Sink()
    async with following(node, store, sink, tmp_path) as follower:
        node.mine(2)
        await eventually(lambda: store.cursors.get(0) == 2, "the new block stored")
    assert follower.cursor(0) == 2
    assert amounts(sink) == [2]
