"""Chain events end to end: anvil logs become trigger records on Kafka, reorg-aware.

Tests that reorg, or need a chain no one else mines on, run a private anvil; the rest
use the stack's shared one with contracts of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from rflow.codecs import TriggerRecord, TriggerRetracted, decode
from rflow.engine.keys import run_id
from rflow.ingress.chain import ChainFollower
from rflow.ingress.chain_service import ChainIngress, ChainIngressService
from rflow.ingress.chain_state import PostgresChainStore
from rflow.ingress.logs import decode_log, find_events
from rflow.lang import load_project
from rflow.settings import Settings
from rflow.storage import chain as chain_store
from rflow.storage import runs
from rflow.streams import kafka
from rflow.streams.database import Database
from rflow.streams.producer import Producer
from rflow.streams.topics import Catalog
from tests.integration import chain
from tests.integration.harness import wait_until

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")


def write_project(
    folder: Path, emitter: str | None, *, confirmations: int = 0, group: bool = False
) -> Path:
    """A project on network ``local`` whose workflow ``on-swap`` fires on Emitter.Swap."""
    address = f"    address: {{ local: '{emitter}' }}\n" if emitter else ""
    concurrency = '    concurrency: { group: "${{ trigger.args.sender }}" }\n' if group else ""
    path = folder / "project.yaml"
    path.write_text(
        "networks:\n"
        f"  local: {{ chain_id: 31337, confirmations: {confirmations} }}\n"
        "contracts:\n"
        "  Emitter:\n"
        f"{address}"
        f"    abi: {chain.artifact_path('Emitter')}\n"
        "workflows:\n"
        "  on-swap:\n"
        f"{concurrency}"
        "    trigger:\n"
        "      event: { contract: Emitter, name: Swap, network: local }\n"
        "    steps:\n"
        "      - id: note\n"
        "        command: { name: log, args: { message: swapped } }\n"
    )
    return path


class TriggerLog:
    """Everything on this test's triggers topic, decoded, from the beginning."""

    def __init__(self, settings: Settings) -> None:
        self.topic = settings.topic_prefix + "rflow.triggers"
        partitions = Catalog.from_settings(settings).spec("rflow.triggers").partitions
        self.partitions = [TopicPartition(self.topic, p) for p in range(partitions)]
        self.consumer = kafka.consumer(settings, enable_auto_commit=False, group_id=None)
        self.records: list[TriggerRecord | TriggerRetracted] = []

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.assign(self.partitions)
        await self.consumer.seek_to_beginning(*self.partitions)

    async def stop(self) -> None:
        await self.consumer.stop()

    async def _read(self) -> None:
        batches = await self.consumer.getmany(timeout_ms=100)
        for messages in batches.values():
            self.records.extend(decode(m.value) for m in messages)

    async def wait_for(self, count: int, timeout: float = 30.0) -> list[Any]:
        """The records once there are ``count`` (fails on more)."""

        async def enough() -> bool:
            await self._read()
            return len(self.records) >= count

        await wait_until(enough, timeout=timeout, what=f"{count} trigger records")
        assert len(self.records) == count, self.records
        return list(self.records)

    async def caught_up(self) -> list[Any]:
        """The records, once everything produced so far has been read."""
        ends = await self.consumer.end_offsets(self.partitions)

        async def done() -> bool:
            await self._read()
            positions = [await self.consumer.position(tp) for tp in self.partitions]
            return all(p >= ends[tp] for p, tp in zip(positions, self.partitions, strict=True))

        await wait_until(done, timeout=30, what="the triggers topic to be read")
        return list(self.records)


@pytest.fixture
async def database(settings: Settings) -> AsyncIterator[Database]:
    db = Database(settings)
    await db.start()
    yield db
    await db.stop()


@pytest.fixture
async def producer(settings: Settings) -> AsyncIterator[Producer]:
    async with Producer(settings) as producer:
        yield producer


@pytest.fixture
async def triggers(settings: Settings) -> AsyncIterator[TriggerLog]:
    log = TriggerLog(settings)
    await log.start()
    yield log
    await log.stop()


@asynccontextmanager
async def following(
    settings: Settings, path: Path, producer: Producer, database: Database, **options: Any
) -> AsyncIterator[ChainFollower]:
    """A follower of ``local`` running in this process, resumed before it is yielded."""
    settings = settings.model_copy(update={"project_path": path})
    store = PostgresChainStore(database)
    follower = ChainFollower(settings, load_project(path, {}), producer, store, "local", **options)
    task = asyncio.create_task(follower.run())

    async def resumed() -> bool:
        if task.done():
            task.result()
            raise AssertionError("the follower stopped")
        return follower.tracker is not None

    try:
        await wait_until(resumed, timeout=30, what="the follower to resume")
        yield follower
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def reached(follower: ChainFollower, level: int, number: int) -> None:
    """Wait until ``follower`` has emitted block ``number`` at ``level`` confirmations."""

    async def done() -> bool:
        cursor = follower.cursor(level)
        return cursor is not None and cursor >= number

    await wait_until(done, timeout=30, what=f"the follower to pass block {number}")


async def stored(database: Database, level: int, number: int) -> None:
    """Wait until the stored cursor of ``level`` has passed block ``number``."""

    async def done() -> bool:
        state = await database.run(partial(chain_store.load, network="local"), what="cursor")
        return state.cursors.get(level, -1) >= number

    await wait_until(done, timeout=30, what=f"the stored cursor to pass block {number}")


async def swap(w3, emitter: str, account, amount_in: int, amount_out: int = 1) -> dict:
    return await chain.transact(
        w3, "Emitter", emitter, "swap", amount_in, amount_out, account=account
    )


def block_of(receipt: dict) -> int:
    return int(receipt["blockNumber"], 16)


def key_of(receipt: dict) -> str:
    (entry,) = receipt["logs"]
    return f"event:31337:{receipt['blockHash']}:{int(entry['logIndex'], 16)}"


async def deployed(w3) -> tuple[Any, str, int]:
    """A fresh funded account, an Emitter it deployed, and the first block after that."""
    account = await chain.funded_account(w3)
    emitter, receipt = await chain.deploy(w3, "Emitter", account=account)
    return account, emitter, block_of(receipt) + 1


# --- on the shared anvil ----------------------------------------------------------


async def test_a_swap_on_anvil_fires_one_trigger_record(
    settings, tmp_path, w3, producer, database, triggers
):
    account, emitter, start = await deployed(w3)
    path = write_project(tmp_path, emitter, group=True)
    async with following(settings, path, producer, database, start_block=start) as follower:
        receipt = await swap(w3, emitter, account, 5, 2**100)
        (record,) = await triggers.wait_for(1)
        assert follower.mode == "websocket"

        assert isinstance(record, TriggerRecord)
        assert record.workflow == "on-swap" and record.source == "event"
        assert record.trigger_key == key_of(receipt)
        assert record.group == account.address
        payload = record.payload
        assert payload["args"]["sender"] == account.address
        assert payload["args"]["amountIn"] == 5
        assert int(payload["args"]["amountOut"]) == 2**100  # a decimal string on the wire
        assert payload["address"] == emitter and payload["contract"] == "Emitter"
        assert payload["block"]["number"] == block_of(receipt)
        assert payload["block"]["hash"] == receipt["blockHash"]
        assert payload["tx"] == {"hash": receipt["transactionHash"], "index": 0}

        # Later blocks fire nothing more, and the cursor is stored.
        await chain.mine(w3, 2)
        await reached(follower, 0, block_of(receipt) + 2)
        assert len(await triggers.caught_up()) == 1
        state = await database.run(partial(chain_store.load, network="local"), what="state")
        genesis = await chain.rpc(w3, "eth_getBlockByNumber", "0x0", False)
        assert state.origins == {(31337, genesis["hash"])}
        assert state.cursors[0] >= block_of(receipt) + 2
        emitted = await database.run(
            partial(chain_store.emitted_from, network="local", block_hashes=[receipt["blockHash"]]),
            what="emissions",
        )
        assert [e.trigger_key for e in emitted] == [record.trigger_key]


async def test_a_restarted_follower_fires_what_it_missed_once(
    settings, tmp_path, w3, producer, database, triggers
):
    account, emitter, start = await deployed(w3)
    # One concurrency group (one sender): every firing on one partition, where the order
    # they are read in is the order the follower produced them.
    path = write_project(tmp_path, emitter, group=True)
    async with following(settings, path, producer, database, start_block=start):
        first = await swap(w3, emitter, account, 1)
        await triggers.wait_for(1)
        # Stopping between producing and storing the cursor would repeat the firing
        # (deduplicated downstream by its key); this test wants the clean case.
        await stored(database, 0, block_of(first))
    # Stopped: these are mined while no one follows the chain.
    missed = [await swap(w3, emitter, account, 2), await swap(w3, emitter, account, 3)]
    await chain.mine(w3, 3)
    async with following(settings, path, producer, database) as follower:
        records = await triggers.wait_for(3)
        await chain.mine(w3, 1)
        await reached(follower, 0, block_of(missed[-1]) + 1)
        assert len(await triggers.caught_up()) == 3
    assert [r.trigger_key for r in records] == [key_of(r) for r in (first, *missed)]
    assert [r.payload["args"]["amountIn"] for r in records] == [1, 2, 3]


async def test_heads_are_polled_when_the_websocket_fails(
    settings, tmp_path, w3, producer, database, triggers
):
    account, emitter, start = await deployed(w3)
    path = write_project(tmp_path, emitter)
    closed = f"ws://127.0.0.1:{chain.free_port()}"
    async with following(
        settings, path, producer, database, start_block=start, ws_url=closed
    ) as follower:
        await wait_until(
            partial(_true_if, lambda: follower.mode == "polling"), timeout=15, what="polling"
        )
        receipt = await swap(w3, emitter, account, 9)
        (record,) = await triggers.wait_for(1)
        assert record.trigger_key == key_of(receipt)


async def _true_if(check) -> bool:
    return bool(check())


async def test_one_worker_follows_a_network_and_another_takes_over(
    settings, tmp_path, w3, producer, database
):
    _, emitter, start = await deployed(w3)
    path = write_project(tmp_path, emitter)
    project = load_project(path, {})
    local = settings.model_copy(update={"project_path": path})
    options = {"lock_retry": 0.1, "lock_check": 0.2, "follower_options": {"start_block": start}}
    store = PostgresChainStore(database)
    ingresses = [ChainIngress(local, project, producer, store, **options) for _ in range(2)]
    tasks = [asyncio.create_task(i.run()) for i in ingresses]
    try:

        async def one_follows() -> ChainIngress | None:
            holders = [i for i in ingresses if "local" in i.followers]
            assert len(holders) <= 1, "two followers of one network"
            return holders[0] if holders else None

        holder = await wait_until(one_follows, timeout=30, what="a follower")
        for _ in range(10):  # the other keeps trying, and keeps failing
            await one_follows()
            await asyncio.sleep(0.05)
        other = ingresses[1 - ingresses.index(holder)]
        tasks[ingresses.index(holder)].cancel()  # the worker goes away, and its session

        async def taken_over() -> bool:
            return "local" in other.followers

        await wait_until(taken_over, timeout=30, what="the other worker to take over")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_an_anvil_contract_event_triggers_a_run_end_to_end(
    settings, tmp_path, w3, producer, database, worker_factory
):
    account, emitter, start = await deployed(w3)
    path = write_project(tmp_path, emitter)
    local = settings.model_copy(update={"project_path": path})
    ingress = ChainIngress(
        local,
        load_project(path, {}),
        producer,
        PostgresChainStore(database),
        follower_options={"start_block": start},
    )
    task = asyncio.create_task(ingress.run())
    try:

        async def following_local() -> bool:
            follower = ingress.followers.get("local")
            return follower is not None and follower.tracker is not None

        await wait_until(following_local, timeout=30, what="the chain follower")
        worker = worker_factory(project_path=path)
        await worker.wait_ready()
        receipt = await swap(w3, emitter, account, 42)

        async def recorded() -> Any:
            # The worker's table is keyed by workflow and trigger key.
            status, body = await worker.get(f"/rflow/triggers/on-swap:{key_of(receipt)}/")
            return body if status == 200 else None

        body = await wait_until(recorded, timeout=60, what="the trigger in the worker's table")
        # ... and it started a run, which the read model shows settled, with the event.
        rid = run_id("on-swap", key_of(receipt))
        assert body["runs"] == [rid]

        async def settled() -> Any:
            run = await database.run(partial(runs.get_run, run_id=rid), what="the run")
            return run if run and run["settled_at"] is not None else None

        run = await wait_until(settled, timeout=60, what="the run to settle")
        assert run["status"] == "succeeded", run
        assert (run["workflow"], run["trigger_key"]) == ("on-swap", key_of(receipt))
        assert run["trigger"]["args"]["amountIn"] == 42
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_service_follows_for_the_apps_project(settings, tmp_path, w3, database, triggers):
    account, emitter, _ = await deployed(w3)
    path = write_project(tmp_path, emitter)
    local = settings.model_copy(update={"project_path": path})
    # What the service reads of a Faust app: ``app.rflow`` (the Runtime).
    runtime = SimpleNamespace(
        settings=local, project=load_project(path, {}), database=database, env={}
    )
    service = ChainIngressService(SimpleNamespace(rflow=runtime))
    await service.start()
    try:

        async def following_local() -> bool:
            follower = service.ingress and service.ingress.followers.get("local")
            return bool(follower and follower.tracker is not None)

        await wait_until(following_local, timeout=30, what="the service to follow local")
        receipt = await swap(w3, emitter, account, 11)
        (record,) = await triggers.wait_for(1)
        assert record.trigger_key == key_of(receipt)
    finally:
        await service.stop()
    assert service.ingress is not None and service.ingress.followers == {}


async def test_a_running_ingress_follows_what_the_current_deployment_listens_to(
    settings, tmp_path, w3, producer, database, triggers
):
    account, emitter, _ = await deployed(w3)
    listening = load_project(write_project(tmp_path, emitter), {})
    quiet = listening.model_copy(update={"workflows": {}})  # the same network, no trigger
    current = {"project": quiet}
    ingress = ChainIngress(
        settings,
        lambda: current["project"],
        producer,
        PostgresChainStore(database),
        refresh=0.1,
        lock_retry=0.1,
        lock_check=0.2,
    )
    task = asyncio.create_task(ingress.run())
    try:
        assert ingress.networks == []

        async def following_local() -> bool:
            follower = ingress.followers.get("local")
            return follower is not None and follower.tracker is not None

        current["project"] = listening  # a deploy adds the event-triggered workflow
        await wait_until(following_local, timeout=30, what="the ingress to follow local")
        receipt = await swap(w3, emitter, account, 5)
        (record,) = await triggers.wait_for(1)
        assert (record.workflow, record.trigger_key) == ("on-swap", key_of(receipt))

        current["project"] = quiet  # and a later one removes it

        async def let_go() -> bool:
            return ingress.followers == {}

        await wait_until(let_go, timeout=30, what="the ingress to stop following local")
        await swap(w3, emitter, account, 6)
        assert len(await triggers.caught_up()) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_test_token_mints_transfers_and_logs_transfers(w3):
    account = await chain.funded_account(w3)
    token, _ = await chain.deploy(w3, "TestToken", "Test USD", "TUSD", account=account)
    contract = w3.eth.contract(address=token, abi=chain.artifact("TestToken")["abi"])
    assert await contract.functions.decimals().call() == 18
    assert await contract.functions.symbol().call() == "TUSD"

    recipient = await chain.funded_account(w3)
    await chain.transact(w3, "TestToken", token, "mint", account.address, 10**21, account=recipient)
    receipt = await chain.transact(
        w3, "TestToken", token, "transfer", recipient.address, 3 * 10**18, account=account
    )
    assert await contract.functions.balanceOf(recipient.address).call() == 3 * 10**18
    assert await contract.functions.totalSupply().call() == 10**21

    (transfer,) = find_events(chain.artifact("TestToken")["abi"], "Transfer")
    (entry,) = receipt["logs"]
    assert decode_log(transfer, entry) == {
        "from": account.address,
        "to": recipient.address,
        "value": 3 * 10**18,
    }
    before = int((await chain.head(w3))["number"], 16)
    await chain.mine(w3, 3)
    await chain.evm_mine(w3)
    assert int((await chain.head(w3))["number"], 16) >= before + 4


# --- on a private anvil -------------------------------------------------------------


@asynccontextmanager
async def private_chain(settings: Settings, port: int | None = None, args: tuple = ()):
    """A private anvil; the settings pointing ``local`` at it, and a web3 on it."""
    async with chain.private_anvil(port=port, args=args) as url:
        w3 = chain.connect(url)
        try:
            yield settings.model_copy(update={"rpc_urls": {"local": url}}), w3
        finally:
            await w3.provider.disconnect()


@pytest.mark.ordering
async def test_a_reorg_before_confirmation_never_fires(
    settings, tmp_path, producer, database, triggers
):
    async with private_chain(settings) as (local, w3):
        account, emitter, start = await deployed(w3)
        path = write_project(tmp_path, emitter, confirmations=2)
        async with following(local, path, producer, database, start_block=start) as follower:
            receipt = await swap(w3, emitter, account, 1)
            number = block_of(receipt)

            async def seen() -> bool:
                block = follower.tracker and follower.tracker.block(number)
                return bool(block and block.hash == receipt["blockHash"])

            await wait_until(seen, timeout=30, what="the follower to see the swap's block")
            await chain.reorg(w3, 1)  # the swap's block is replaced by an empty one
            assert (await chain.head(w3))["hash"] != receipt["blockHash"]
            await chain.mine(w3, 3)
            await reached(follower, 2, number + 1)
            assert await triggers.caught_up() == []

            # Still following: a swap on the new chain fires once confirmed.
            later = await swap(w3, emitter, account, 2)
            await chain.mine(w3, 2)
            (record,) = await triggers.wait_for(1)
            assert record.trigger_key == key_of(later)


@pytest.mark.ordering
async def test_a_reorg_after_emission_retracts_and_refires_on_the_new_block(
    settings, tmp_path, producer, database, triggers
):
    async with private_chain(settings) as (local, w3):
        account, emitter, start = await deployed(w3)
        path = write_project(tmp_path, emitter, confirmations=0, group=True)
        async with following(local, path, producer, database, start_block=start):
            data = chain.calldata(w3, "Emitter", emitter, "swap", 7, 8)
            raw = await chain.signed(w3, account, {"to": emitter, "data": data})
            tx_hash = await chain.rpc(w3, "eth_sendRawTransaction", "0x" + raw.hex())
            receipt = await chain.wait_receipt(w3, tx_hash)
            (fired,) = await triggers.wait_for(1)
            assert fired.trigger_key == key_of(receipt)

            # The block is replaced by one holding the same transaction.
            await chain.reorg(w3, 1, [(raw, 0)])
            moved = await chain.wait_receipt(w3, tx_hash)
            assert moved["blockHash"] != receipt["blockHash"]
            fired, retracted, refired = await triggers.wait_for(3)

            async def marked() -> bool:
                # The follower stores the batch (the replaced block's emissions marked
                # retracted) after producing its records: await that, then stop it.
                left = await database.run(
                    partial(
                        chain_store.emitted_from,
                        network="local",
                        block_hashes=[receipt["blockHash"]],
                    ),
                    what="emissions",
                )
                return left == []

            await wait_until(marked, timeout=30, what="the emission marked retracted")

        assert isinstance(retracted, TriggerRetracted)
        assert (retracted.workflow, retracted.trigger_key, retracted.group) == (
            "on-swap",
            fired.trigger_key,
            account.address,
        )
        assert receipt["blockHash"] in retracted.reason
        assert isinstance(refired, TriggerRecord)
        assert refired.trigger_key == key_of(moved)
        assert refired.payload["args"]["amountIn"] == 7


async def test_a_follower_far_behind_catches_up_in_batches(
    settings, tmp_path, producer, database, triggers
):
    async with private_chain(settings) as (local, w3):
        account, emitter, start = await deployed(w3)
        first = await swap(w3, emitter, account, 1)
        await chain.mine(w3, 450)
        last = await swap(w3, emitter, account, 2)
        path = write_project(tmp_path, emitter, confirmations=3, group=True)  # one partition
        async with following(
            local, path, producer, database, start_block=start, batch_size=64
        ) as follower:
            await chain.mine(w3, 3)
            records = await triggers.wait_for(2)
            await reached(follower, 3, block_of(last))
            assert len(follower.tracker.blocks) <= follower.tracker.window + 1
        assert [r.trigger_key for r in records] == [key_of(first), key_of(last)]


async def test_the_follower_waits_for_its_node_and_misses_nothing(
    settings, tmp_path, producer, database, triggers, caplog
):
    port = chain.free_port()
    local = settings.model_copy(update={"rpc_urls": {"local": f"http://127.0.0.1:{port}"}})
    path = write_project(tmp_path, None)  # no address: any emitter on the network
    local = local.model_copy(update={"project_path": path})
    store = PostgresChainStore(database)
    follower = ChainFollower(local, load_project(path, {}), producer, store, "local", start_block=1)
    with caplog.at_level(logging.WARNING, logger="rflow.ingress.chain"):
        task = asyncio.create_task(follower.run())
        try:

            async def failing() -> bool:
                return "following local failed" in caplog.text

            await wait_until(failing, timeout=15, what="the follower to meet the dead node")
            async with private_chain(settings, port=port) as (_, w3):
                account, emitter, _ = await deployed(w3)
                receipt = await swap(w3, emitter, account, 3)
                (record,) = await triggers.wait_for(1, timeout=60)
                assert record.trigger_key == key_of(receipt)
                assert record.payload["address"] == emitter
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_chain_started_over_is_followed_afresh(
    settings, tmp_path, producer, database, triggers, caplog
):
    caplog.set_level(logging.WARNING, logger="rflow.ingress.chain")
    port = chain.free_port()
    path = write_project(tmp_path, None)
    async with contextlib.AsyncExitStack() as node:
        local, w3 = await node.enter_async_context(
            private_chain(settings, port=port, args=("--timestamp", "1700000000"))
        )
        async with following(local, path, producer, database, start_block=1) as follower:
            account, emitter, _ = await deployed(w3)
            await chain.mine(w3, 20)
            first = await swap(w3, emitter, account, 1)
            await triggers.wait_for(1)
            await stored(database, 0, block_of(first))

            # The node restarts without its state: a new genesis, and a lower head.
            await node.aclose()
            again = private_chain(settings, port=port, args=("--timestamp", "1800000000"))
            async with again as (_, w3):
                account, emitter, _ = await deployed(w3)
                receipt = await swap(w3, emitter, account, 2)
                records = await triggers.wait_for(2)
                assert records[1].trigger_key == key_of(receipt)
                assert follower.tracker is not None
                assert follower.tracker.tip.number < block_of(first)
    assert "belongs to another chain" in caplog.text
