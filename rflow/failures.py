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
    REVERTED = "reverted"
    INSUFFICIENT_FUNDS = "insufficient_funds"
    RPC_TIMEOUT = "rpc_timeout"
    RATE_LIMITED = "rate_limited"
    NONCE_CONFLICT = "nonce_conflict"
    TIMEOUT = "timeout"
    EXPIRED = "expired"
    DROPPED = "dropped"
    DATA_UNAVAILABLE = "data_unavailable"
    ASSERT_FAILED = "assert_failed"
    GAS_CAP_EXCEEDED = "gas_cap_exceeded"
    BUDGET_EXCEEDED = "budget_exceeded"
    PERMISSION_DENIED = "permission_denied"
    INVALID_INPUT = "invalid_input"
    CANCELLED = "cancelled"
    REJECTED = "rejected"
    """A person (or an approval's timeout) decided no: a decision, not a fault."""


RETRYABLE: frozenset[FailureKind] = frozenset(
    {
        FailureKind.RPC_TIMEOUT,
        FailureKind.RATE_LIMITED,
        FailureKind.DATA_UNAVAILABLE,
        FailureKind.GAS_CAP_EXCEEDED,
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
