"""``classify(exc)``: the one place that maps library errors to failure kinds."""

from __future__ import annotations

import asyncio

from rflow.failures import FailureKind, RflowError

RETRYABLE_HTTP = {408: FailureKind.DATA_UNAVAILABLE, 429: FailureKind.RATE_LIMITED}
for _status in (500, 502, 503, 504):
    RETRYABLE_HTTP[_status] = FailureKind.DATA_UNAVAILABLE


def http_status_kind(status: int) -> FailureKind:
    """The kind of an unexpected HTTP status: 408/429/5xx retryable, others not."""
    return RETRYABLE_HTTP.get(status, FailureKind.ASSERT_FAILED)


def classify(exc: BaseException) -> FailureKind:
    """The failure kind of ``exc`` raised while carrying out an effect."""
    if isinstance(exc, RflowError):
        return exc.kind
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return FailureKind.TIMEOUT
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    text = str(exc).lower()
    if module.startswith("aiohttp") or name in ("ClientConnectorError", "ServerDisconnectedError"):
        return FailureKind.DATA_UNAVAILABLE
    if module.startswith(("web3", "eth_")):
        if name == "ContractLogicError" or "execution reverted" in text:
            return FailureKind.REVERTED
        if "insufficient funds" in text:
            return FailureKind.INSUFFICIENT_FUNDS
        if "nonce too low" in text or "replacement transaction underpriced" in text:
            return FailureKind.NONCE_CONFLICT
        if name == "TimeExhausted":
            return FailureKind.EXPIRED
        if "429" in text or "rate limit" in text:
            return FailureKind.RATE_LIMITED
        return FailureKind.RPC_TIMEOUT
    if isinstance(exc, (ConnectionError, OSError)):
        return FailureKind.RPC_TIMEOUT
    if module.startswith("psycopg") or module.startswith("rflow.storage"):
        return FailureKind.DATA_UNAVAILABLE
    return FailureKind.ASSERT_FAILED
