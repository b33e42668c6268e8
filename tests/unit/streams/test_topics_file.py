"""topics.yaml: what it declares and how mistakes in it are reported."""

from __future__ import annotations

import pytest

from rflow.settings import Settings, SettingsError
from rflow.streams.topics import Catalog, TopicsError, load, replicated
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


def test_a_cluster_replicates_every_topic_and_acknowledges_with_all_but_one_copy(tmp_path):
    settings = Settings.from_env({"RFLOW_TOPIC_REPLICATION_FACTOR": "3"})
    catalog = Catalog.from_settings(settings)
    for spec in catalog:
        assert spec.replication_factor == 3, spec.name
        assert spec.configs["min.insync.replicas"] == "2", spec.name
    # What topics.yaml configures beside it is kept.
    assert catalog.spec("rflow.state.runs").configs["cleanup.policy"] == "compact"


def test_one_copy_sets_no_min_insync_and_the_setting_overrides_the_default():
    [single] = replicated(load(REPO / "topics.yaml")[:1])
    assert single.replication_factor == 1 and "min.insync.replicas" not in single.configs
    [three] = replicated(load(REPO / "topics.yaml")[:1], 3, 3)
    assert three.configs["min.insync.replicas"] == "3"


def test_min_insync_above_the_replication_factor_is_refused_where_it_is_set(tmp_path):
    path = tmp_path / "topics.yaml"
    path.write_text(
        "replication_factor: 3\n"
        "topics:\n  - name: a\n    partitions: 1\n    configs: {min.insync.replicas: '4'}\n"
    )
    with pytest.raises(TopicsError) as refused:
        replicated(load(path))
    assert str(refused.value) == (
        "topic a: min.insync.replicas=4 is more than its replication factor 3, so no write "
        "could ever be acknowledged (RFLOW_TOPIC_MIN_INSYNC_REPLICAS, or the topic's configs "
        "in topics.yaml)"
    )
    with pytest.raises(TopicsError, match=r"min\.insync\.replicas=3 is more than its replication"):
        Catalog.from_settings(
            Settings.from_env(
                {
                    "RFLOW_TOPICS_FILE": str(path),
                    "RFLOW_TOPIC_MIN_INSYNC_REPLICAS": "3",
                    "RFLOW_TOPIC_REPLICATION_FACTOR": "2",
                }
            )
        )


def test_a_replication_factor_below_one_is_a_settings_error():
    with pytest.raises(SettingsError, match="RFLOW_TOPIC_REPLICATION_FACTOR"):
        Settings.from_env({"RFLOW_TOPIC_REPLICATION_FACTOR": "0"})
