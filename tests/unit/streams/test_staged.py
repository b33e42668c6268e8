"""Tables changed in memory between checkpoints (no broker: a dict stands in for the
Faust table's store, and a producer records each changelog record: its key, value and
partition, decoded with the table's codecs, and gives it the next offset)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from rflow.codecs import json
from rflow.codecs.tables import (
    CODEC_NAME,
    RAW_CODEC_NAME,
    read_run_entry,
    register,
    write_run_entry,
)
from rflow.engine.state import RunState
from rflow.streams.consumption import TableStore, writing_to
from rflow.streams.tables import Staged

register()


class Producer:
    def __init__(self, table: Table) -> None:
        self.table = table
        self.offsets: dict[int, int] = {}
        self.held: asyncio.Future | None = None
        """While set, nothing is acknowledged until it is done."""

    async def send(self, topic, key, value, partition, timestamp, headers):
        assert topic == "changelog"
        decoded = value
        if value is not None and self.table.value_serializer == CODEC_NAME:
            decoded = json.loads(value)
        self.table.writes.append((json.loads(key), decoded, partition))
        offset = self.offsets[partition] = self.offsets.get(partition, -1) + 1
        metadata = SimpleNamespace(partition=partition, offset=offset)
        held = self.held

        async def acknowledged():
            if held is not None:
                await held
            return metadata

        return asyncio.ensure_future(acknowledged())


class DictStore(TableStore):
    """The table's dict as a store, with the offset each partition reached."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.reached: dict[int, int | None] = {}

    def get(self, partition, key):
        return self.table.get(key)

    def write(self, partition, changes, offset):
        for key, value in changes:
            if value is None:
                self.table.pop(key, None)
            else:
                self.table[key] = value
        self.reached[partition] = offset

    def scan(self, partition, after, limit):
        keys = sorted(k for k in self.table if after is None or k > after)[:limit]
        return [(k, self.table[k]) for k in keys]

    def partitions(self):
        return [0]


class Table(dict):
    """A table's store (itself), and every changelog record written: key, value as
    stored, partition."""

    def __init__(self, *args, value_serializer: str = CODEC_NAME, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[tuple] = []
        self.data = self
        self.key_serializer, self.value_serializer = CODEC_NAME, value_serializer
        self.app = SimpleNamespace(producer=Producer(self))
        self.changelog_topic = SimpleNamespace(get_topic_name=lambda: "changelog")
        self.store = DictStore(self)


def staged_table(table: Table, **options) -> Staged:
    return Staged(table, store=table.store, **options)


async def test_only_the_newest_value_of_a_key_is_written_once_to_its_partition():
    table = Table()
    staged = staged_table(table)
    with writing_to(3):
        staged["run"] = {"step": 1}
        staged["run"] = {"step": 2}
        staged["run"] = {"step": 3}
    with writing_to(5):
        staged["other"] = {"step": 1}
    assert staged["run"] == {"step": 3} and table == {}
    await staged.flush()()
    assert table.writes == [("run", {"step": 3}, 3), ("other", {"step": 1}, 5)]


async def test_reads_see_what_a_checkpoint_is_writing_until_it_is_written():
    table = Table({"gate": {"runs": ["a"]}})
    staged = staged_table(table)
    with writing_to(1):
        staged["gate"] = {"runs": ["a", "b"]}
    write = staged.flush()  # taken; the checkpoint is writing it
    assert staged.get("gate") == {"runs": ["a", "b"]}
    with writing_to(1):
        staged["gate"] = {"runs": ["a", "b", "c"]}  # decided meanwhile: the next checkpoint's
    await write()
    assert table["gate"] == {"runs": ["a", "b"]}
    assert staged["gate"] == {"runs": ["a", "b", "c"]}
    await staged.flush()()
    assert table["gate"] == {"runs": ["a", "b", "c"]}


async def test_a_deleted_key_reads_as_missing_and_is_deleted_by_the_checkpoint():
    table = Table({"lane": {"active": "r1"}})
    staged = staged_table(table)
    with writing_to(2):
        del staged["lane"]
        del staged["never-there"]
    assert staged.get("lane") is None and "lane" not in staged
    with pytest.raises(KeyError):
        staged["lane"]
    assert dict(staged.items()) == {}
    await staged.flush()()
    assert table == {} and table.writes == [("lane", None, 2)]


def test_a_change_outside_a_decision_is_refused():
    staged = staged_table(Table())
    with pytest.raises(RuntimeError, match="while a partition is being decided"):
        staged["key"] = 1


async def test_runs_are_kept_as_states_and_written_as_their_entries():
    table = Table(value_serializer=RAW_CODEC_NAME)
    runs = staged_table(table, encode=write_run_entry, decode=read_run_entry)
    at = datetime(2026, 12, 2, tzinfo=UTC)
    state = RunState(
        run_id="r1", workflow="w", version="v1", trigger_key="k", created_at=at, updated_at=at
    )
    with writing_to(0):
        runs["r1"] = state
        runs["r2"] = "succeeded"
    assert runs["r1"] is state  # no encoding between checkpoints
    await runs.flush()()
    assert read_run_entry(table["r1"]) == state
    assert read_run_entry(table["r2"]) == "succeeded"
    assert [(key, read_run_entry(value), at) for key, value, at in table.writes] == [
        ("r1", state, 0),
        ("r2", "succeeded", 0),
    ]
    assert staged_table(table, decode=read_run_entry)["r1"] == state
    assert dict(runs.items()) == {"r1": state, "r2": "succeeded"}


async def test_a_memo_decodes_a_stored_value_once_and_forgets_it_when_partitions_go():
    table = Table({"lane": {"active": "r1"}})
    decoded = []

    def decode(stored):
        decoded.append(stored)
        return ("lane", stored["active"])

    lanes = staged_table(table, encode=lambda value: {"active": value[1]}, decode=decode, memo=True)
    assert lanes["lane"] == lanes["lane"] == ("lane", "r1")
    assert len(decoded) == 1
    with writing_to(4):
        lanes["lane"] = ("lane", "r2")
    await lanes.flush()()
    assert table["lane"] == {"active": "r2"} and lanes["lane"] == ("lane", "r2")
    assert len(decoded) == 1  # what was written is kept as it was decided
    # Another owner changed the entry while the partition was elsewhere (its table was
    # recovered from the changelog): once forgotten, the store is read again.
    table.data["lane"] = {"active": "r9"}
    assert lanes["lane"] == ("lane", "r2")
    lanes.forget()
    assert lanes["lane"] == ("lane", "r9") and len(decoded) == 2
    with writing_to(4):
        del lanes["lane"]
    await lanes.flush()()
    assert lanes.get("lane") is None and "lane" not in table


async def test_the_store_follows_the_broker_with_the_offset_each_partition_reached():
    table = Table()
    runs = staged_table(table)
    with writing_to(1):
        runs["a"] = {"n": 1}
        runs["b"] = {"n": 2}
    with writing_to(6):
        runs["c"] = {"n": 3}
    table.app.producer.held = asyncio.get_running_loop().create_future()
    write = asyncio.ensure_future(runs.flush()())
    await asyncio.sleep(0.01)
    # Sent, not acknowledged: the store has nothing yet, a read sees the new values.
    assert len(table.writes) == 3 and table == {}
    assert runs["a"] == {"n": 1} and runs.pending("a")
    table.app.producer.held.set_result(None)
    await write
    assert table == {"a": {"n": 1}, "b": {"n": 2}, "c": {"n": 3}}
    assert table.store.reached == {1: 1, 6: 0}
    assert not runs.pending("a")


async def test_a_failed_write_leaves_the_store_as_it_was_and_the_values_readable():
    table = Table({"a": {"n": 0}})
    runs = staged_table(table)
    with writing_to(0):
        runs["a"] = {"n": 1}
    lost = asyncio.get_running_loop().create_future()
    lost.set_exception(ConnectionError("broker gone"))
    table.app.producer.held = lost
    with pytest.raises(ConnectionError):
        await runs.flush()()
    assert table["a"] == {"n": 0}  # the store never got ahead of its changelog
    assert runs["a"] == {"n": 1}


async def test_a_scan_reads_a_partition_in_key_order_with_the_newest_values():
    table = Table({"a": {"n": 1}, "b": {"n": 2}, "c": {"n": 3}})
    gates = staged_table(table)
    with writing_to(0):
        gates["b"] = {"n": 20}
        del gates["c"]
    assert gates.scan(0, None, 2) == [("a", {"n": 1}), ("b", {"n": 20})]
    assert gates.scan(0, "b", 2) == [("c", None)]


async def test_a_memo_remembers_a_missing_key_it_is_told_to_until_it_is_written():
    table = Table()
    reads = []
    store = table.store
    original = store.get
    store.get = lambda partition, key: reads.append(key) or original(partition, key)
    lanes = Staged(table, store=store, memo=True, memo_missing=lambda key: key.startswith("~"))
    assert lanes.get("~held:wf:1") is None and lanes.get("~held:wf:1") is None
    assert lanes.get("wf:group") is None and lanes.get("wf:group") is None
    assert reads == ["~held:wf:1", "wf:group", "wf:group"]  # only "~" misses are kept
    with writing_to(1):
        lanes["~held:wf:1"] = {"held": ["g"]}
    await lanes.flush()()
    assert lanes.get("~held:wf:1") == {"held": ["g"]}
    with writing_to(1):
        del lanes["~held:wf:1"]
    await lanes.flush()()
    # Read again only by the checkpoint that deleted it (was there anything to delete?).
    assert lanes.get("~held:wf:1") is None and reads.count("~held:wf:1") == 2
