"""`rflow budgets ls`, `rflow spend` and the charges of `rflow runs show`, on a real schema."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rflow import storage
from rflow.budgets import NATIVE, Charge
from rflow.cli import main
from rflow.engine.effects import Journal
from rflow.storage import budgets, runs

pytestmark = pytest.mark.usefixtures("schema")

PROJECT = """
networks:
  ethereum: { chain_id: 1 }
contracts:
  USDC:
    address: { ethereum: "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48" }
    abi:
      - { type: function, name: transfer, inputs: [{ name: to, type: address }, { name: amount, type: uint256 }] }
relayers:
  treasury: { key_env: RELAYER_TREASURY_KEY, networks: [ethereum] }
budgets:
  treasury-daily:
    window: 24h
    max_native_value: 10 ether
    max_token_value: { USDC: "1000000" }
    scope: { relayers: [treasury], networks: [ethereum] }
  solver-gas:
    window: 1h
    max_gas_spend: 1 ether
workflows:
  sweep:
    budgets: [treasury-daily]
    trigger: { manual: {} }
    steps:
      - id: log
        command: { name: log, args: { message: hi } }
"""

DAY = timedelta(hours=24)
ETHER = 10**18


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT)
    return path


@pytest.fixture
def rflow(settings, monkeypatch: pytest.MonkeyPatch):
    """Invoke the CLI in this process, against this test's schema."""
    monkeypatch.delenv("RFLOW_PROJECT", raising=False)
    env = {**settings.to_env(), "RELAYER_TREASURY_KEY": "0x" + "22" * 32}

    def invoke(*args: str, **extra: str) -> Result:
        return CliRunner().invoke(main, list(args), env={**env, **extra})

    return invoke


def seed(settings) -> None:
    """Reservations of two sends of run r1 (one settled), and three mined transactions."""

    async def work() -> None:
        conn = await storage.connect(settings)
        async with conn:
            for send_key, charges in (
                ("s1", [Charge("treasury-daily", NATIVE, 3 * ETHER, 10 * ETHER, DAY)]),
                (
                    "s2",
                    [
                        Charge("treasury-daily", NATIVE, ETHER, 10 * ETHER, DAY),
                        Charge("treasury-daily", "USDC", 250_000, 1_000_000, DAY),
                    ],
                ),
            ):
                async with conn.transaction():
                    await budgets.reserve(
                        conn, send_key=send_key, run_id="r1", workflow="sweep", charges=charges
                    )
            await budgets.settle(conn, "s1", "spent")
            for tx_hash, relayer, gas_used, value in (
                ("0x1", "treasury", 21_000, 3 * ETHER),
                ("0x2", "treasury", 50_000, 0),
                ("0x3", "solver", 100_000, 0),
            ):
                await budgets.record_gas(
                    conn,
                    tx_hash=tx_hash,
                    send_key=tx_hash,
                    network="ethereum",
                    relayer=relayer,
                    gas_used=gas_used,
                    effective_gas_price=10**9,
                    value=value,
                )
            await conn.execute(
                "UPDATE native_spend SET recorded_at = now() - interval '2 days' "
                "WHERE tx_hash = '0x2'"
            )

    asyncio.run(work())


def test_budgets_ls_prints_every_cap_in_its_window(settings, project, rflow):
    seed(settings)
    result = rflow("budgets", "ls", "--project", str(project))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "budget          asset   cap                   consumed             reserved"
        "             remaining            window",
        "treasury-daily  native  10000000000000000000  4000000000000000000  1000000000000000000"
        "  6000000000000000000  24h",
        "treasury-daily  USDC    1000000               250000               250000"
        "               750000               24h",
        "solver-gas      gas     1000000000000000000   121000000000000      0"
        "                    999879000000000000   1h",
    ]
    # The project comes from RFLOW_PROJECT when --project is not given.
    listed = rflow("budgets", "ls", "--json", RFLOW_PROJECT=str(project))
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout)[0] == {
        "budget": "treasury-daily",
        "asset": "native",
        "cap": 10 * ETHER,
        "consumed": 4 * ETHER,
        "reserved": ETHER,
        "remaining": 6 * ETHER,
        "window": "24h",
    }


def test_budgets_ls_without_budgets_or_project(tmp_path, rflow):
    bare = tmp_path / "bare.yaml"
    bare.write_text(PROJECT.split("budgets:")[0] + "workflows: {}\n")
    result = rflow("budgets", "ls", "--project", str(bare))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"no budgets declared in {bare}\n"
    missing = rflow("budgets", "ls")
    assert missing.exit_code == 1
    assert "no project: give --project or set RFLOW_PROJECT" in missing.output


def test_spend_per_network_and_relayer(settings, rflow):
    empty = rflow("spend")
    assert empty.exit_code == 0, empty.output
    assert empty.stdout == "no sends recorded in the last 24h\n"
    seed(settings)
    result = rflow("spend")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "network   relayer   transactions  gas_spent_wei    value_moved_wei",
        "ethereum  solver    1             100000000000000  0",
        "ethereum  treasury  1             21000000000000   3000000000000000000",
    ]
    everything = rflow("spend", "--window", "all", "--json")
    assert everything.exit_code == 0, everything.output
    assert json.loads(everything.stdout)[1] == {
        "network": "ethereum",
        "relayer": "treasury",
        "transactions": 2,
        "gas_spent": 71_000 * 10**9,
        "value_moved": 3 * ETHER,
    }
    bad = rflow("spend", "--window", "fortnight")
    assert bad.exit_code == 2
    assert "Invalid value for '--window'" in bad.output


def test_runs_show_lists_the_runs_charges(settings, rflow):
    seed(settings)

    async def start_run() -> None:
        conn = await storage.connect(settings)
        async with conn:
            await runs.project(
                conn,
                [
                    Journal(
                        run_id=run_id,
                        workflow="sweep",
                        event="run_started",
                        status="running",
                        at=datetime.now(UTC),
                    )
                    for run_id in ("r1", "r2")
                ],
            )

    asyncio.run(start_run())
    shown = rflow("runs", "show", "r1")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[-5:] == [
        "",
        "BUDGET          ASSET   AMOUNT               STATUS",
        "treasury-daily  native  3000000000000000000  spent",
        "treasury-daily  native  1000000000000000000  reserved",
        "treasury-daily  USDC    250000               reserved",
    ]
    data = json.loads(rflow("runs", "show", "r1", "--json").stdout)
    assert data["charges"][2] == {
        "budget": "treasury-daily",
        "asset": "USDC",
        "amount": 250_000,
        "status": "reserved",
        "send_key": "s2",
    }
    # A run whose sends charged nothing shows no charges section.
    plain = rflow("runs", "show", "r2")
    assert plain.exit_code == 0, plain.output
    assert "BUDGET" not in plain.stdout
    assert json.loads(rflow("runs", "show", "r2", "--json").stdout)["charges"] == []
