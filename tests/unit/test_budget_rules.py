"""Which budgets a send charges and by how much (rflow.budgets), with no services."""

from __future__ import annotations

import textwrap
from datetime import timedelta

import pytest

from rflow.budgets import NATIVE, Charge, GasBreaker, SendShape, charges, in_scope, token_amount
from rflow.lang import Project, validate_text

ADDR = "0x000000000000000000000000000000000000dEaD"
DAY = timedelta(hours=24)
ETHER = 10**18

PROJECT = textwrap.dedent(
    """
    networks:
      ethereum: { chain_id: 1 }
      base: { chain_id: 8453 }
    contracts:
      USDC:
        address: { ethereum: "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48" }
        abi:
          - { type: function, name: transfer, inputs: [{ name: to, type: address }, { name: amount, type: uint256 }] }
      DAI:
        address: { ethereum: "0x6B175474E89094C44Da98b954EedeAC495271d0F" }
        abi:
          - { type: function, name: transfer, inputs: [{ name: to, type: address }, { name: amount, type: uint256 }] }
    relayers:
      treasury: { key_env: TREASURY_KEY, networks: [ethereum, base] }
      solver: { key_env: SOLVER_KEY, networks: [ethereum, base] }
    budgets:
      treasury-daily:
        window: 24h
        max_native_value: 10 ether
        max_token_value: { USDC: "1000000" }
        scope: { relayers: [treasury], networks: [ethereum] }
      tokens-only:
        window: 1h
        max_token_value: { USDC: "500", DAI: "700" }
      solver-gas:
        window: 24h
        max_gas_spend: 1 ether
        scope: { relayers: [solver] }
      unattached:
        window: 1h
        max_native_value: 1 wei
        max_gas_spend: 1 wei
    workflows:
      sweep:
        budgets: [treasury-daily, tokens-only, solver-gas]
        trigger: { manual: {} }
        steps:
          - { id: log, command: { name: log, args: { message: hi } } }
      free:
        trigger: { manual: {} }
        steps:
          - { id: log, command: { name: log, args: { message: hi } } }
    """
)


@pytest.fixture(scope="module")
def project() -> Project:
    report = validate_text(PROJECT, {"TREASURY_KEY": "k", "SOLVER_KEY": "k"}, "project.yaml")
    assert report.errors == (), [str(d) for d in report.errors]
    assert report.project is not None
    return report.project


def transfer(amount: object, *, contract: str = "USDC", **shape: object) -> SendShape:
    fields = {"network": "ethereum", "relayer": "treasury", "value": 0, **shape}
    return SendShape(
        contract=contract, function="transfer(address,uint256)", args=(ADDR, amount), **fields
    )


def test_native_value_first_then_one_token_amount(project):
    reservations, breakers = charges(project, "sweep", transfer(250_000, value=2 * ETHER))
    assert reservations == [
        Charge("treasury-daily", NATIVE, 2 * ETHER, 10 * ETHER, DAY),
        Charge("treasury-daily", "USDC", 250_000, 1_000_000, DAY),
        Charge("tokens-only", "USDC", 250_000, 500, timedelta(hours=1)),
    ]
    assert breakers == []


def test_a_plain_transfer_charges_native_value_only(project):
    shape = SendShape(network="ethereum", relayer="treasury", value=ETHER)
    reservations, _ = charges(project, "sweep", shape)
    # tokens-only declares no native cap: it has nothing to charge here.
    assert reservations == [Charge("treasury-daily", NATIVE, ETHER, 10 * ETHER, DAY)]


def test_a_zero_value_send_still_charges_its_native_cap(project):
    reservations, _ = charges(project, "sweep", transfer(5))
    assert reservations[0] == Charge("treasury-daily", NATIVE, 0, 10 * ETHER, DAY)


@pytest.mark.parametrize(
    ("function", "args", "amount"),
    [
        ("transfer(address,uint256)", (ADDR, 7), 7),
        ("transferFrom(address,address,uint256)", (ADDR, ADDR, 8), 8),
        ("approve(address,uint256)", (ADDR, 9), 9),
        ("transfer(address, uint256)", (ADDR, "0x10"), 16),
        ("transfer(address,uint256)", (ADDR, "12"), 12),
    ],
)
def test_erc20_transfer_transfer_from_and_approve_are_charged(function, args, amount):
    shape = SendShape("ethereum", "treasury", 0, contract="USDC", function=function, args=args)
    assert token_amount(shape) == amount


@pytest.mark.parametrize(
    "shape",
    [
        SendShape("ethereum", "treasury", 0, "USDC", "balanceOf(address)", (ADDR,)),
        SendShape("ethereum", "treasury", 0, "USDC", "mint(address,uint256)", (ADDR, 5)),
        SendShape("ethereum", "treasury", 0, "USDC", "transfer(address,uint256)", (ADDR,)),
        SendShape("ethereum", "treasury", 0, "USDC", "transfer(address,uint256)", (ADDR, True)),
        SendShape("ethereum", "treasury", 0, "USDC", "transfer(address,uint256)", (ADDR, -1)),
        SendShape("ethereum", "treasury", 0, "USDC", "transfer(address,uint256)", (ADDR, "x")),
        SendShape("ethereum", "treasury", 0, "USDC", "transfer(address,uint256)", (ADDR, 5), True),
        SendShape("ethereum", "treasury", 0, None, "transfer(address,uint256)", (ADDR, 5)),
        SendShape("ethereum", "treasury", 0, "USDC", None, (ADDR, 5)),
    ],
    ids=[
        "other-function",
        "mint",
        "missing-amount",
        "bool",
        "negative",
        "not-a-number",
        "multicall",
        "no-contract",
        "no-function",
    ],
)
def test_anything_else_has_no_token_amount(shape):
    assert token_amount(shape) is None


def test_multicall_and_other_functions_are_native_only(project):
    batch = transfer(5, value=3, multicall=True)
    other = SendShape("ethereum", "treasury", 3, "USDC", "mint(address,uint256)", (ADDR, 5))
    for shape in (batch, other):
        reservations, _ = charges(project, "sweep", shape)
        assert reservations == [Charge("treasury-daily", NATIVE, 3, 10 * ETHER, DAY)]


def test_a_token_is_charged_only_by_the_budget_naming_its_contract(project):
    reservations, _ = charges(project, "sweep", transfer(600, contract="DAI", value=1))
    # treasury-daily has no DAI cap: native only; tokens-only charges DAI.
    assert reservations == [
        Charge("treasury-daily", NATIVE, 1, 10 * ETHER, DAY),
        Charge("tokens-only", "DAI", 600, 700, timedelta(hours=1)),
    ]
    unknown = transfer(600, contract="WETH", value=1)
    assert charges(project, "sweep", unknown)[0] == [
        Charge("treasury-daily", NATIVE, 1, 10 * ETHER, DAY)
    ]


def test_scope_by_relayer_and_network(project):
    budget = project.budgets["treasury-daily"]
    assert in_scope(budget, "ethereum", "treasury")
    assert not in_scope(budget, "base", "treasury")
    assert not in_scope(budget, "ethereum", "solver")
    assert in_scope(project.budgets["tokens-only"], "base", "solver")

    on_base, _ = charges(project, "sweep", transfer(5, network="base", value=1))
    assert on_base == [Charge("tokens-only", "USDC", 5, 500, timedelta(hours=1))]
    from_solver, breakers = charges(project, "sweep", transfer(5, relayer="solver", value=1))
    assert from_solver == [Charge("tokens-only", "USDC", 5, 500, timedelta(hours=1))]
    assert [b.budget for b in breakers] == ["solver-gas"]


def test_max_gas_spend_yields_a_gas_breaker_with_its_scope(project):
    shape = SendShape(network="base", relayer="solver", value=0)
    reservations, breakers = charges(project, "sweep", shape)
    assert reservations == []
    assert breakers == [GasBreaker("solver-gas", ETHER, DAY, networks=None, relayers=("solver",))]
    # Out of the breaker's scope: no breaker.
    assert charges(project, "sweep", SendShape("base", "treasury", 0))[1] == []


def test_unattached_budgets_never_charge(project):
    for shape in (
        transfer(5, value=ETHER),
        SendShape("ethereum", "solver", ETHER),
        SendShape("base", "treasury", 1, multicall=True),
    ):
        assert charges(project, "free", shape) == ([], [])
        reservations, breakers = charges(project, "sweep", shape)
        assert "unattached" not in {c.budget for c in reservations}
        assert "unattached" not in {b.budget for b in breakers}
