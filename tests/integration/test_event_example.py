"""The local event example, as a newcomer runs it: the examples' PayoutDesk contract that
``scripts/stack up`` deploys on anvil, ``rflow dev emit`` asking it for payouts, and the
example workflow ``event-payout`` that each PayoutRequested event starts (a chain read, a
branch, a send charged to a budget, concurrency per requester), on a real worker with
the examples project."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from eth_account import Account
from web3 import AsyncWeb3

from rflow import storage
from rflow.engine.keys import run_id
from rflow.lang import load_project
from rflow.settings import Settings
from rflow.storage import budgets
from tests.conftest import REPO
from tests.integration import chain
from tests.integration.test_runs import settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

EXAMPLES = REPO / "examples"
ADDRESS = "0x700b6A60ce7EaaEA56F065753d8dcB9653dbAD35"
DEPLOYER = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"
RELAYER_DEV_KEY = chain.DEV_KEY
TO = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"


def cli(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rflow.cli", *args],
        env={**os.environ, **settings.to_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def stack(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "scripts" / "stack"), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def requester(w3: AsyncWeb3) -> str:
    """A fresh address the node signs for (impersonated, funded): its request count on
    the shared chain starts at zero."""
    address = Account.create().address
    await chain.rpc(w3, "anvil_impersonateAccount", address)
    await chain.rpc(w3, "anvil_setBalance", address, hex(10**18))
    return address


def test_the_project_declares_the_contract_where_the_stack_deploys_it():
    contract = load_project(EXAMPLES, {}).contracts["PayoutDesk"]
    assert contract.address == {"local": ADDRESS}
    names = {entry.get("name") for entry in contract.abi}
    assert {"PayoutRequested", "request", "requestsBy", "requests"} <= names


async def test_the_stack_deploys_the_contract_on_a_fresh_chain_once():
    async with chain.private_anvil() as url:
        port = url.rsplit(":", 1)[1]
        w3 = chain.connect(url)
        try:
            assert await w3.eth.get_code(ADDRESS) == b""
            first = stack("deploy-examples", RFLOW_STACK_ANVIL_PORT=port)
            assert first.returncode == 0, first.stderr
            assert f"deployed the example contract PayoutDesk at {ADDRESS}" in first.stderr
            code = await w3.eth.get_code(ADDRESS)
            assert len(code) > 100
            again = stack("deploy-examples", RFLOW_STACK_ANVIL_PORT=port)
            assert (again.returncode, again.stderr) == (0, "")  # there already: nothing sent
            assert await w3.eth.get_transaction_count(DEPLOYER) == 1
        finally:
            await w3.provider.disconnect()
    # A chain where the deployer's first nonce is spent cannot have it there: said so.
    async with chain.private_anvil() as url:
        w3 = chain.connect(url)
        try:
            await chain.rpc(w3, "anvil_impersonateAccount", DEPLOYER)
            await chain.rpc(w3, "eth_sendTransaction", {"from": DEPLOYER, "to": TO, "value": "0x1"})
            taken = stack("deploy-examples", RFLOW_STACK_ANVIL_PORT=url.rsplit(":", 1)[1])
            assert taken.returncode == 0
            assert "cannot be deployed at" in taken.stderr and "scripts/stack reset" in taken.stderr
            emitted = cli(Settings.from_env(), "dev", "emit", RFLOW_RPC_URL_LOCAL=url)
            assert emitted.returncode == 1
            assert emitted.stderr.strip() == (
                f"error: no contract at {ADDRESS} on network local (chain 31337): "
                "`scripts/stack up` deploys the examples' PayoutDesk there on a fresh anvil"
            )
        finally:
            await w3.provider.disconnect()


async def test_an_emitted_event_starts_event_payout_which_reads_branches_and_pays(
    settings, worker_factory, w3
):
    # The stack's own chain has the contract (scripts/stack up put it there).
    assert len(await w3.eth.get_code(ADDRESS)) > 100
    worker = worker_factory(project_path=EXAMPLES, env={"RELAYER_DEV_KEY": RELAYER_DEV_KEY})
    await worker.wait_ready()
    asker = await requester(w3)
    before = await w3.eth.get_balance(TO)

    async def emit(amount: str) -> dict[str, Any]:
        done = await asyncio.to_thread(
            cli,
            settings,
            "dev",
            "emit",
            "--from",
            asker,
            "--to",
            TO,
            "--amount",
            amount,
            "--memo",
            "from the test",
            "--json",
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    first = await emit("0.004 ether")
    key = f"event:31337:{first['block']['hash']}:{first['log_index']}"
    [started] = first["runs"]
    assert started == {
        "workflow": "event-payout",
        "trigger_key": key,
        "run_id": run_id("event-payout", key),
    }
    run = await settled_run(settings, started["run_id"])
    assert (run["status"], run["source"], run["group_key"]) == ("succeeded", "event", asker)
    # What the run was given is the event, whole, as emit printed it.
    assert run["trigger"] == {k: v for k, v in first.items() if k != "runs"}
    assert set(run["trigger"]) == {
        "network", "chain_id", "contract", "address", "event", "args", "block", "tx", "log_index"
    }  # fmt: skip
    assert run["trigger"]["args"] == {
        "requester": asker,
        "to": TO,
        "amount": 4 * 10**15,
        "id": first["args"]["id"],
        "memo": "from the test",
    }
    steps = {step["path"]: step for step in run["steps"]}
    assert steps["requests-so-far"]["output"] == 1  # read from the chain
    assert steps["check"]["output"] == {"branch": "default", "goto": None}
    paid = steps["pay"]["output"]["tx"]
    assert (steps["pay"]["status"], paid["to"], paid["value"]) == ("succeeded", TO, 4 * 10**15)
    assert steps["refuse"]["status"] == "skipped"
    assert await w3.eth.get_balance(TO) == before + 4 * 10**15
    conn = await storage.connect(settings)
    async with conn:
        charges = await budgets.run_charges(conn, run["run_id"])
    assert [(c["budget"], c["amount"], c["status"]) for c in charges] == [
        ("demo-payouts", 4 * 10**15, "spent")
    ]

    # The same requester again, for more than a repeat request may have: the chain read
    # says it is the second, and the branch refuses it before anything is signed.
    second = await emit("0.02 ether")
    run = await settled_run(settings, second["runs"][0]["run_id"])
    steps = {step["path"]: step for step in run["steps"]}
    assert run["status"] == "succeeded"
    assert steps["requests-so-far"]["output"] == 2
    assert steps["check"]["output"]["goto"] == "refuse"
    assert (steps["pay"]["status"], steps["refuse"]["status"]) == ("skipped", "succeeded")
    assert await w3.eth.get_balance(TO) == before + 4 * 10**15
