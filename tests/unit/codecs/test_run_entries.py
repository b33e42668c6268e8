"""The runs table's entries (a run's state as JSON bytes) and the settled table's (a
settled run's marker)."""

from __future__ import annotations

from datetime import UTC, datetime

from faust.serializers import codecs as faust_codecs

from rflow.codecs import json
from rflow.codecs.tables import (
    RAW_CODEC_NAME,
    read_run_entry,
    read_settled_entry,
    register,
    run_entry,
    write_run_entry,
    write_settled_entry,
)
from rflow.engine.memory import Settled
from rflow.engine.state import RunState

WHEN = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)


def state(**trigger) -> RunState:
    return RunState(
        run_id="r1",
        workflow="w",
        version="v1",
        trigger_key="k",
        trigger=trigger,
        created_at=WHEN,
        updated_at=WHEN,
    )


def test_a_runs_state_round_trips_exactly_through_its_entry():
    run = state(amount=2**255, note="a\x00b", nested=[{"x": -(2**70)}])
    entry = run_entry(run)
    assert isinstance(entry, bytes)
    assert b'"status"' not in entry  # defaults are left out
    assert read_run_entry(entry) == run


def test_a_settled_runs_marker_round_trips_and_an_old_one_has_no_time():
    marker = Settled("succeeded", 1764000000.125, "order-paid")
    assert write_settled_entry(marker) == {
        "settled": "succeeded",
        "at": 1764000000.125,
        "workflow": "order-paid",
    }
    assert read_settled_entry(write_settled_entry(marker)) == marker
    assert read_settled_entry({"settled": "failed"}) == Settled("failed", None, None)


def test_a_settled_runs_status_kept_in_the_runs_table_and_entries_another_codec_decoded():
    # Before the settled table, a settled run's status stayed in the runs table.
    assert read_run_entry(write_run_entry("succeeded")) == "succeeded"
    assert read_run_entry(None) is None
    # Entries written before the runs table kept bytes come back as the old codec's dicts.
    assert read_run_entry({"settled": "failed"}) == "failed"
    run = state(n=1)
    assert read_run_entry(json.loads(json.dumps(json.loads(run_entry(run))))) == run


def test_the_table_codec_writes_the_bytes_as_they_are_and_reads_bytes_back():
    register()
    codec = faust_codecs.codecs[RAW_CODEC_NAME]
    entry = run_entry(state(n=1))
    assert codec.dumps(entry) == entry
    assert codec.loads(entry) == entry
    assert codec.loads(codec.dumps({"settled": "failed"})) == write_run_entry("failed")
