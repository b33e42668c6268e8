"""Failures are classified by exception type and status, never by searching text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import aiohttp
import pytest
from multidict import CIMultiDict, CIMultiDictProxy
from web3.exceptions import ContractLogicError, TimeExhausted, TooManyRequests, Web3RPCError
from yarl import URL

from rflow.classify import (
    DEFAULT_RETRYABLE_STATUS,
    classify,
    http_failure,
    retry_after_seconds,
    step_error,
)
from rflow.failures import FailureKind, RflowError


def response_error(status: int, headers: dict[str, str] | None = None, message: str = ""):
    url = URL("http://api.test/")
    info = aiohttp.RequestInfo(url, "GET", CIMultiDictProxy(CIMultiDict()), url)
    return aiohttp.ClientResponseError(
        info, (), status=status, message=message, headers=CIMultiDict(headers or {})
    )


def test_http_statuses_by_the_default_list():
    assert DEFAULT_RETRYABLE_STATUS == (408, 429, 500, 502, 503, 504)
    for status, kind in (
        (429, "rate_limited"),
        (503, "data_unavailable"),
        (408, "data_unavailable"),
    ):
        error = http_failure(status, "x").as_data()
        assert (error.kind, error.retryable) == (kind, True), status
    refused = http_failure(404, "x").as_data()
    assert (refused.kind, refused.retryable) == ("assert_failed", False)


def test_a_step_list_decides_what_is_retried():
    codes = [409, 503]
    assert http_failure(409, "x", retryable=codes).as_data().retryable
    left_out = http_failure(429, "x", retryable=codes).as_data()
    # Its kind stays what the status means; it is marked never to be retried.
    assert (left_out.kind, left_out.non_retryable, left_out.retryable) == (
        "rate_limited",
        True,
        False,
    )


def test_retry_after_in_seconds_or_as_a_date():
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert retry_after_seconds("7", now) == 7.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=90), usegmt=True), now) == 90
    assert retry_after_seconds(format_datetime(now - timedelta(hours=1), usegmt=True), now) == 0
    assert retry_after_seconds("soon", now) is None
    assert retry_after_seconds(None, now) is None


def test_an_http_error_is_told_apart_by_its_status_not_its_text():
    # The text says 429 and "rate limit"; the status says the service is down.
    error = step_error(response_error(503, {"Retry-After": "3"}, "429 rate limit"), "m")
    assert (error.kind, error.retry_after) == ("data_unavailable", 3.0)
    assert classify(response_error(429)) == FailureKind.RATE_LIMITED
    assert classify(response_error(401)) == FailureKind.ASSERT_FAILED


def test_node_errors_by_type_and_json_rpc_code():
    limited = Web3RPCError("busy", rpc_response={"error": {"code": -32005, "message": "x"}})
    assert classify(limited) == FailureKind.RATE_LIMITED
    other = Web3RPCError("429 rate limit", rpc_response={"error": {"code": -32000}})
    assert classify(other) == FailureKind.RPC_TIMEOUT  # its text is not read
    assert classify(TooManyRequests("slow down")) == FailureKind.RATE_LIMITED
    assert classify(ContractLogicError("execution reverted")) == FailureKind.REVERTED
    assert classify(TimeExhausted("gone")) == FailureKind.EXPIRED


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (TimeoutError(), FailureKind.TIMEOUT),
        (aiohttp.ClientConnectionError("refused"), FailureKind.DATA_UNAVAILABLE),
        (ConnectionResetError(), FailureKind.RPC_TIMEOUT),
        (ValueError("429 execution reverted insufficient funds"), FailureKind.ASSERT_FAILED),
        (RflowError(FailureKind.BUDGET_EXCEEDED, "cap"), FailureKind.BUDGET_EXCEEDED),
    ],
)
def test_other_errors_by_type(exc, kind):
    assert classify(exc) == kind
