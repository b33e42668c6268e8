"""Strict token budgets on the real anvil, Postgres and Kafka: each send to the budget's
token whose amount cannot be decoded (a multicall calling it, a raw call to its address,
increaseAllowance, permit, a function the budget does not decode) fails
``budget_undecodable`` with nothing signed — no stored send, no nonce taken, no token
moved — while a transfer under the same budget is charged, and the same unknown function
under a budget that is not strict goes through (seed 001)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration import chain
from tests.integration.test_runs import fire, settled_run
from tests.integration.test_sends import (
    budget_usage,
    chain_resources,
    error_of,
    sends_of,
    token_for,
    transfers_from,
)

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

BUDGETS = """
budgets:
  strict-daily:
    window: 24h
    max_token_value: { Token: "1000000" }
    scope: { relayers: [payout] }
    strict: true
  lax-daily:
    window: 24h
    max_token_value: { Token: "1000000" }
    scope: { relayers: [payout] }
"""

SENDS = {
    "multicall": """
        send_transaction:
          network: local
          relayer: payout
          calls:
            - { contract: Token, function: "transfer(address,uint256)", args: ["@TO@", 5] }""",
    "raw": """
        send_transaction:
          network: local
          relayer: payout
          to: "@TOKEN@"
          function: "transfer(address,uint256)"
          args: ["@TO@", 5]""",
    "increase": """
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "increaseAllowance(address,uint256)"
          args: ["@TO@", 5]""",
    "permit": """
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "permit(address,address,uint256,uint256,uint8,bytes32,bytes32)"
          args: ["@TO@", "@TO@", 5, 99999999999, 27, "@R@", "@S@"]""",
    "mint": """
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "mint(address,uint256)"
          args: ["@TO@", 5]""",
    "transfer": """
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "transfer(address,uint256)"
          args: ["@TO@", 7]""",
}
REFUSED = ("multicall", "raw", "increase", "permit", "mint")


def permit_token_abi(folder: Path) -> Path:
    """TestToken's ABI with ``increaseAllowance`` and ``permit`` added, as the ABI of a
    token such as USDC has them (the test token lacks them: a signed call would revert)."""

    def function(name: str, *types: str) -> dict[str, Any]:
        inputs = [{"name": f"a{i}", "type": t} for i, t in enumerate(types)]
        return {"type": "function", "name": name, "inputs": inputs, "outputs": []}

    abi = [
        *chain.artifact("TestToken")["abi"],
        function("increaseAllowance", "address", "uint256"),
        function(
            "permit", "address", "address", "uint256", "uint256", "uint8", "bytes32", "bytes32"
        ),
    ]
    path = folder / "token-abi.json"
    path.write_text(json.dumps(abi))
    return path


def project_text(token: str, to: str, abi: Path) -> str:
    workflows = ["workflows:"]
    for budget, names in (("strict-daily", SENDS), ("lax-daily", ("mint",))):
        for name in names:
            prefix = "strict" if budget == "strict-daily" else "lax"
            workflows.append(
                f"""  {prefix}-{name}:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout] }}
    budgets: [{budget}]
    steps:
      - id: send{SENDS[name]}"""
            )
    resources = chain_resources(token).replace(str(chain.artifact_path("TestToken")), str(abi))
    text = resources + BUDGETS + "\n".join(workflows) + "\n"
    return (
        text.replace("@TOKEN@", token)
        .replace("@TO@", to)
        .replace("@R@", "0x" + "11" * 32)
        .replace("@S@", "0x" + "22" * 32)
    )


async def test_a_strict_budget_signs_nothing_it_cannot_charge(
    settings, worker_factory, tmp_path, w3
):
    relayer = await chain.funded_account(w3)
    token = await token_for(w3, relayer)
    nonce_before = await w3.eth.get_transaction_count(relayer.address)
    to = chain.Account.create().address
    project = tmp_path / "project.yaml"
    project.write_text(project_text(token, to, permit_token_abi(tmp_path)))
    worker = worker_factory(project_path=project, env={"PAYOUT_KEY": relayer.key.hex()})
    await worker.wait_ready()

    runs = {}
    for workflow in [*(f"strict-{n}" for n in SENDS), "lax-mint"]:
        runs[workflow] = await fire(settings, project, workflow, f"manual:{workflow}:1", {})
    settled = {w: await settled_run(settings, rid, timeout=90) for w, rid in runs.items()}

    for name in REFUSED:
        run = settled[f"strict-{name}"]
        assert run["status"] == "failed", (name, run)
        error = error_of(run, "send")
        assert error["kind"] == "budget_undecodable", (name, error)
        assert error["message"].startswith("budget strict-daily is strict and caps Token: ")
        assert error["message"].endswith("; nothing was signed")
        assert await sends_of(settings, runs[f"strict-{name}"]) == [], name
    increase = error_of(settled["strict-increase"], "send")["message"]
    assert "increaseAllowance(address,uint256) is not transfer" in increase
    raw = error_of(settled["strict-raw"], "send")["message"]
    assert "calls Token's address through to:" in raw

    # The decodable transfer is charged; the same mint under a lax budget goes through.
    assert settled["strict-transfer"]["status"] == "succeeded", settled["strict-transfer"]
    assert settled["lax-mint"]["status"] == "succeeded", settled["lax-mint"]
    usage = await budget_usage(settings, project)
    assert usage[("strict-daily", "Token")].consumed == 7
    assert usage[("lax-daily", "Token")].consumed == 0  # seed 001: a mint charges no token

    # Nothing else was signed: two transactions took two nonces, one Transfer left the
    # relayer, and only the lax mint's 5 reached the recipient besides the 7.
    assert await w3.eth.get_transaction_count(relayer.address, "pending") == nonce_before + 2
    assert len(await transfers_from(w3, token, relayer.address)) == 1
    contract = w3.eth.contract(address=token, abi=chain.artifact("TestToken")["abi"])
    assert await contract.functions.balanceOf(to).call() == 7 + 5
