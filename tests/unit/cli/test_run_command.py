"""`rflow run` refusals that need no services: inputs, project checks."""

from __future__ import annotations

import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rflow.cli import main
from rflow.cli.run import parse_inputs

PROJECT = textwrap.dedent(
    """
    workflows:
      payout:
        trigger:
          manual: { inputs: [account, amount] }
        steps:
          - id: log
            command: { name: log, args: { message: "${{ inputs.amount }}" } }
      hook:
        trigger:
          webhook: { path: /hooks/x }
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
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("RFLOW_PROJECT", raising=False)
    # Nothing here may reach Kafka: a refusal must come before producing.
    monkeypatch.setenv("RFLOW_KAFKA_BROKERS", "127.0.0.1:1")
    return CliRunner()


def test_parse_inputs_merges_json_objects_and_pairs():
    assert parse_inputs(('{"a": 1, "b": [2]}', "c=x=y", " d = 3")) == {
        "a": 1,
        "b": [2],
        "c": "x=y",
        "d": " 3",
    }
    for bad in ("{", "[1]", "novalue", "=x"):
        with pytest.raises(click.BadParameter):
            parse_inputs((bad,))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "error: no workflow 'nope'"),
        (["hook"], "error: workflow 'hook' has no manual trigger (it starts on webhook)"),
        (
            ["payout", "--input", '{"account": "a"}'],
            "error: missing input(s) 'amount' for 'payout'; it takes: account, amount",
        ),
        (
            ["payout", "--input", "account=a", "--input", "amount=1", "--input", "x=1"],
            "error: unknown input(s) 'x' for 'payout'; it takes: account, amount",
        ),
        (["payout", "--input", "{nope"], "error: --input '{nope' is not JSON"),
    ],
)
def test_refusals_exit_2_with_the_reason(runner, project, args, message):
    result = runner.invoke(main, ["run", *args, "--project", str(project)])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_the_project_comes_from_the_environment(runner, project, monkeypatch):
    monkeypatch.setenv("RFLOW_PROJECT", str(project))
    result = runner.invoke(main, ["run", "nope"])
    assert result.exit_code == 2
    assert "error: no workflow 'nope'" in result.output


def test_a_project_with_errors_is_refused(runner, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("workflows: { w: { steps: [] } }\n")
    result = runner.invoke(main, ["run", "w", "--project", str(bad)])
    assert result.exit_code == 2
    assert f"error: {bad} has errors" in result.output
