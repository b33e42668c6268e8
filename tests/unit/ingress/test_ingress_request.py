"""Helpers every HTTP ingress shares: header filtering, size limits, JSON bodies."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rflow.codecs import TriggerRecord
from rflow.ingress.request import (
    RECORD_LIMIT,
    BodyError,
    json_document,
    parse_json,
    payload_headers,
    record_refusal,
    size_refusal,
)


def test_payload_headers_drop_credentials_and_lower_names():
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": "abc",
        "Authorization": "Bearer t",
        "Proxy-Authorization": "Basic x",
        "Cookie": "session=1",
        "X-API-Key": "k",
        "X-Hub-Signature": "sha1=..",
        "X-Hub-Signature-256": "sha256=..",
        "X-Hub-Signature-512": "sha512=..",
        "X-Shopify-Hmac-Sha256": "abc",
        "X-Auth-Token": "t",
        "X-Webhook-Secret": "s",
    }
    kept = payload_headers(headers, drop=["X-Shopify-Hmac-Sha256"])
    assert kept == {
        "content-type": "application/json",
        "x-github-event": "push",
        "x-github-delivery": "abc",
    }


def test_size_limit_on_declared_and_actual_length():
    assert size_refusal({}, b"x" * 10, 10) is None
    assert size_refusal({"content-length": "10"}, b"x" * 10, 10) is None
    declared = size_refusal({"content-length": "11"}, b"", 10)
    assert (declared.status, declared.body) == (
        413,
        {"error": "request body of 11 bytes is over the 10-byte limit"},
    )
    actual = size_refusal({}, b"x" * 11, 10)
    assert (actual.status, actual.body) == (
        413,
        {"error": "request body is over the 10-byte limit"},
    )


def test_json_keeps_big_integers_exact():
    assert parse_json(b'{"amount_wei": 123456789012345678901234567890}') == {
        "amount_wei": 123456789012345678901234567890
    }


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "body is not JSON: the body is empty"),
        (b"  \n", "body is not JSON: the body is empty"),
        (b"{", "body is not JSON: Expecting property name enclosed in double quotes"),
        (b"[NaN]", "body is not JSON: NaN is not a JSON value"),
        (b"[1e999]", "body is not JSON: number 1e999 is out of range"),
        (b"\xff\xfe{", "body is not JSON"),
        (b"[" * 100_000, "body is not JSON"),
    ],
)
def test_bodies_that_are_not_json(body, reason):
    with pytest.raises(BodyError) as err:
        json_document(body)
    assert str(err.value).startswith(reason)


@pytest.mark.parametrize(
    ("body", "kind"),
    [(b'"x"', "a string"), (b"1", "a number"), (b"null", "null"), (b"true", "a boolean")],
)
def test_a_webhook_body_is_an_object_or_array(body, kind):
    with pytest.raises(BodyError) as err:
        json_document(body)
    assert str(err.value) == f"body must be a JSON object or array, got {kind}"
    assert json_document(b"[1]") == [1]


def test_record_size_limit():
    def record(size: int) -> TriggerRecord:
        return TriggerRecord(
            workflow="w",
            trigger_key="k",
            source="webhook",
            payload={"x": "a" * size},
            received_at=datetime(2026, 1, 1, tzinfo=UTC),
        )

    assert record_refusal(record(1000)) is None
    refusal = record_refusal(record(RECORD_LIMIT))
    assert refusal.status == 413
    assert "record limit" in refusal.body["error"]
