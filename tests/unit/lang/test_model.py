"""The model itself: defaults, shorthands, helpers and round trips."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from rflow.lang import Project, validate_text
from rflow.lang.model import Relayer, Retry, Workflow
from rflow.lang.model.resources import Network
from rflow.lang.model.triggers import AuthHmac
from tests.unit.lang.conftest import check

PROJECT = """\
workflows:
  w:
    permissions: { relayers: [payout], max_value_per_tx: 1 ether }
    trigger:
      webhook:
        path: /hooks/w
        auth: { type: hmac, algorithm: sha512, secret_env: W_SECRET }
    steps:
      - id: plan
        http_call: { url: "https://example.com/plan", body: { a: 1 }, expect_status: 201 }
        retry: { backoff: 10s }
      - id: each
        foreach: "${{ steps.plan.output.items }}"
        send_transaction: { network: ethereum, relayer: payout, to: "${{ item }}", value: 10 gwei }
      - id: pick
        choose: { branches: [{ when: "${{ true }}", goto: plan }] }
      - id: mark
        state_set: { last_run: "${{ run.id }}" }
      - id: add
        list_add: { list: seen, value: "${{ trigger.body.id }}" }
"""


def project() -> Project:
    report = check(
        PROJECT, env={"RELAYER_PAYOUT_KEY": "k", "RELAYER_TREASURY_KEY": "k", "W_SECRET": "s"}
    )
    assert report.diagnostics == ()
    assert report.project is not None
    return report.project


def test_defaults_and_shorthands() -> None:
    steps = project().workflows["w"].steps
    plan, each, pick, mark, add = steps
    assert plan.http_call.method == "POST"  # a body makes it a POST  # type: ignore[union-attr]
    assert plan.http_call.expect_status == [201]  # type: ignore[union-attr]
    assert plan.retry is not None
    assert plan.retry.max_attempts == 3
    assert plan.retry.backoff.strategy == "fixed"  # type: ignore[union-attr]
    assert plan.retry.backoff.delay == timedelta(seconds=10)  # type: ignore[union-attr]
    assert each.parallelism == 1
    assert each.send_transaction.value == 10 * 10**9  # type: ignore[union-attr]
    assert pick.choose.default == "continue"  # type: ignore[union-attr]
    assert mark.state_set == {"last_run": "${{ run.id }}"}  # type: ignore[union-attr]
    assert add.list_add.list_ == "seen"  # type: ignore[union-attr]
    assert [s.kind for s in steps] == [
        "http_call",
        "send_transaction",
        "choose",
        "state_set",
        "list_add",
    ]
    assert steps[1].action is steps[1].send_transaction  # type: ignore[union-attr]


def test_models_are_frozen_and_strict() -> None:
    workflow = project().workflows["w"]
    with pytest.raises(ValidationError):
        workflow.paused = True  # type: ignore[misc]
    with pytest.raises(ValidationError, match="extra"):
        Retry.model_validate({"max_attempt": 3})


@pytest.mark.parametrize("mode", ["python", "json"])
def test_round_trip(mode: str) -> None:
    original = project()
    dumped = original.model_dump(mode=mode)
    assert "finally" in dumped["workflows"]["w"] and "if" in dumped["workflows"]["w"]["steps"][0]
    assert Project.model_validate(dumped) == original


def test_hmac_header_defaults_by_algorithm() -> None:
    auth = project().workflows["w"].trigger.webhook.auth  # type: ignore[union-attr]
    assert isinstance(auth, AuthHmac)
    assert auth.signature_header == "X-Hub-Signature-512"
    assert AuthHmac(type="hmac", secret_env="S").signature_header == "X-Hub-Signature-256"


def test_secrets_are_read_lazily_from_the_given_environment() -> None:
    relayer = Relayer(key_env="PAYOUT_KEY", networks=["ethereum"])
    key = relayer.signer_key({"PAYOUT_KEY": "0xabc"})
    assert key.get_secret_value() == "0xabc"
    assert "0xabc" not in repr(key)
    with pytest.raises(LookupError, match="PAYOUT_KEY"):
        relayer.signer_key({})


def test_network_rpc_variable() -> None:
    assert Network(chain_id=1).rpc_env_name("base-sepolia") == "RFLOW_RPC_URL_BASE_SEPOLIA"
    assert Network(chain_id=1, rpc_url_env="MY_RPC").rpc_env_name("x") == "MY_RPC"


def test_all_steps_lists_finally_last() -> None:
    report = validate_text(
        "workflows:\n  w:\n    trigger: { manual: }\n    steps: [{ id: a, delay: { duration: 1s } }]\n"
        "    finally: [{ id: b, delay: { until: '2030-01-01T00:00:00' } }]\n",
        {},
    )
    assert report.project is not None
    workflow: Workflow = report.project.workflows["w"]
    assert [s.id for s in workflow.all_steps()] == ["a", "b"]


def test_report_properties() -> None:
    report = check("workflows: {}\n", env={})
    assert report.ok and report.project is not None
    assert len(report.warnings) == 2 and report.errors == ()
