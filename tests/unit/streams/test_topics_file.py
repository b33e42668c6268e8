"""topics.yaml: what it declares and how mistakes in it are reported."""

from __future__ import annotations

import pytest

from rflow.streams.topics import Catalog, TopicsError, load
from tests.conftest import REPO


def test_the_shipped_file_declares_the_pipeline():
    specs = {spec.name: spec for spec in load(REPO / "topics.yaml")}
    assert {"rflow.triggers", "rflow.runs", "rflow.sends", "rflow.events", "rflow.dlq"} <= set(
        specs
    )
    # Joined by key: the triggers, runs and state topics must be co-partitioned.
    assert specs["rflow.triggers"].partitions == specs["rflow.runs"].partitions
    for name, spec in specs.items():
        if name.startswith("rflow.state."):
            assert spec.configs["cleanup.policy"] == "compact"
            assert spec.partitions == specs["rflow.triggers"].partitions


def test_a_topic_is_taken_as_the_workers_name_it_or_as_declared():
    catalog = Catalog(tuple(load(REPO / "topics.yaml")), "newcomer.")
    assert catalog.declared("newcomer.rflow.triggers") == "rflow.triggers"
    assert catalog.declared("rflow.triggers") == "rflow.triggers"
    with pytest.raises(TopicsError) as refused:
        catalog.declared("other.rflow.triggers")
    assert str(refused.value).startswith(
        "topic 'other.rflow.triggers' is not one of the workers' topics under "
        "RFLOW_TOPIC_PREFIX='newcomer.' (topics.yaml declares: newcomer.rflow.triggers, "
    )
    assert Catalog(catalog.specs).declared("rflow.dlq") == "rflow.dlq"


def test_prefix_applies_to_every_name():
    catalog = Catalog(tuple(load(REPO / "topics.yaml")), "t1.")
    assert catalog.full_name("rflow.runs") == "t1.rflow.runs"
    with pytest.raises(TopicsError, match=r"topic 'rflow\.nope' is not declared in topics\.yaml"):
        catalog.full_name("rflow.nope")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topics: {}", "expected a mapping with a 'topics' list"),
        ("topics:\n  - partitions: 1", "topics[0]: each topic needs a 'name'"),
        (
            "topics:\n  - name: a\n    partitions: 0",
            "topics[0] (a): 'partitions' must be a positive integer",
        ),
        (
            "topics:\n  - name: a\n    partitions: 1\n    partition: 2",
            "topics[0] (a): unknown field(s) partition",
        ),
        (
            "topics:\n  - {name: a, partitions: 1}\n  - {name: a, partitions: 1}",
            "a topic is declared twice",
        ),
        ("topics: [", "while parsing"),
    ],
)
def test_mistakes_are_reported(tmp_path, text, message):
    path = tmp_path / "topics.yaml"
    path.write_text(text)
    with pytest.raises(TopicsError) as err:
        load(path)
    assert message in str(err.value)
