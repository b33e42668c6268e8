"""Which budgets a send charges, and by how much: the rules of durable spend budgets.

Pure: given the project, the workflow and what a send does, the charges to reserve
before it broadcasts and the gas breakers to check. The reservation itself (under a
per-(budget, asset) lock, in the send's transaction) lives in ``rflow.storage.budgets``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

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
class SendShape:
    """What a send does, as far as budgets care.

    ``contract`` and ``function`` are set for a single contract call, ``None`` for a
    plain transfer to an address or a multicall batch.
    """

    network: str
    relayer: str
    value: int
    contract: str | None = None
    function: str | None = None
    args: Sequence[Any] = ()
    multicall: bool = False


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
