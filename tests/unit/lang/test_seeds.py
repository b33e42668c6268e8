"""Every YAML example in the seeds, copied as written (placeholders filled), validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from rflow.lang import validate_path, validate_sources

SEEDS = Path(__file__).parent / "seeds"
ENV = {
    "AUDIT_URL": "https://audit.example.com/runs",
    "RELAYER_PAYOUT_KEY": "k",
    "RELAYER_TREASURY_KEY": "k",
    "RELAYER_SOLVER_KEY": "k",
    "SLACK_OPS_WEBHOOK_URL": "https://hooks.slack.com/services/x",
    "GITHUB_WEBHOOK_SECRET": "s",
}


def test_the_seed_snippets_validate_together() -> None:
    report = validate_path(SEEDS, ENV)
    assert report.errors == ()
    # As the seed writes them, copy-trade and the foreach payout move USDC, which the
    # treasury budget caps, from a relayer no budget of theirs covers: rflow says so.
    assert [(d.path, d.message.split(":")[0]) for d in report.warnings] == [
        (
            "workflows.copy-trade.steps[1].send_transaction",
            "this send can move USDC, a budgeted token, from relayer payout on ethereum "
            "with no cap",
        ),
        (
            "workflows.copy-trade.steps[1].send_transaction.args[0]",
            "the recipient of this USDC transfer comes straight from trigger data "
            "(trigger.args.sender) and no attached budget caps USDC",
        ),
        (
            "workflows.payouts.steps[1].send_transaction",
            "this send can move USDC, a budgeted token, from relayer payout on ethereum "
            "with no cap",
        ),
    ]
    assert report.project is not None
    assert sorted(report.workflows) == [
        "across-networks",
        "approvals",
        "copy-trade",
        "payouts",
        "sweep",
        "with-permissions",
    ]


@pytest.mark.parametrize(
    "name", sorted(p.name for p in SEEDS.glob("*.yaml") if p.name != "declarations.yaml")
)
def test_each_seed_snippet_validates_with_the_declarations(name: str) -> None:
    sources = [(str(SEEDS / n), (SEEDS / n).read_text()) for n in ("declarations.yaml", name)]
    report = validate_sources(sources, ENV)
    assert report.errors == ()


def test_copy_trade_as_the_seed_describes_it() -> None:
    project = validate_path(SEEDS, ENV).project
    assert project is not None
    workflow = project.workflows["copy-trade"]
    assert workflow.permissions.max_value_per_tx == 10**18
    assert workflow.rate_limit is not None and workflow.rate_limit.per.total_seconds() == 3600
    assert workflow.circuit_breaker is not None
    on_trip = workflow.circuit_breaker.on_trip
    assert on_trip[0] == "pause" and on_trip[1].notify.channel == "ops"  # type: ignore[union-attr]
    assert [s.kind for s in workflow.steps] == ["read", "send_transaction", "notify"]
    # Inside a step ${AUDIT_URL} is filled in when the call is made, not when the file loads.
    assert workflow.finally_[0].http_call.url == "${AUDIT_URL}"  # type: ignore[union-attr]
    assert workflow.finally_[0].http_call.method == "POST"  # type: ignore[union-attr]
    assert workflow.on_failure == "dead_letter"


def test_budgets_as_the_seed_describes_them() -> None:
    project = validate_path(SEEDS, ENV).project
    assert project is not None
    treasury = project.budgets["treasury-daily"]
    assert treasury.max_native_value == 10 * 10**18
    assert treasury.max_token_value == {"USDC": 1_000_000}
    assert treasury.scope.relayers == ["treasury"] and treasury.scope.networks == ["ethereum"]
    assert project.budgets["solver-gas"].max_gas_spend == 10**18
    assert project.workflows["sweep"].budgets == ["treasury-daily"]


def test_foreach_and_matrix_as_the_seed_describes_them() -> None:
    project = validate_path(SEEDS, ENV).project
    assert project is not None
    payout = project.workflows["payouts"].steps[1]
    assert (payout.max_parallel, payout.batch_size) == (4, 10)
    strategy = project.workflows["across-networks"].strategy
    assert strategy is not None
    assert strategy.matrix == {"network": ["ethereum", "base", "arbitrum"]}
    assert (strategy.fail_fast, strategy.max_parallel) == (False, 2)


def test_the_seed_copy_trade_needs_its_audit_url() -> None:
    env = {k: v for k, v in ENV.items() if k != "AUDIT_URL"}
    report = validate_path(SEEDS, env)
    assert [d.message for d in report.errors] == [
        "environment variable AUDIT_URL is not set (write ${AUDIT_URL:-default} to give a default)"
    ]
    assert report.errors[0].line == 28
    assert report.errors[0].column == 27
