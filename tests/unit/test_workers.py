"""Who owns what: names, client ids, what a worker reports and who owns a partition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rflow import workers


def test_a_worker_is_named_by_host_and_port_in_rflow_and_in_kafka():
    assert workers.worker_name("ops-1", 6066) == "ops-1:6066"
    assert workers.client_id("ops-1", 6066) == "rflow-ops-1-6066"
    assert workers.client_id("host with spaces/x", 7) == "rflow-host_with_spaces_x-7"


def test_a_report_keeps_rflows_topics_and_only_table_standbys():
    actives = [
        ("p.rflow.runs", 3),
        ("p.rflow.runs", 1),
        ("p.rflow.state.runs", 1),
        ("app-__assignor-__leader", 0),
    ]
    standbys = [("p.rflow.runs", 2), ("p.rflow.state.runs", 2), ("q.rflow.state.runs", 0)]
    assert workers.assignment(actives, standbys, "p.") == {
        "actives": {"p.rflow.runs": [1, 3], "p.rflow.state.runs": [1]},
        "standbys": {"p.rflow.state.runs": [2]},
    }


def test_partitions_read_as_spans():
    assert workers.spans([]) == "-"
    assert workers.spans([0, 1, 2, 3]) == "0-3"
    assert workers.spans([0, 2, 4, 5, 6, 9]) == "0,2,4-6,9"


def test_a_run_is_keyed_by_its_group_else_its_trigger_key_and_hashed_with_murmur2():
    assert workers.run_key({"group_key": "acct-1", "trigger_key": "k"}) == "acct-1"
    assert workers.run_key({"group_key": None, "trigger_key": "k"}) == "k"
    from aiokafka.partitioner import DefaultPartitioner

    every = list(range(8))
    for key in ("acct-42", "acct-7", "k"):
        assert workers.partition_of(key, 8) == DefaultPartitioner()(key.encode(), every, every)
    assert {workers.partition_of(f"acct-{i}", 8) for i in range(100)} == set(range(8))


@dataclass
class Row:
    worker: str
    seen_ago: float
    actives: dict[str, list[int]]
    app_id: str = "rflow"
    assignment: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.assignment = {"actives": self.actives, "standbys": {}}


def test_the_owner_is_the_freshest_live_report_of_the_group():
    rows = [
        Row("a:1", 2.0, {"rflow.runs": [0, 1]}),
        Row("b:2", 1.0, {"rflow.runs": [2, 3]}),
        Row("old:3", 600.0, {"rflow.runs": [4]}),  # gone: not seen for ten minutes
        Row("c:4", 0.5, {"rflow.runs": [1]}, app_id="other"),
    ]
    assert workers.owner(rows, "rflow", "rflow.runs", 1).worker == "a:1"
    assert workers.owner(rows, "rflow", "rflow.runs", 3).worker == "b:2"
    assert workers.owner(rows, "rflow", "rflow.runs", 4) is None
    assert workers.owner(rows, "other", "rflow.runs", 1).worker == "c:4"
    # Two reports claim a partition across a rebalance: the newest is believed.
    rows.append(Row("d:5", 0.1, {"rflow.runs": [2]}))
    assert workers.owner(rows, "rflow", "rflow.runs", 2).worker == "d:5"
