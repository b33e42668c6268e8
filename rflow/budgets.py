"""Which budgets a send charges, and by how much: the rules of durable spend budgets.

Pure: given the project, the workflow and what a send does, the charges to reserve
before it broadcasts and the gas breakers to check. The reservation itself (under a
per-(budget, asset) lock, in the send's transaction) lives in ``rflow.storage.budgets``.

The rules, one function each:

- :func:`in_scope` — a budget applies to a send from its scope's relayers, on its
  networks.
- :func:`token_amount` — an ERC20 amount is decoded only from a single unambiguous
  ``transfer`` / ``transferFrom`` / ``approve`` (seed 001).
- :func:`charges` — native value first, then one token amount, against each attached
  budget in scope; and the gas breakers.
- :func:`check_decodable` — a ``strict`` budget refuses a send to a token it caps whose
  amount :func:`token_amount` cannot decode, before anything is signed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from rflow.failures import FailureKind, RflowError

if TYPE_CHECKING:
    from rflow.lang.model import Budget, Project


NATIVE = "native"
"""The asset name of native value (wei) in reservations and ``rflow budgets ls``."""

_TOKEN_AMOUNT_ARG = {
    "transfer(address,uint256)": 1,
    "transferFrom(address,address,uint256)": 2,
    "approve(address,uint256)": 1,
}
"""The unambiguous ERC20 calls a token budget charges, and which argument is the amount."""


@dataclass(frozen=True, slots=True)
class Charge:
    """Reserve ``amount`` of ``asset`` against ``budget`` (cap ``cap`` in ``window``)."""

    budget: str
    asset: str
    amount: int
    cap: int
    window: timedelta


@dataclass(frozen=True, slots=True)
class GasBreaker:
    """``max_gas_spend`` of ``budget``: recorded gas in scope and window must stay below."""

    budget: str
    cap: int
    window: timedelta
    networks: tuple[str, ...] | None
    relayers: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class CallShape:
    """One call of a multicall batch: the address it calls, the contract it names (if
    any) and its function (``None`` for value alone)."""

    to: str
    contract: str | None = None
    function: str | None = None


@dataclass(frozen=True, slots=True)
class SendShape:
    """What a send does, as far as budgets care.

    ``contract`` and ``function`` are set for a single contract call, ``None`` for a
    plain transfer to an address or a multicall batch. ``to`` is the address a single
    call goes to, ``calls`` the calls of a multicall batch.
    """

    network: str
    relayer: str
    value: int
    contract: str | None = None
    function: str | None = None
    args: Sequence[Any] = ()
    multicall: bool = False
    to: str | None = None
    calls: tuple[CallShape, ...] = ()


def in_scope(budget: Budget, network: str, relayer: str) -> bool:
    """Whether a send from ``relayer`` on ``network`` charges ``budget``."""
    scope = budget.scope
    if scope.relayers is not None and relayer not in scope.relayers:
        return False
    return scope.networks is None or network in scope.networks


def token_amount(shape: SendShape) -> int | None:
    """The ERC20 amount of an unambiguous single-call transfer, transferFrom or approve."""
    if shape.multicall or shape.contract is None or shape.function is None:
        return None
    index = _TOKEN_AMOUNT_ARG.get(shape.function.replace(" ", ""))
    if index is None or len(shape.args) <= index:
        return None
    amount = shape.args[index]
    if isinstance(amount, bool):
        return None
    try:
        value = int(amount, 0) if isinstance(amount, str) else int(amount)
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def charges(
    project: Project, workflow: str, shape: SendShape
) -> tuple[list[Charge], list[GasBreaker]]:
    """The reservations ``shape`` makes and the gas breakers it must pass, in the order
    the workflow attaches its budgets: native value first, then one token amount."""
    attached = project.workflows[workflow].budgets
    reservations: list[Charge] = []
    breakers: list[GasBreaker] = []
    tokens = token_amount(shape)
    for name in attached:
        budget = project.budgets[name]
        if not in_scope(budget, shape.network, shape.relayer):
            continue
        window = budget.window
        if budget.max_native_value is not None:
            reservations.append(Charge(name, NATIVE, shape.value, budget.max_native_value, window))
        if tokens is not None and shape.contract in budget.max_token_value:
            cap = budget.max_token_value[shape.contract]
            reservations.append(Charge(name, shape.contract, tokens, cap, window))
        if budget.max_gas_spend is not None:
            scope = budget.scope
            breakers.append(
                GasBreaker(
                    name,
                    budget.max_gas_spend,
                    window,
                    tuple(scope.networks) if scope.networks is not None else None,
                    tuple(scope.relayers) if scope.relayers is not None else None,
                )
            )
    return reservations, breakers


def check_decodable(project: Project, workflow: str, shape: SendShape) -> None:
    """Raise ``budget_undecodable`` when an attached ``strict`` budget in scope caps a
    token that ``shape`` calls without an amount :func:`token_amount` can decode: a
    multicall with a call to the token's address, a call to that address other than
    through the contract named like the token (``to:``, or another contract entry at the
    same address), or any function but ``transfer``, ``transferFrom`` and ``approve``
    (``increaseAllowance``, ``permit``...). A call without data (value alone) moves no
    token and passes. A budget that is not strict lets all of these through, charging
    their native value only (seed 001)."""
    for name in project.workflows[workflow].budgets:
        budget = project.budgets.get(name)
        if budget is None or not budget.strict:
            continue
        if not in_scope(budget, shape.network, shape.relayer):
            continue
        for symbol in budget.max_token_value:
            contract = project.contracts.get(symbol)
            address = contract.address.get(shape.network) if contract is not None else None
            if address is None:
                continue
            why = _undecodable(shape, symbol, address.lower())
            if why is not None:
                raise RflowError(
                    FailureKind.BUDGET_UNDECODABLE,
                    f"budget {name} is strict and caps {symbol}: {why}; nothing was signed",
                )


def _undecodable(shape: SendShape, symbol: str, token: str) -> str | None:
    """Why ``shape``'s amount of token ``symbol`` (at address ``token``) cannot be
    decoded, or ``None`` when it can (or ``shape`` does not call the token)."""
    if shape.multicall:
        for index, call in enumerate(shape.calls):
            if call.function is not None and call.to.lower() == token:
                return (
                    f"call {index} of the multicall calls {symbol} ({call.function}), and the "
                    "token amounts of a multicall are not decoded"
                )
        return None
    if shape.function is None or shape.to is None or shape.to.lower() != token:
        return None
    if shape.contract != symbol:
        via = "to:" if shape.contract is None else f"contract {shape.contract}"
        return (
            f"the send calls {symbol}'s address through {via} ({shape.function}): only a call "
            f"through contract: {symbol} is decoded"
        )
    if shape.function.replace(" ", "") not in _TOKEN_AMOUNT_ARG:
        return (
            f"{shape.function} is not transfer, transferFrom or approve, so the amount of "
            f"{symbol} it moves cannot be decoded"
        )
    if token_amount(shape) is None:
        return f"the amount argument of {shape.function} is not a whole number of {symbol}"
    return None
