"""``classify(exc)``: the one place that maps library errors to failure kinds.

Errors are told apart by their type and by the status they carry (an HTTP status, a
JSON-RPC error code), never by searching their text: a message is for a person and
changes with a library's version, a node's client or a translation.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from rflow.failures import FailureKind, RflowError, StepError

DEFAULT_RETRYABLE_STATUS = (408, 429, 500, 502, 503, 504)
"""The HTTP statuses retried unless an ``http_call`` lists its own
``retryable_status_codes`` (seed 004's defaults)."""

RPC_LIMIT_EXCEEDED = -32005
"""EIP-1474's JSON-RPC error code for a request over the node's rate limit."""


def http_status_kind(status: int) -> FailureKind:
    """The kind of an unexpected HTTP status: 429 ``rate_limited``, 408 and 5xx
    ``data_unavailable`` (the service could not answer now), any other
    ``assert_failed`` (the request itself was refused)."""
    if status == 429:
        return FailureKind.RATE_LIMITED
    if status == 408 or 500 <= status <= 599:
        return FailureKind.DATA_UNAVAILABLE
    return FailureKind.ASSERT_FAILED


def http_failure(
    status: int,
    message: str,
    *,
    retryable: Collection[int] | None = None,
    retry_after: float | None = None,
) -> RflowError:
    """The error of an HTTP answer with unexpected ``status``.

    ``retryable`` (default :data:`DEFAULT_RETRYABLE_STATUS`) decides whether it may be
    retried: a listed status is retryable whatever its kind (a listed 409 is
    ``data_unavailable``), one not listed never is (a 503 left out keeps its kind and
    is marked ``non_retryable``). ``retry_after`` is what the answer's ``Retry-After``
    asked for, in seconds.
    """
    codes = DEFAULT_RETRYABLE_STATUS if retryable is None else retryable
    kind = http_status_kind(status)
    if status in codes:
        if kind == FailureKind.ASSERT_FAILED:
            kind = FailureKind.DATA_UNAVAILABLE
        return RflowError(kind, message, retry_after=retry_after)
    return RflowError(
        kind, message, retry_after=retry_after, non_retryable=kind != FailureKind.ASSERT_FAILED
    )


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """The wait a ``Retry-After`` header asks for, in seconds: delta-seconds or an
    HTTP-date (RFC 9110 section 10.2.3); ``None`` when absent or unreadable, ``0`` for a
    date in the past."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def classify(exc: BaseException) -> FailureKind:
    """The failure kind of ``exc`` raised while carrying out an effect."""
    return step_error(exc, str(exc)).kind


def step_error(exc: BaseException, message: str) -> StepError:
    """``exc`` as a step's failure, with ``message`` (already scrubbed of secrets), and the
    wait a failed HTTP answer asked for."""
    if isinstance(exc, RflowError):
        return exc.as_data().model_copy(update={"message": message})
    status = _http_status(exc)
    if status is not None:
        headers = getattr(exc, "headers", None)
        after = retry_after_seconds(_header(headers, "Retry-After"))
        return http_failure(status, message, retry_after=after).as_data()
    return StepError(kind=_kind(exc), message=message)


def _kind(exc: BaseException) -> FailureKind:
    if isinstance(exc, TimeoutError):  # asyncio's TimeoutError is this one
        return FailureKind.TIMEOUT
    types = _library_types()
    if isinstance(exc, types.reverted):
        return FailureKind.REVERTED
    if isinstance(exc, types.expired):
        return FailureKind.EXPIRED
    if isinstance(exc, types.rate_limited) or _rpc_code(exc) == RPC_LIMIT_EXCEEDED:
        return FailureKind.RATE_LIMITED
    if isinstance(exc, types.bad_input):
        return FailureKind.INVALID_INPUT
    if isinstance(exc, types.http):
        return FailureKind.DATA_UNAVAILABLE
    if isinstance(exc, types.node):
        return FailureKind.RPC_TIMEOUT
    if isinstance(exc, ConnectionError | OSError):
        return FailureKind.RPC_TIMEOUT
    if isinstance(exc, types.database):
        return FailureKind.DATA_UNAVAILABLE
    return FailureKind.ASSERT_FAILED


class _Types:
    """The library exception types, grouped by the kind they mean."""

    def __init__(self) -> None:
        import aiohttp
        import psycopg
        from web3 import exceptions as web3

        from rflow.storage import StorageError

        self.reverted = (web3.ContractLogicError,)
        self.expired = (web3.TimeExhausted,)
        self.rate_limited = (web3.TooManyRequests,)
        self.bad_input = (
            web3.Web3ValidationError,
            web3.Web3ValueError,
            web3.Web3TypeError,
            web3.BadFunctionCallOutput,
            web3.MismatchedABI,
        )
        self.http = (aiohttp.ClientError,)
        self.node = (web3.Web3Exception,)
        self.database = (psycopg.Error, StorageError)


@functools.cache
def _library_types() -> _Types:
    # Imported when first needed: the CLI and the engine never classify.
    return _Types()


def _http_status(exc: BaseException) -> int | None:
    import aiohttp

    if isinstance(exc, aiohttp.ClientResponseError) and 100 <= exc.status <= 599:
        return exc.status
    return None


def _rpc_code(exc: BaseException) -> int | None:
    response = getattr(exc, "rpc_response", None)
    error = response.get("error") if isinstance(response, Mapping) else None
    code = error.get("code") if isinstance(error, Mapping) else None
    return code if isinstance(code, int) else None


def _header(headers: object, name: str) -> str | None:
    if headers is None:
        return None
    getter = getattr(headers, "get", None)
    return getter(name) if getter is not None else None
