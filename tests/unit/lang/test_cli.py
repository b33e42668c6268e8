"""`rflow validate` and `rflow schema`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rflow.cli import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in (
        "RELAYER_PAYOUT_KEY",
        "RELAYER_TREASURY_KEY",
        "RELAYER_DEV_KEY",
        "SLACK_OPS_WEBHOOK_URL",
        "PAGERDUTY_ROUTING_KEY",
        "WITHDRAWALS_WEBHOOK_SECRET",
        "TREASURY_OPS_TOKEN",
        "TREASURY_LEAD_TOKEN",
        "PROMETHEUS_SCRAPE_TOKEN",
    ):
        monkeypatch.setenv(name, "set-for-test")
    # The dev relayer's declared address is anvil's first account: its key matches. The
    # placeholders above hold no key, so their declared addresses cannot be checked.
    monkeypatch.setenv("RELAYER_DEV_KEY", DEV_KEY)
    return CliRunner()


DEV_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
UNCHECKED = [
    "examples/project.yaml:45:14: warning: relayers.payout.key_env: RELAYER_PAYOUT_KEY does "
    "not hold a valid private key: the address was not checked",
    "examples/project.yaml:49:14: warning: relayers.treasury.key_env: RELAYER_TREASURY_KEY "
    "does not hold a valid private key: the address was not checked",
]


def test_validate_examples_text(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = runner.invoke(main, ["validate", "examples/"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        *UNCHECKED,
        "examples/: 16 workflows, 0 errors, 2 warnings",
    ]


def test_validate_refuses_a_declared_address_the_key_does_not_sign_for(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("RELAYER_DEV_KEY", "0x" + "42" * 32)
    result = runner.invoke(main, ["validate", "examples"])
    assert result.exit_code == 1
    assert (
        "examples/project.yaml:54:14: error: relayers.dev.address: the key in RELAYER_DEV_KEY "
        "signs for 0x17c5185167401eD00cF5F5b2fc97D9BBfDb7D025, not for the declared address "
        "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
    ) in result.output.splitlines()
    assert "42" * 32 not in result.output


def test_validate_prints_warnings_and_still_succeeds(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("RELAYER_DEV_KEY")
    result = runner.invoke(main, ["validate", "examples"])
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        *UNCHECKED,
        "examples/project.yaml:53:14: warning: relayers.dev.key_env: environment variable "
        "RELAYER_DEV_KEY is not set (the key of relayer 'dev')",
        "examples: 16 workflows, 0 errors, 3 warnings",
    ]


def test_validate_examples_json(runner: CliRunner) -> None:
    result = runner.invoke(main, ["validate", str(EXAMPLES), "--format", "json"])
    assert result.exit_code == 0
    document = json.loads(result.output)
    assert [f"{w['path']}: {w['message']}" for w in document.pop("warnings")] == [
        line.split(" warning: ", 1)[1] for line in UNCHECKED
    ]
    assert document == {
        "ok": True,
        "errors": [],
        "workflows": [
            "approve-or-expire",
            "best-quote",
            "bridge-payment",
            "copy-trade",
            "daily-treasury-report",
            "demo-payout",
            "event-payout",
            "hello-local",
            "invoice-run",
            "local-smoke",
            "weekly-payouts",
            "relayer-gas-watch",
            "release-gate",
            "settle-invoice",
            "sweep",
            "withdrawals",
        ],
    }


def test_validate_errors_exit_1(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "workflows:\n  w:\n    trigger: { manual: {} }\n    steps:\n      - id: a\n        notify: { chanel: ops, message: hi }\n"
    )
    result = runner.invoke(main, ["validate", str(bad)])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"{bad}:6:9: error: workflows.w.steps[0].notify: missing required field 'channel'",
        f"{bad}:6:19: error: workflows.w.steps[0].notify: unknown field 'chanel' — did you mean 'channel'?",
        f"{bad}: 1 workflow, 2 errors, 0 warnings",
    ]
    result = runner.invoke(main, ["validate", str(bad), "--format", "json"])
    assert result.exit_code == 1
    document = json.loads(result.output)
    assert document["ok"] is False
    assert document["errors"][1] == {
        "severity": "error",
        "message": "unknown field 'chanel' — did you mean 'channel'?",
        "file": str(bad),
        "line": 6,
        "column": 19,
        "path": "workflows.w.steps[0].notify",
    }
    assert document["workflows"] == ["w"]


def test_validate_usage_errors_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["validate", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "does not exist" in result.output
    result = runner.invoke(main, ["validate", str(EXAMPLES), "--format", "xml"])
    assert result.exit_code == 2


def test_schema_command_matches_the_committed_schema(runner: CliRunner, tmp_path: Path) -> None:
    committed = (REPO / "schemas" / "rflow.schema.json").read_text()
    result = runner.invoke(main, ["schema"])
    assert result.exit_code == 0
    assert result.output == committed, "run `rflow schema -o schemas/rflow.schema.json`"
    out = tmp_path / "s.json"
    result = runner.invoke(main, ["schema", "--output", str(out)])
    assert result.exit_code == 0
    assert out.read_text() == committed
    schema = json.loads(committed)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["workflows"]["description"] == "Workflows, by name."


def test_validate_json_flag_is_the_json_format(runner: CliRunner) -> None:
    flag = runner.invoke(main, ["validate", str(EXAMPLES), "--json"])
    option = runner.invoke(main, ["validate", str(EXAMPLES), "--format", "json"])
    assert flag.exit_code == 0 and json.loads(flag.output) == json.loads(option.output)
