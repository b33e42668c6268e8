"""Tables changed in memory between checkpoints (no broker: a dict stands in for the
Faust table's store, and a producer records each changelog record: its key, value and
partition, decoded with the table's codecs)."""

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
from rflow.streams.consumption import writing_to
from rflow.streams.tables import Staged

register()


class Producer:
    def __init__(self, table: Table) -> None:
        self.table = table

    async def send(self, topic, key, value, partition, timestamp, headers):
        assert topic == "changelog"
        decoded = value
        if value is not None and self.table.value_serializer == CODEC_NAME:
            decoded = json.loads(value)
        self.table.writes.append((json.loads(key), decoded, partition))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


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


async def test_only_the_newest_value_of_a_key_is_written_once_to_its_partition():
    table = Table()
    staged = Staged(table)
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
    staged = Staged(table)
    with writing_to(1):
        staged["gate"] = {"runs": ["a", "b"]}
    write = staged.flush()  # taken; the journal is being sent before the tables
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
    staged = Staged(table)
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
    staged = Staged(Table())
    with pytest.raises(RuntimeError, match="while a partition is being decided"):
        staged["key"] = 1


async def test_runs_are_kept_as_states_and_written_as_their_entries():
    table = Table(value_serializer=RAW_CODEC_NAME)
    runs = Staged(table, encode=write_run_entry, decode=read_run_entry)
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
    assert Staged(table, decode=read_run_entry)["r1"] == state
    assert dict(runs.items()) == {"r1": state, "r2": "succeeded"}


async def test_a_memo_decodes_a_stored_value_once_and_forgets_it_when_partitions_go():
    table = Table({"lane": {"active": "r1"}})
    decoded = []

    def decode(stored):
        decoded.append(stored)
        return ("lane", stored["active"])

    lanes = Staged(table, encode=lambda value: {"active": value[1]}, decode=decode, memo=True)
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
