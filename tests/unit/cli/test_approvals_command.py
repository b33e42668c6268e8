"""`rflow approvals` and `rflow runs approve|reject`: who the CLI acts as, decided before
anything is written."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from rflow.cli import main
from rflow.cli.common import Failed, principal_of_token, principals_of_source
from rflow.lang import load_project

PROJECT = textwrap.dedent(
    """
    principals:
      alice: { token_env: ALICE_TOKEN, role: approver }
      bob: { token_env: BOB_TOKEN }
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT)
    return path


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("RFLOW_PROJECT", "RFLOW_API_TOKEN", "RFLOW_CLI_TOKEN", "ALICE_TOKEN", "BOB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # Nothing here may reach the services: a refusal comes first.
    monkeypatch.setenv("RFLOW_KAFKA_BROKERS", "127.0.0.1:1")
    monkeypatch.setenv("RFLOW_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    return CliRunner()


def test_the_cli_acts_as_the_principal_of_its_token_with_its_role(runner, project, monkeypatch):
    declared = load_project(project, {}).principals
    monkeypatch.setenv("RFLOW_API_TOKEN", "ops")
    operator = principal_of_token("ops", declared, "nowhere")
    assert (operator.name, operator.role) == ("operator", "operator")
    monkeypatch.setenv("ALICE_TOKEN", "alice-secret")
    monkeypatch.setenv("BOB_TOKEN", "bob-secret")
    alice = principal_of_token("alice-secret", declared, "nowhere")
    assert (alice.name, alice.role) == ("alice", "approver")
    bob = principal_of_token("bob-secret", declared, "nowhere")
    assert (bob.name, bob.role) == ("bob", "viewer")  # a principal without a role
    with pytest.raises(Failed, match=r"is not RFLOW_API_TOKEN \('operator'\), nor the token of"):
        principal_of_token("who-knows", declared, "nor the token of a principal of X")
    # Two principals holding one token cannot say who acts.
    monkeypatch.setenv("ALICE_TOKEN", "ops")
    with pytest.raises(Failed, match="principals 'operator' and 'alice' have the same token"):
        principal_of_token("ops", declared, "nowhere")


def test_a_deployments_principals_are_read_from_its_yaml_alone():
    source = {
        "files": [
            {"name": "a.yaml", "text": "networks: { main: { chain_id: 1 } }\n"},
            {"name": "b.yaml", "text": PROJECT + "workflows: {}\n"},
        ]
    }
    found = principals_of_source(source)
    assert {name: p.role for name, p in found.items()} == {"alice": "approver", "bob": "viewer"}


@pytest.mark.parametrize("group", ["approvals", "runs"])
def test_by_is_refused(runner, group, monkeypatch):
    monkeypatch.setenv("RFLOW_API_TOKEN", "ops")
    result = runner.invoke(main, [group, "approve", "r1", "--by", "alice"])
    assert result.exit_code == 2
    assert "--by is gone: an answer is recorded as the principal whose token" in result.output
    result = runner.invoke(main, [group, "reject", "r1", "--by", "alice"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    "command",
    [
        ["approvals", "approve", "r1"],
        ["runs", "reject", "r1"],
        ["runs", "list"],
        ["runs", "retry", "r1"],
        ["sends", "cancel", "s1"],
        ["workflow", "pause", "w"],
        ["audit", "ls"],
    ],
)
def test_without_a_token_nothing_is_read_or_done(runner, command):
    result = runner.invoke(main, command)
    assert result.exit_code == 1
    assert "the CLI acts as a principal: set RFLOW_CLI_TOKEN" in result.output
