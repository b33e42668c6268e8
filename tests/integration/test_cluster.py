"""rflow's topics on a cluster: as many copies as asked for, never more than the brokers.

The replicated case needs the three-node cluster (`scripts/stack up --brokers 3`, whose
`scripts/stack env` sets RFLOW_TOPIC_REPLICATION_FACTOR=3); CI runs it there, beside the
soak that kills a broker (.ci/run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from rflow.settings import Settings
from rflow.streams import kafka, topics
from tests.integration.conftest import delete_test_topics


async def live_brokers(settings: Settings) -> int:
    admin = kafka.admin(settings)
    await admin.start()
    try:
        return len((await admin.describe_cluster())["brokers"])
    finally:
        await admin.close()


async def test_more_copies_than_brokers_is_refused_before_anything_is_created(settings):
    brokers = await live_brokers(settings)
    asking = settings.model_copy(update={"topic_replication_factor": brokers + 1})
    with pytest.raises(topics.TopicsError) as refused:
        await topics.apply(asking)
    message = str(refused.value)
    assert message.startswith(f"replication factor {brokers + 1} asked for (rflow.triggers, ")
    assert f"has {brokers} broker(s) up: every copy needs a broker of its own" in message
    assert f"to at most {brokers}, or add brokers" in message
    names = [asking.topic_prefix + spec.name for spec in topics.Catalog.from_settings(asking)]
    assert await topics.describe(asking, names) == {}


async def test_on_three_brokers_every_topic_has_three_copies_and_needs_two(settings):
    if await live_brokers(settings) < 3 or settings.topic_replication_factor != 3:
        pytest.skip("needs `scripts/stack up --brokers 3` and its `scripts/stack env`")
    try:
        result = await topics.apply(settings)
        assert len(result.created) == len(topics.Catalog.from_settings(settings).specs)
        admin = kafka.admin(settings)
        await admin.start()
        try:
            described = await admin.describe_topics(result.created)
            for topic in described:
                for partition in topic["partitions"]:
                    assert len(set(partition["replicas"])) == 3, (topic["topic"], partition)
            configs = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name) for name in result.created]
            )
            found = {}
            for response in configs:
                for resource in response.to_object()["resources"]:
                    entries = resource["config_entries"]
                    values = {c["config_names"]: c["config_value"] for c in entries}
                    found[resource["resource_name"]] = values["min.insync.replicas"]
            assert found == {name: "2" for name in result.created}
        finally:
            await admin.close()
    finally:
        await delete_test_topics(settings)


async def test_a_live_topic_with_fewer_copies_is_named_and_left_alone(settings):
    """More copies asked for after the topics exist: `rflow topics apply` (and a worker as
    it starts) says which topics have fewer and how to give them more; it changes none."""
    try:
        await topics.apply(settings.model_copy(update={"topic_replication_factor": 1}))
        asking = settings.model_copy(update={"topic_replication_factor": 2})
        result = await topics.apply(asking)
        names = [asking.topic_prefix + spec.name for spec in topics.Catalog.from_settings(asking)]
        assert result.created == [] and result.unchanged == names
        assert result.fewer_copies == [
            f"topic {name} has 1 copy but 2 are asked for: rflow does not change the "
            "replication of a live topic; give it more with Kafka's kafka-reassign-partitions "
            "(docs/cluster.md)"
            for name in names
        ]
        answer = subprocess.run(
            [sys.executable, "-m", "rflow.cli", "topics", "apply", "--json"],
            env={**os.environ, **asking.to_env()},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert answer.returncode == 0, answer.stderr
        assert json.loads(answer.stdout)["warnings"] == result.fewer_copies
        plain = subprocess.run(
            [sys.executable, "-m", "rflow.cli", "topics", "apply"],
            env={**os.environ, **asking.to_env()},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert plain.returncode == 0, plain.stderr
        assert f"warning: topic {names[0]} has 1 copy but 2 are asked for" in plain.stderr
        described = await topics.describe(asking, names)
        assert set(described) == set(names)
    finally:
        await delete_test_topics(settings)
