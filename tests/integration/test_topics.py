"""`rflow topics apply` against the real broker."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from aiokafka.admin import NewTopic

from rflow.settings import Settings
from rflow.streams import kafka, topics
from tests.integration.conftest import delete_test_topics
from tests.integration.harness import wait_until


async def create_topic(settings: Settings, name: str, partitions: int) -> None:
    """Create a topic behind rflow's back, and wait until the broker lists it."""
    admin = kafka.admin(settings)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()

    async def listed():
        return name in await topics.describe(settings, [name])

    await wait_until(listed, timeout=15, what=f"topic {name} in the metadata")


@pytest.fixture
async def cleanup(settings: Settings):
    yield
    await delete_test_topics(settings)


async def test_apply_creates_every_declared_topic_then_changes_nothing(settings, cleanup):
    catalog = topics.Catalog.from_settings(settings)
    expected = {settings.topic_prefix + spec.name for spec in catalog}

    first = await topics.apply(settings)
    assert set(first.created) == expected
    assert first.unchanged == []
    counts = await topics.describe(settings, expected)
    assert counts == {settings.topic_prefix + s.name: s.partitions for s in catalog}

    second = await topics.apply(settings)
    assert second.created == []
    assert set(second.unchanged) == expected


async def test_changelog_topics_are_compacted(settings, cleanup):
    await topics.apply(settings)
    admin = kafka.admin(settings)
    await admin.start()
    try:
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        name = settings.topic_prefix + "rflow.state.triggers"
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        configs = {entry[0]: entry[1] for entry in response.resources[0][4]}
        assert configs["cleanup.policy"] == "compact"
    finally:
        await admin.close()


async def test_a_partition_count_mismatch_is_refused_and_nothing_is_created(settings, cleanup):
    wrong = settings.topic_prefix + "rflow.runs"
    await create_topic(settings, wrong, 3)

    with pytest.raises(topics.TopicsError) as err:
        await topics.apply(settings)
    assert f"topic {wrong} has 3 partitions but topics.yaml declares 8" in str(err.value)
    # Refused before creating anything: only the pre-existing topic is there.
    assert await topics.describe(
        settings, [settings.topic_prefix + s.name for s in topics.Catalog.from_settings(settings)]
    ) == {wrong: 3}


async def test_cli_reports_the_mismatch_and_exits_1(settings, cleanup):
    await create_topic(settings, settings.topic_prefix + "rflow.triggers", 2)
    result = subprocess.run(
        [sys.executable, "-m", "rflow.cli", "topics", "apply"],
        env={**os.environ, **settings.to_env()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "has 2 partitions but topics.yaml declares 8" in result.stderr
