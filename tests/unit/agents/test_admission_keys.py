"""The runner's key checks: a firing must be keyed, and partitioned, as its group demands."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka.partitioner import DefaultPartitioner

from rflow.agents.runner import key_disagreement, partition_disagreement
from rflow.codecs import TriggerRecord
from rflow.lang import load_project
from rflow.lang.model import Workflow

PROJECT = textwrap.dedent(
    """
    workflows:
      grouped:
        trigger: { manual: {} }
        concurrency: { group: "acct-${{ trigger.account }}" }
        steps:
          - id: log
            command: { name: log, args: { message: hi } }
      bare:
        trigger: { manual: {} }
        concurrency: { group: "${{ trigger.account }}" }
        steps:
          - id: log
            command: { name: log, args: { message: hi } }
      plain:
        trigger: { manual: {} }
        steps:
          - id: log
            command: { name: log, args: { message: hi } }
    """
)


@pytest.fixture(scope="module")
def workflows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Workflow]:
    path: Path = tmp_path_factory.mktemp("project") / "project.yaml"
    path.write_text(PROJECT)
    return dict(load_project(path, {}).workflows)


def record(workflow: str, group: str | None, **payload: Any) -> TriggerRecord:
    return TriggerRecord(
        workflow=workflow,
        trigger_key="orders:1",
        group=group,
        source="manual",
        payload=payload,
        received_at=datetime(2026, 5, 6, tzinfo=UTC),
    )


def test_a_firing_keyed_by_its_group_or_its_trigger_key_is_admitted(workflows):
    assert (
        key_disagreement(workflows["grouped"], record("grouped", "acct-7", account=7), b"acct-7")
        is None
    )
    assert key_disagreement(workflows["plain"], record("plain", None), b"orders:1") is None


@pytest.mark.parametrize(
    ("name", "group", "payload", "key", "reason"),
    [
        (
            "grouped",
            "acct-7",
            {"account": 7},
            b"acct-8",
            "key 'acct-8' disagrees with the concurrency group 'acct-7' of workflow grouped",
        ),
        (
            "grouped",
            "acct-7",
            {"account": 7},
            None,
            "key none disagrees with the concurrency group 'acct-7'",
        ),
        (
            "grouped",
            "acct-8",
            {"account": 7},
            b"acct-7",
            "group 'acct-8' disagrees with the concurrency group 'acct-7' of workflow grouped",
        ),
        (
            "grouped",
            None,
            {"account": 7},
            b"acct-7",
            "group None disagrees with the concurrency group 'acct-7'",
        ),
        (
            "plain",
            None,
            {},
            b"other",
            "key 'other' disagrees with the trigger key 'orders:1' of workflow plain",
        ),
        (
            "plain",
            "g",
            {},
            b"orders:1",
            "group 'g' given, but workflow plain has no concurrency group",
        ),
        (
            "bare",
            None,
            {},
            b"orders:1",
            "cannot compute the concurrency group of workflow bare: concurrency group",
        ),
    ],
)
def test_a_disagreeing_key_or_group_is_refused_with_the_reason(
    workflows, name, group, payload, key, reason
):
    found = key_disagreement(workflows[name], record(name, group, **payload), key)
    assert found is not None and reason in found, found


def test_the_partition_must_be_the_one_murmur2_gives_the_key():
    partitions = list(range(8))
    home = DefaultPartitioner()(b"acct-42", partitions, partitions)
    assert partition_disagreement(b"acct-42", home, 8) is None
    reason = partition_disagreement(b"acct-42", (home + 1) % 8, 8)
    assert reason is not None
    assert f"belongs on partition {home} of 8" in reason
    assert "-X topic.partitioner=murmur2_random" in reason
