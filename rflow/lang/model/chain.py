"""Chain actions: send a transaction, read a view function, query JSON-RPC."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from rflow.lang.abi import SignatureError, parse_signature
from rflow.lang.model.common import (
    AddressOrExpr,
    AmountOrExpr,
    IntOrExpr,
    Model,
    NameRef,
    describe,
    exactly_one,
    has_expression,
    invalid,
)


def _signature(value: str) -> str:
    try:
        parse_signature(value)
    except SignatureError as exc:
        raise invalid(str(exc)) from None
    return value


FunctionSignature = Annotated[
    str,
    AfterValidator(_signature),
    WithJsonSchema(
        {
            "type": "string",
            "description": "name(types) or name(types)(return types)",
            "examples": ["transfer(address,uint256)", "balanceOf(address)(uint256)"],
        }
    ),
]


def _args(value: Any) -> Any:
    if isinstance(value, list) or has_expression(value):
        return value
    raise invalid(f"expected a list of arguments or an expression, got {describe(value)}")


Args = Annotated[
    list[Any] | str,
    BeforeValidator(_args),
    WithJsonSchema({"anyOf": [{"type": "array"}, {"type": "string", "pattern": r"\$\{\{"}]}),
]
"""Call arguments: a list (items may be expressions), or one expression giving the list."""


class Call(Model):
    """One call in a multicall batch."""

    contract: NameRef | None = None
    """A contract declared under `contracts`."""
    to: AddressOrExpr | None = None
    """A raw address, instead of `contract`."""
    function: FunctionSignature | None = None
    """The function signature, e.g. transfer(address,uint256)."""
    args: Args = []
    """The call's arguments: a list (items may be expressions) or one expression giving it."""
    value: AmountOrExpr = 0
    """Native value sent with this call."""

    @model_validator(mode="after")
    def _target(self) -> Call:
        exactly_one(self, ("contract", "to"), "a call")
        if self.function is None and (self.contract is not None or self.args):
            raise invalid(
                "a contract call needs a function signature, e.g. transfer(address,uint256)"
            )
        return self


class SendTransaction(Model):
    """Send a transaction through a relayer (budget-checked, exactly once)."""

    network: NameRef
    """A network declared under `networks`, or an expression."""
    relayer: NameRef
    """A relayer declared under `relayers` and listed in the workflow's permissions."""
    contract: NameRef | None = None
    """A contract declared under `contracts` (give this, `to` or `calls`)."""
    to: AddressOrExpr | None = None
    """A raw address (or an expression): a plain transfer, or a call to an undeclared contract."""
    calls: list[Call] | None = Field(None, min_length=1)
    """A multicall batch instead of a single call."""
    function: FunctionSignature | None = None
    """The function signature, e.g. transfer(address,uint256)."""
    args: Args = []
    """The call's arguments: a list (items may be expressions) or one expression giving it."""
    value: AmountOrExpr = 0
    """Native value to send: 1 ether, 10 gwei, wei, or an expression."""
    gas_limit: IntOrExpr | None = None
    """Gas limit; default: the node's estimate."""
    max_fee_per_gas: AmountOrExpr | None = None
    """The most the send may pay per gas (an amount such as 50 gwei): a send whose next
    block's base fee plus tip is above it is not signed yet and waits, with no nonce taken,
    until the base fee allows; fee bumps stop there, and a transaction at it waits for the
    base fee to fall (unset: no such check, and bumps stop at four times the first fee)."""
    max_priority_fee_per_gas: AmountOrExpr | None = None
    """The tip per gas; default: what recent blocks paid."""

    @model_validator(mode="after")
    def _target(self) -> SendTransaction:
        exactly_one(self, ("contract", "to", "calls"), "send_transaction")
        if self.calls is not None:
            extra = [f for f in ("function", "value") if f in self.model_fields_set]
            if self.args:
                extra.append("args")
            if extra:
                raise invalid(
                    f"a multicall sets {', '.join(extra)} on each call, not on send_transaction"
                )
        elif self.function is None and (self.contract is not None or self.args):
            raise invalid(
                "a contract call needs a function signature, e.g. transfer(address,uint256)"
            )
        return self


_BLOCK_TAGS = ("latest", "safe", "finalized", "pending", "earliest")


def _block(value: Any) -> Any:
    if value in _BLOCK_TAGS or has_expression(value):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise invalid(
        f"expected a block number, one of {', '.join(_BLOCK_TAGS)}, or an expression, got {value!r}"
    )


Block = Annotated[
    int | str,
    BeforeValidator(_block),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"enum": list(_BLOCK_TAGS)},
                {"type": "string", "pattern": r"\$\{\{"},
            ]
        }
    ),
]


class Read(Model):
    """Call a view function (eth_call); the decoded result is the step's output."""

    network: NameRef
    """A network declared under `networks`, or an expression."""
    contract: NameRef | None = None
    """A contract declared under `contracts` (give this or `to`)."""
    to: AddressOrExpr | None = None
    """A raw address (or an expression), instead of `contract`."""
    function: FunctionSignature
    """Signature with return types, e.g. balanceOf(address)(uint256)."""
    args: Args = []
    """The call's arguments: a list (items may be expressions) or one expression giving it."""
    block: Block = "latest"
    """The block to read at: a number, latest, safe, finalized, pending, earliest, or an
    expression."""

    @model_validator(mode="after")
    def _target(self) -> Read:
        exactly_one(self, ("contract", "to"), "read")
        return self


_QUERY_METHOD = re.compile(r"^(eth|net|web3)_[A-Za-z0-9]+$")
_WRITE_PREFIXES = ("eth_send", "eth_sign", "eth_submit")


class Query(Model):
    """A read-only JSON-RPC call such as eth_getBalance or eth_blockNumber."""

    network: NameRef
    """A network declared under `networks`, or an expression."""
    method: str
    """A read-only JSON-RPC method (eth_*, net_*, web3_*; eth_send* and eth_sign* are
    refused)."""
    params: Args = []
    """The method's parameters: a list (items may be expressions) or one expression."""

    @field_validator("method")
    @classmethod
    def _read_only(cls, value: str) -> str:
        if not _QUERY_METHOD.match(value):
            raise invalid(f"expected a JSON-RPC method such as eth_getBalance, got {value!r}")
        if value.startswith(_WRITE_PREFIXES):
            raise invalid(f"{value} is not a read-only query: use send_transaction to send")
        return value
