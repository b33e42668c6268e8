"""`rflow approvals` and `rflow runs approve|reject`: who the CLI acts as, decided before
anything is read or written."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from rflow.cli import main
from rflow.cli.approvals import acting_principal

PROJECT = textwrap.dedent(
    """
    principals:
      alice: { token_env: ALICE_TOKEN }
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT)
    return path


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("RFLOW_PROJECT", "RFLOW_API_TOKEN", "RFLOW_CLI_TOKEN", "ALICE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # Nothing here may reach the services: a refusal comes first.
    monkeypatch.setenv("RFLOW_KAFKA_BROKERS", "127.0.0.1:1")
    monkeypatch.setenv("RFLOW_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    return CliRunner()


def test_the_cli_acts_as_the_principal_of_its_token(runner, project, monkeypatch):
    monkeypatch.setenv("RFLOW_API_TOKEN", "ops")
    assert acting_principal(None) == "operator"
    monkeypatch.setenv("ALICE_TOKEN", "alice-secret")
    monkeypatch.setenv("RFLOW_CLI_TOKEN", "alice-secret")
    assert acting_principal(project) == "alice"
    monkeypatch.setenv("RFLOW_PROJECT", str(project))
    assert acting_principal(None) == "alice"


@pytest.mark.parametrize("group", ["approvals", "runs"])
def test_by_is_refused(runner, group, monkeypatch):
    monkeypatch.setenv("RFLOW_API_TOKEN", "ops")
    result = runner.invoke(main, [group, "approve", "r1", "--by", "alice"])
    assert result.exit_code == 2
    assert "--by is gone: an answer is recorded as the principal whose token" in result.output
    result = runner.invoke(main, [group, "reject", "r1", "--by", "alice"])
    assert result.exit_code == 2


def test_without_a_token_or_with_an_unknown_one_nothing_is_answered(runner, project, monkeypatch):
    result = runner.invoke(main, ["approvals", "approve", "r1"])
    assert result.exit_code == 1
    assert "the CLI answers approvals as a principal: set RFLOW_CLI_TOKEN" in result.output
    monkeypatch.setenv("RFLOW_CLI_TOKEN", "who-knows")
    result = runner.invoke(main, ["runs", "reject", "r1"])
    assert result.exit_code == 1
    assert "the token in RFLOW_CLI_TOKEN is not RFLOW_API_TOKEN ('operator'), and there is " in (
        result.output
    )
    result = runner.invoke(main, ["approvals", "approve", "r1", "--project", str(project)])
    assert result.exit_code == 1
    assert f"nor the token of a principal of {project}" in result.output
    # Two principals holding one token cannot say who answers.
    monkeypatch.setenv("ALICE_TOKEN", "ops")
    monkeypatch.setenv("RFLOW_API_TOKEN", "ops")
    result = runner.invoke(main, ["approvals", "ls", "--mine", "--project", str(project)])
    assert result.exit_code == 1
    assert "principals 'operator' and 'alice' have the same token" in result.output
