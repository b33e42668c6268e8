"""Tables changed in memory between checkpoints (no broker: a dict stands in for the
Faust table, recording which partition each changelog write goes to)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rflow.codecs.tables import read_run_entry, write_run_entry
from rflow.engine.state import RunState
from rflow.streams.consumption import current_partition, writing_to
from rflow.streams.tables import Staged


class Table(dict):
    """What a checkpoint writes: key, encoded value and the changelog partition."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[tuple] = []

    def __setitem__(self, key, value) -> None:
        self.writes.append((key, value, current_partition()))
        super().__setitem__(key, value)

    def __delitem__(self, key) -> None:
        self.writes.append((key, None, current_partition()))
        super().__delitem__(key)


def test_only_the_newest_value_of_a_key_is_written_once_to_its_partition():
    table = Table()
    staged = Staged(table)
    with writing_to(3):
        staged["run"] = {"step": 1}
        staged["run"] = {"step": 2}
        staged["run"] = {"step": 3}
    with writing_to(5):
        staged["other"] = {"step": 1}
    assert staged["run"] == {"step": 3} and table == {}
    staged.flush()()
    assert table.writes == [("run", {"step": 3}, 3), ("other", {"step": 1}, 5)]


def test_reads_see_what_a_checkpoint_is_writing_until_it_is_written():
    table = Table({"gate": {"runs": ["a"]}})
    staged = Staged(table)
    with writing_to(1):
        staged["gate"] = {"runs": ["a", "b"]}
    write = staged.flush()  # taken; the journal is being sent before the tables
    assert staged.get("gate") == {"runs": ["a", "b"]}
    with writing_to(1):
        staged["gate"] = {"runs": ["a", "b", "c"]}  # decided meanwhile: the next checkpoint's
    write()
    assert table["gate"] == {"runs": ["a", "b"]}
    assert staged["gate"] == {"runs": ["a", "b", "c"]}
    staged.flush()()
    assert table["gate"] == {"runs": ["a", "b", "c"]}


def test_a_deleted_key_reads_as_missing_and_is_deleted_by_the_checkpoint():
    table = Table({"lane": {"active": "r1"}})
    staged = Staged(table)
    with writing_to(2):
        del staged["lane"]
        del staged["never-there"]
    assert staged.get("lane") is None and "lane" not in staged
    with pytest.raises(KeyError):
        staged["lane"]
    assert dict(staged.items()) == {}
    staged.flush()()
    assert table == {} and table.writes == [("lane", None, 2)]


def test_a_change_outside_a_decision_is_refused():
    staged = Staged(Table())
    with pytest.raises(RuntimeError, match="while a partition is being decided"):
        staged["key"] = 1


def test_runs_are_kept_as_states_and_written_as_their_entries():
    table = Table()
    runs = Staged(table, encode=write_run_entry, decode=read_run_entry)
    at = datetime(2026, 12, 2, tzinfo=UTC)
    state = RunState(
        run_id="r1", workflow="w", version="v1", trigger_key="k", created_at=at, updated_at=at
    )
    with writing_to(0):
        runs["r1"] = state
        runs["r2"] = "succeeded"
    assert runs["r1"] is state  # no encoding between checkpoints
    runs.flush()()
    assert read_run_entry(table["r1"]) == state
    assert read_run_entry(table["r2"]) == "succeeded"
    assert Staged(table, decode=read_run_entry)["r1"] == state
    assert dict(runs.items()) == {"r1": state, "r2": "succeeded"}
