"""Strict token budgets (rflow.budgets.check_decodable): a send to a token a strict budget
caps is refused when its amount cannot be decoded, for every shape a send can have, from
the rendered action (rflow.relayer.build.intent) on; a budget that is not strict lets the
same sends through, as seed 001 says."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from rflow.budgets import charges, check_decodable
from rflow.failures import FailureKind, RflowError
from rflow.lang import Project, validate_text
from rflow.relayer.build import intent

USDC = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
ALIAS_OF_USDC = USDC.lower()
DAI = "0x6B175474E89094C44Da98b954EedeAC495271d0F"
ADDR = "0x000000000000000000000000000000000000dEaD"

PROJECT = textwrap.dedent(
    f"""
    networks:
      ethereum: {{ chain_id: 1 }}
      base: {{ chain_id: 8453 }}
    contracts:
      USDC: {{ address: {{ ethereum: "{USDC}" }} }}
      UsdcProxy: {{ address: {{ ethereum: "{USDC}" }} }}
      DAI: {{ address: {{ ethereum: "{DAI}" }} }}
    relayers:
      treasury: {{ key_env: K, networks: [ethereum, base] }}
      solver: {{ key_env: K, networks: [ethereum] }}
    budgets:
      strict-usdc:
        window: 24h
        max_token_value: {{ USDC: "1000000" }}
        scope: {{ relayers: [treasury] }}
        strict: true
      lax-usdc:
        window: 24h
        max_token_value: {{ USDC: "1000000" }}
    workflows:
      strict:
        budgets: [strict-usdc]
        permissions: {{ relayers: [treasury, solver] }}
        trigger: {{ manual: {{}} }}
        steps: [{{ id: log, command: {{ name: log, args: {{ message: hi }} }} }}]
      lax:
        budgets: [lax-usdc]
        permissions: {{ relayers: [treasury, solver] }}
        trigger: {{ manual: {{}} }}
        steps: [{{ id: log, command: {{ name: log, args: {{ message: hi }} }} }}]
    """
)


@pytest.fixture(scope="module")
def project() -> Project:
    report = validate_text(PROJECT, {"K": "k"}, "project.yaml")
    assert report.errors == (), [str(d) for d in report.errors]
    assert report.project is not None
    return report.project


def send(**fields: Any) -> dict[str, Any]:
    return {"network": "ethereum", "relayer": "treasury", **fields}


def usdc(function: str, *args: Any) -> dict[str, Any]:
    return send(contract="USDC", function=function, args=list(args))


UNDECODABLE = {
    "multicall containing the token": send(
        calls=[
            {"to": ADDR, "value": 1},
            {"contract": "USDC", "function": "transfer(address,uint256)", "args": [ADDR, 5]},
        ]
    ),
    "multicall calling its address": send(
        calls=[{"to": ALIAS_OF_USDC, "function": "approve(address,uint256)", "args": [ADDR, 5]}]
    ),
    "raw call to its address": send(
        to=ALIAS_OF_USDC, function="transfer(address,uint256)", args=[ADDR, 5]
    ),
    "another contract at its address": send(
        contract="UsdcProxy", function="transfer(address,uint256)", args=[ADDR, 5]
    ),
    "increaseAllowance": usdc("increaseAllowance(address,uint256)", ADDR, 5),
    "permit": usdc(
        "permit(address,address,uint256,uint256,uint8,bytes32,bytes32)",
        ADDR,
        ADDR,
        5,
        2**40,
        27,
        "0x" + "11" * 32,
        "0x" + "22" * 32,
    ),
    "unknown function": usdc("mint(address,uint256)", ADDR, 5),
    "a function without arguments": usdc("pause()"),
}


@pytest.mark.parametrize("action", UNDECODABLE.values(), ids=UNDECODABLE.keys())
def test_a_strict_budget_refuses_a_send_whose_token_amount_cannot_be_decoded(project, action):
    shape = intent(project, action).shape
    with pytest.raises(RflowError) as refused:
        check_decodable(project, "strict", shape)
    assert refused.value.kind == FailureKind.BUDGET_UNDECODABLE
    assert refused.value.message.startswith("budget strict-usdc is strict and caps USDC: ")
    assert refused.value.message.endswith("; nothing was signed")
    # Seed 001's rule where the budget is not strict: through, native value charged only.
    check_decodable(project, "lax", shape)
    reservations, _ = charges(project, "lax", shape)
    assert [c.asset for c in reservations] == []


def test_each_refusal_says_why(project):
    def why(name: str) -> str:
        with pytest.raises(RflowError) as refused:
            check_decodable(project, "strict", intent(project, UNDECODABLE[name]).shape)
        return refused.value.message.split("caps USDC: ", 1)[1]

    assert why("multicall containing the token") == (
        "call 1 of the multicall calls USDC (transfer(address,uint256)), and the token "
        "amounts of a multicall are not decoded; nothing was signed"
    )
    assert why("raw call to its address") == (
        "the send calls USDC's address through to: (transfer(address,uint256)): only a call "
        "through contract: USDC is decoded; nothing was signed"
    )
    assert why("another contract at its address").startswith(
        "the send calls USDC's address through contract UsdcProxy"
    )
    assert why("increaseAllowance") == (
        "increaseAllowance(address,uint256) is not transfer, transferFrom or approve, so "
        "the amount of USDC it moves cannot be decoded; nothing was signed"
    )


DECODABLE = {
    "transfer": usdc("transfer(address,uint256)", ADDR, 5),
    "transferFrom": usdc("transferFrom(address,address,uint256)", ADDR, ADDR, 5),
    "approve": usdc("approve(address,uint256)", ADDR, 5),
    "value alone to its address": send(to=USDC, value=1),
    "another token": send(contract="DAI", function="mint(address,uint256)", args=[ADDR, 5]),
    "a multicall not calling it": send(
        calls=[{"contract": "DAI", "function": "transfer(address,uint256)", "args": [ADDR, 5]}]
    ),
    "a multicall sending value to it": send(calls=[{"to": USDC, "value": 1}]),
    "out of the budget's scope": send(
        relayer="solver", contract="USDC", function="mint(address,uint256)", args=[ADDR, 5]
    ),
    "a network where the token has no address": send(
        network="base", to=USDC, function="mint(address,uint256)", args=[ADDR, 5]
    ),
}


@pytest.mark.parametrize("action", DECODABLE.values(), ids=DECODABLE.keys())
def test_a_strict_budget_lets_decodable_sends_and_other_sends_through(project, action):
    check_decodable(project, "strict", intent(project, action).shape)


def test_a_decodable_send_under_a_strict_budget_charges_its_amount(project):
    shape = intent(project, usdc("approve(address,uint256)", ADDR, 5)).shape
    reservations, _ = charges(project, "strict", shape)
    assert [(c.budget, c.asset, c.amount) for c in reservations] == [("strict-usdc", "USDC", 5)]
