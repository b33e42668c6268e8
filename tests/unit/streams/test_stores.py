"""Faust's table stores as the tables read and write them, one partition at a time: the
real RocksDB store (rocksdict, on disk under a temporary directory) and the memory store.
No broker: what the changelog would hold is written straight to the store."""

from __future__ import annotations

import time
from pathlib import Path

import faust
import pytest
from faust.types import TP

from rflow.codecs.tables import CODEC_NAME, register
from rflow.settings import Settings
from rflow.streams import kafka
from rflow.streams.consumption import (
    FRESH_KEY,
    MemoryTableStore,
    RocksTableStore,
    table_store,
    writing_to,
)
from rflow.streams.tables import Staged

register()


def faust_table(tmp_path: Path, store: str) -> faust.Table:
    app = faust.App(
        f"stores-{store[:6]}",
        **kafka.faust_options(Settings()),  # never connects: no broker is needed here
        store=f"{store}://",
        datadir=str(tmp_path),
    )
    table = app.Table(
        "gates",
        partitions=8,
        schema=faust.Schema(key_serializer=CODEC_NAME, value_serializer=CODEC_NAME),
        options={"block_cache_size": 1 << 20} if store == "rocksdb" else None,
    )
    table.key_serializer = table.value_serializer = CODEC_NAME
    return table


@pytest.mark.parametrize("kind", ["rocksdb", "memory"])
def test_a_partition_is_written_read_and_scanned_in_key_order(tmp_path, kind):
    store = table_store(faust_table(tmp_path, kind))
    assert isinstance(store, RocksTableStore if kind == "rocksdb" else MemoryTableStore)
    store.write(3, [("wf:b", {"n": 2}), ("wf:a", {"n": 1}), ("wf:c", {"n": 2**60})], 41)
    store.write(5, [("other:x", {"n": 9})], 7)
    assert store.get(3, "wf:c") == {"n": 2**60}
    assert store.get(None, "other:x") == {"n": 9}  # any partition held here
    assert store.partitions() == [3, 5]
    assert store.scan(3, None, 2) == [("wf:a", {"n": 1}), ("wf:b", {"n": 2})]
    assert store.scan(3, "wf:b", 10) == [("wf:c", {"n": 2**60})]
    store.write(3, [("wf:a", None)], 42)  # a deletion
    assert store.get(3, "wf:a") is None
    assert [key for key, _ in store.scan(3, None, 10)] == ["wf:b", "wf:c"]


def test_rocksdb_keeps_the_offset_reached_for_faust_to_read_the_changelog_from(tmp_path):
    table = faust_table(tmp_path, "rocksdb")
    store = table_store(table)
    store.write(2, [("wf:a", {"n": 1})], 99)
    assert table.data.persisted_offset(TP("changelog", 2)) == 99
    store.write(2, [("wf:b", {"n": 1})], None)  # unknown: the offset stays
    assert table.data.persisted_offset(TP("changelog", 2)) == 99
    # Faust's own keys never show as table entries.
    assert [key for key, _ in store.scan(2, None, 10)] == ["wf:a", "wf:b"]


def test_a_partition_not_known_current_for_too_long_is_read_again_from_the_start(tmp_path):
    table = faust_table(tmp_path, "rocksdb")
    store = table_store(table)
    store.fresh(3600.0)
    store.write(1, [("wf:a", {"n": 1})], 10)
    store.write(4, [("wf:b", {"n": 1})], 20)
    # Partition 4 was last known current two hours ago (its owner went away then).
    store.store._db_for_partition(4).put(FRESH_KEY, repr(time.time() - 7200).encode())
    assert table.data.persisted_offset(TP("changelog", 1)) == 10
    assert table.data.persisted_offset(TP("changelog", 4)) is None
    assert store.get(4, "wf:b") is None  # emptied: recovered whole from the changelog
    assert store.get(1, "wf:a") == {"n": 1}
    # A copy that was never stamped (written by another version, or a standby) is not
    # trusted either.
    store.store._db_for_partition(1).delete(FRESH_KEY)
    assert table.data.persisted_offset(TP("changelog", 1)) is None


def test_the_memory_store_forgets_the_partitions_it_gave_up(tmp_path):
    table = faust_table(tmp_path, "memory")
    store = table_store(table)
    store.write(0, [("wf:a", {"n": 1})], None)
    store.write(6, [("wf:b", {"n": 1})], None)

    import asyncio

    asyncio.run(table.data.on_recovery_completed({TP("changelog", 6)}, set()))
    assert store.get(0, "wf:a") is None
    assert store.get(6, "wf:b") == {"n": 1}
    assert store.partitions() == [6]


def test_rocksdb_finds_the_entries_due_without_reading_the_others(tmp_path):
    store = table_store(faust_table(tmp_path, "rocksdb"))
    store.index_by(lambda key, value: value["at"] + 10.0)
    assert store.indexed
    store.write(0, [(f"wf:{i}", {"at": 100.0 + i}) for i in range(5)], 1)
    store.write(0, [("wf:late", {"at": 500.0})], 2)
    # Due at 112.5: the entries of 100, 101 and 102 (due 110, 111, 112), earliest first.
    assert [key for _, key in store.due(0, 112.5, 2)] == ["wf:0", "wf:1"]
    store.rewind(0)
    due = store.due(0, 112.5, 10)
    assert [key for _, key in due] == ["wf:0", "wf:1", "wf:2"]
    # The index is no entry of the table.
    assert [key for key, _ in store.scan(0, None, 10)] == [
        "wf:0", "wf:1", "wf:2", "wf:3", "wf:4", "wf:late",
    ]  # fmt: skip
    # Done with; one of them kept and looked at again later.
    store.reindex(0, [raw for raw, _ in due], [("wf:2", 200.0)])
    assert [key for _, key in store.due(0, 150.0, 10)] == ["wf:3", "wf:4"]
    store.rewind(0)
    assert [key for _, key in store.due(0, 600.0, 10)] == ["wf:3", "wf:4", "wf:2", "wf:late"]
    assert table_store(faust_table(tmp_path / "m", "memory")).indexed is False


def test_the_index_is_read_on_from_the_last_entry_taken(tmp_path):
    store = table_store(faust_table(tmp_path, "rocksdb"))
    store.index_by(lambda key, value: value["at"])
    store.write(0, [("wf:a", {"at": 10.0}), ("wf:b", {"at": 20.0})], 1)
    first = store.due(0, 15.0, 10)
    store.reindex(0, [raw for raw, _ in first], ())
    store.write(0, [("wf:c", {"at": 30.0})], 2)
    assert [key for _, key in store.due(0, 40.0, 10)] == ["wf:b", "wf:c"]
    store.rewind(0)
    assert [key for _, key in store.due(0, 40.0, 10)] == ["wf:b", "wf:c"]


def test_every_database_of_a_worker_shares_one_memory_budget(tmp_path):
    from rflow.streams.consumption import ROCKSDB_MEMTABLES, SharedBudgetOptions, _Budget

    gates = table_store(faust_table(tmp_path, "rocksdb"))
    assert isinstance(gates.store.rocksdb_options, SharedBudgetOptions)
    before = _Budget.get(gates.rocksdict).buffers.get_usage()
    for partition in (0, 1, 2):
        gates.write(partition, [(f"wf:{partition}:{i}", {"n": i}) for i in range(2000)], 1)
    budget = _Budget.get(gates.rocksdict)
    assert budget.buffers.get_buffer_size() == ROCKSDB_MEMTABLES
    assert budget.buffers.get_usage() > before  # the three databases' memtables count there


def test_a_key_that_names_another_partition_is_found_there_while_deciding_one(tmp_path):
    # A table on disk keeps a database per partition: a decision on partition 5 that asks
    # for partition 3's held firings must look in partition 3's database.
    table = faust_table(tmp_path, "rocksdb")
    store = table_store(table)
    store.write(3, [("~held:wf:3", {"held": ["wf:a"]})], 1)
    store.write(5, [("wf:b", {"n": 1})], 1)
    staged = Staged(table, store=store)
    with writing_to(5):
        assert staged.get("wf:b") == {"n": 1}
        assert staged.get("~held:wf:3") is None  # not partition 5's
        assert staged.get_in(3, "~held:wf:3") == {"held": ["wf:a"]}
    assert staged.get("~held:wf:3") == {"held": ["wf:a"]}  # outside a decision: any


class TransactionalProducer:
    """A transactional producer whose transaction the broker aborts (or commits)."""

    def __init__(self, fenced: bool) -> None:
        self.fenced = fenced
        self.offset = 10

    async def begin_transaction(self) -> None:
        pass

    async def send(self, topic, value, key=None, partition=None):
        import asyncio
        from types import SimpleNamespace

        self.offset += 1
        future = asyncio.get_running_loop().create_future()
        future.set_result(SimpleNamespace(partition=partition, offset=self.offset))
        return future

    async def commit_transaction(self) -> None:
        if self.fenced:
            from aiokafka.errors import ProducerFenced

            raise ProducerFenced()


@pytest.mark.parametrize("fenced", [True, False])
async def test_rocksdb_never_holds_a_value_or_offset_of_an_aborted_transaction(tmp_path, fenced):
    from rflow.streams import consumption
    from rflow.streams.consumption import Checkpoint, Fence, writing_to
    from rflow.streams.tables import Staged

    table = faust_table(tmp_path, "rocksdb")
    store = table_store(table)
    store.write(2, [("wf:a", {"n": 0})], 10)
    staged = Staged(table, store=store)
    with writing_to(2):
        staged["wf:a"] = {"n": 1}
        staged["wf:b"] = {"n": 2}
    fence = Fence(lambda transactional_id: None, "app")
    fence.producers = {2: TransactionalProducer(fenced)}
    checkpoint = Checkpoint(None, fence)
    token = consumption._CHECKPOINT.set(checkpoint)
    try:
        await staged.flush()()  # the records reach the broker, in the transaction
    finally:
        consumption._CHECKPOINT.reset(token)
    assert store.get(2, "wf:a") == {"n": 0}  # nothing on disk before the commit
    if fenced:
        from aiokafka.errors import ProducerFenced

        with pytest.raises(ProducerFenced):
            await checkpoint.commit()
        # Aborted: the database keeps the value and the offset it had (a restart on this
        # host reads the changelog from offset 11, where a read_committed reader skips
        # the aborted records).
        assert store.get(2, "wf:a") == {"n": 0} and store.get(2, "wf:b") is None
        assert table.data.persisted_offset(TP("changelog", 2)) == 10
    else:
        await checkpoint.commit()
        checkpoint.done()
        assert store.get(2, "wf:a") == {"n": 1} and store.get(2, "wf:b") == {"n": 2}
        assert table.data.persisted_offset(TP("changelog", 2)) == 12
