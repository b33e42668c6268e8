"""AWS Signature Version 4 as rflow signs its KMS requests: AWS's published test suite,
and a KMS request with a session token as botocore signs it."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from rflow.relayer.sigv4 import Credentials, signed_headers

SUITE = Credentials("AKIDEXAMPLE", SecretStr("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"))
SUITE_AT = datetime(2015, 8, 30, 12, 36, tzinfo=UTC)


@pytest.mark.parametrize(
    ("name", "method", "url", "signature"),
    [
        (
            "get-vanilla",
            "GET",
            "https://example.amazonaws.com/",
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        ),
        (
            "post-vanilla",
            "POST",
            "https://example.amazonaws.com/",
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
        ),
        (
            "get-vanilla-query-order-key-case",
            "GET",
            "https://example.amazonaws.com/?Param2=value2&Param1=value1",
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
        ),
    ],
)
def test_the_aws_test_suite(name, method, url, signature):
    headers = signed_headers(
        method, url, {}, b"", SUITE, region="us-east-1", service="service", now=SUITE_AT
    )
    assert headers["X-Amz-Date"] == "20150830T123600Z"
    assert headers["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        f"SignedHeaders=host;x-amz-date, Signature={signature}"
    ), name


def test_a_kms_request_with_a_session_token_is_signed_as_botocore_signs_it():
    # Recorded from botocore's SigV4Auth for the same request, credentials and time.
    body = b'{"KeyId": "alias/x", "Message": "AAAA", "MessageType": "DIGEST"}'
    credentials = Credentials("AKIDEXAMPLE", SecretStr("secretkey"), SecretStr("tok+en/=="))
    headers = signed_headers(
        "POST",
        "https://kms.eu-west-1.amazonaws.com/",
        {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "TrentService.Sign"},
        body,
        credentials,
        region="eu-west-1",
        service="kms",
        now=datetime(2026, 12, 5, 14, 22, 10, tzinfo=UTC),
    )
    assert headers["X-Amz-Security-Token"] == "tok+en/=="
    assert headers["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261205/eu-west-1/kms/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target, "
        "Signature=9976a4991a52c3c1ed913556724bcda1c7a3f228763a822f56cb39e33999ca7e"
    )


def test_credentials_never_show_or_give_away_their_secret():
    assert "wJalrXUtnFEMI" not in repr(SUITE) and "wJalrXUtnFEMI" not in str(SUITE)
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(SUITE)
