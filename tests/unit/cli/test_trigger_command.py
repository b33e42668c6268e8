"""`rflow trigger`: the record it produces, keyed by the project's group, and its refusals."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from rflow.authz import Principal
from rflow.cli import main
from rflow.codecs import TriggerRecord
from rflow.engine.keys import run_id

PROJECT = textwrap.dedent(
    """
    workflows:
      order-paid:
        trigger:
          manual: { inputs: [account, order] }
        concurrency:
          group: "${{ trigger.account }}"
        steps:
          - id: log
            command: { name: log, args: { message: "${{ trigger.order }}" } }
      nightly:
        trigger:
          schedule: { cron: "0 3 * * *" }
        steps:
          - id: log
            command: { name: log, args: { message: hi } }
      sweep:
        strategy:
          matrix: { network: [a, b] }
        trigger:
          manual: {}
        steps:
          - id: log
            command: { name: log, args: { message: hi } }
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT)
    return path


@pytest.fixture
def produced(monkeypatch: pytest.MonkeyPatch) -> list[TriggerRecord]:
    """The records the command hands to Kafka (captured: no broker here)."""
    records: list[TriggerRecord] = []

    async def produce_trigger(settings, record, *, vouching=True):
        assert vouching is False  # as an outside producer: no proof of rflow's ingress
        records.append(record)
        return 3, 17

    monkeypatch.setattr("rflow.streams.producer.produce_trigger", produce_trigger)
    # Who may trigger is the gate's to say, over Postgres (tests/integration/test_roles.py).
    operator = Principal.of("operator", "operator")
    monkeypatch.setattr("rflow.cli.common.authorize", lambda *args, **kwargs: operator)
    monkeypatch.setattr("rflow.cli.common.record", lambda *args, **kwargs: None)
    return records


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("RFLOW_PROJECT", raising=False)
    # A refusal must come before producing; nothing here may reach Kafka.
    monkeypatch.setenv("RFLOW_KAFKA_BROKERS", "127.0.0.1:1")
    return CliRunner()


def test_with_a_project_the_record_carries_and_is_keyed_by_the_group(runner, project, produced):
    result = runner.invoke(
        main,
        [
            "trigger",
            "order-paid",
            "--input",
            '{"account": "acct-42", "order": 4711}',
            "--key",
            "orders:4711",
            "--project",
            str(project),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    [record] = produced
    assert (record.workflow, record.trigger_key, record.group) == (
        "order-paid",
        "orders:4711",
        "acct-42",
    )
    assert record.partition_key == "acct-42"
    assert json.loads(result.stdout) == {
        "workflow": "order-paid",
        "trigger_key": "orders:4711",
        "run_ids": [run_id("order-paid", "orders:4711")],
        "group": "acct-42",
        "topic": "rflow.triggers",
        "key": "acct-42",
        "partition": 3,
        "offset": 17,
    }


def test_a_matrix_workflow_prints_every_run_id(runner, project, produced, monkeypatch):
    monkeypatch.setenv("RFLOW_PROJECT", str(project))
    result = runner.invoke(main, ["trigger", "sweep", "--key", "k"])
    assert result.exit_code == 0, result.output
    ids = [run_id("sweep", "k", {"network": n}) for n in ("a", "b")]
    assert (
        f"k -> run {', '.join(ids)} (rflow.triggers key 'k', partition 3, offset 17)"
        in result.stdout
    )


def test_without_a_project_it_warns_and_keys_by_group_or_trigger_key(runner, produced):
    result = runner.invoke(main, ["trigger", "anything", "--input", '{"n": 1}', "--key", "k1"])
    assert result.exit_code == 0, result.output
    assert "warning: no project" in result.stderr
    result = runner.invoke(main, ["trigger", "anything", "--key", "k2", "--group", "g"])
    assert result.exit_code == 0, result.output
    assert [(r.trigger_key, r.group, r.partition_key) for r in produced] == [
        ("k1", None, "k1"),
        ("k2", "g", "g"),
    ]
    assert produced[0].trigger_key == "k1" and produced[0].payload == {"n": 1}


def test_the_default_trigger_key_is_new_for_every_call(runner, produced):
    for _ in range(2):
        assert runner.invoke(main, ["trigger", "w"]).exit_code == 0
    keys = [record.trigger_key for record in produced]
    # Outside rflow's own namespaces (manual: is its manual ingress's), so a worker takes it.
    assert all(key.startswith("trigger:w:") for key in keys) and keys[0] != keys[1]
    assert all(record.proof is None and record.source == "manual" for record in produced)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "error: no workflow 'nope' (the project has: nightly, order-paid, sweep)"),
        (["order-paid", "--input", "{nope"], "error: --input is not JSON"),
        (["order-paid", "--input", "[1]"], "error: --input must be a JSON object"),
        (
            ["order-paid", "--input", '{"order": 1}'],
            "error: concurrency group '${{ trigger.account }}' is empty for this trigger",
        ),
        (
            ["order-paid", "--input", '{"account": "a"}', "--group", "b"],
            "error: --group 'b' disagrees with the concurrency group 'a' that workflow "
            "order-paid computes from --input",
        ),
        (
            ["sweep", "--group", "b"],
            "error: --group 'b' given, but workflow sweep has no concurrency group",
        ),
        # What a worker refuses of an outside producer's record, refused here first.
        (
            ["order-paid", "--input", '{"account": "a"}'],
            "error: a worker would refuse this record: invalid_input: payload: missing "
            "input(s) 'order' for 'order-paid'; it takes: account, order",
        ),
        (
            ["nightly"],
            "error: a worker would refuse this record: not_accepted: workflow 'nightly' takes "
            "no firings from outside producers: it has no manual trigger (it starts on schedule)",
        ),
        (
            ["sweep", "--key", "schedule:2026-01-01T03:00:00Z"],
            "error: a worker would refuse this record: reserved_key: trigger_key "
            "'schedule:2026-01-01T03:00:00Z' starts with 'schedule:'",
        ),
    ],
)
def test_refusals_exit_2_before_producing(runner, project, produced, args, message):
    result = runner.invoke(main, ["trigger", *args, "--project", str(project)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert produced == []
