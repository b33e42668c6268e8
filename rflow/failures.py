"""The failure taxonomy: every step failure carries exactly one kind.

The first twelve kinds are the seeds' taxonomy; the rest name failures the seeds
describe in prose (a budget cap, a permission, a cancelled run, an expression that
could not be evaluated at run time). Two kinds are endings rather than faults: a run
``cancelled`` by an operator or a newer run, and an approval ``rejected`` by a person
(or by its timeout). Only :data:`RETRYABLE` kinds are ever retried.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class FailureKind(StrEnum):
    """Why a step failed."""

    SIMULATION_FAILED = "simulation_failed"
    """The relayer's simulation of a send (``eth_call``) reverted, or the node refused the
    transaction outright; nothing was signed into a block. The message has the revert reason."""
    REVERTED = "reverted"
    """The transaction was mined and reverted (status 0): its gas is paid, its value and
    budget reservation are released."""
    INSUFFICIENT_FUNDS = "insufficient_funds"
    """The relayer's account cannot pay the value plus gas."""
    RPC_TIMEOUT = "rpc_timeout"
    """The chain's JSON-RPC endpoint did not answer, or answered with an error that is not
    about the request (a connection refused, a node error)."""
    RATE_LIMITED = "rate_limited"
    """An endpoint answered 429 (an HTTP call, or an RPC node's rate limit)."""
    NONCE_CONFLICT = "nonce_conflict"
    """A node refused a transaction for its nonce (``nonce too low``, an underpriced
    replacement) in a way the relayer could not settle itself."""
    TIMEOUT = "timeout"
    """A step's ``timeout`` passed: an action that ran too long, an HTTP call without an
    answer within its ``timeout``, a ``wait_for`` without a decision (``on_timeout:
    fail``), a command killed, or a send cancelled at its deadline."""
    EXPIRED = "expired"
    """A transaction stayed unmined for ``RFLOW_SEND_EXPIRE_AFTER`` seconds: its nonce was
    taken by a zero-value self-transfer and its reservation released."""
    DROPPED = "dropped"
    """The node no longer knows a pending transaction (and none of its replacements was
    mined): its nonce was taken by a zero-value self-transfer and its reservation released."""
    DATA_UNAVAILABLE = "data_unavailable"
    """What a step reads was not there to read: an HTTP 408 or 5xx answer, a connection
    that failed, a database that did not answer."""
    ASSERT_FAILED = "assert_failed"
    """A check did not hold: the ``assert`` command, the ``fail`` command, an HTTP status
    outside ``expect_status``, a command that exited non-zero, or an unexpected error."""
    GAS_CAP_EXCEEDED = "gas_cap_exceeded"
    """The next block's base fee plus the tip is above the step's ``max_fee_per_gas``. A
    send no longer fails with it: it waits, unsigned, until the base fee allows (see
    docs/relayer.md); runs journaled before that may still show it."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """A send would take an attached budget past a cap in its window (native value, a
    token amount, or gas under ``max_gas_spend``); nothing was signed."""
    BUDGET_UNDECODABLE = "budget_undecodable"
    """A send to a token that an attached ``strict`` budget caps does not say how much of
    it moves (a multicall calling it, a call to its address through ``to``,
    ``increaseAllowance``, ``permit``, any function but ``transfer``, ``transferFrom`` and
    ``approve``); nothing was signed. The message names the budget and the reason."""
    PERMISSION_DENIED = "permission_denied"
    """The workflow's ``permissions`` do not allow it: a relayer it may not use, a value
    over ``max_value_per_tx``, a host not in ``http_hosts``, or a worker that could not load
    the newest deployment."""
    INVALID_INPUT = "invalid_input"
    """A step's input cannot be used: an expression that fails at run time, a value of the
    wrong type or out of range, an environment variable not set on the worker."""
    SIGNER_UNAVAILABLE = "signer_unavailable"
    """The relayer's signer did not answer: its HSM (a PKCS#11 token) or KMS could not be
    reached, timed out, or was throttled. Nothing was signed or broadcast, and no nonce was
    taken."""
    CANCELLED = "cancelled"
    """The run was stopped: ``rflow runs cancel``, a newer run of its concurrency group
    (``cancel_in_progress``, ``replace``), ``rflow sends cancel``, or a retracted trigger.
    An ending, not a fault."""
    REJECTED = "rejected"
    """A person (or an approval's timeout) decided no: a decision, not a fault."""
    COMPENSATION_FAILED = "compensation_failed"
    """A step of a ``compensate`` list failed for good while a ``try`` block undid what it
    had done: the message names the compensation step and the step it undid (the other
    compensations still ran). Not caught by the block's own ``catch``."""


RETRYABLE: frozenset[FailureKind] = frozenset(
    {
        FailureKind.RPC_TIMEOUT,
        FailureKind.RATE_LIMITED,
        FailureKind.DATA_UNAVAILABLE,
        FailureKind.GAS_CAP_EXCEEDED,
        FailureKind.SIGNER_UNAVAILABLE,
    }
)
"""Pre-queue and off-chain failures: the only kinds ``retry`` applies to."""


class StepError(BaseModel):
    """A failure as data: its kind and a message for a person; and what the failing
    service said about trying again, when it said something."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: FailureKind
    message: str
    retry_after: float | None = Field(None, ge=0)
    """Seconds the service asked to wait before trying again (an HTTP ``Retry-After``)."""
    non_retryable: bool = False
    """Never retried, whatever its kind: an HTTP status outside the step's
    ``retryable_status_codes``."""

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Journals, step logs and retry_if see {kind, message} as before, plus what the
        # service said when it said something.
        data = handler(self)
        if data.get("retry_after") is None:
            data.pop("retry_after", None)
        if not data.get("non_retryable"):
            data.pop("non_retryable", None)
        return data

    def view(self) -> dict[str, Any]:
        """What expressions see as ``error``: every field, ``retry_after`` ``None`` and
        ``non_retryable`` false when the service said nothing."""
        return {
            "kind": str(self.kind),
            "message": self.message,
            "retry_after": self.retry_after,
            "non_retryable": self.non_retryable,
        }

    @property
    def retryable(self) -> bool:
        """Whether a retry policy may retry it (its kind is retryable, and nothing said no)."""
        return self.kind in RETRYABLE and not self.non_retryable


class RflowError(Exception):
    """The one error type that carries a failure kind across layers."""

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        *,
        retry_after: float | None = None,
        non_retryable: bool = False,
    ) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.retry_after = retry_after
        self.non_retryable = non_retryable

    def as_data(self) -> StepError:
        return StepError(
            kind=self.kind,
            message=self.message,
            retry_after=self.retry_after,
            non_retryable=self.non_retryable,
        )
