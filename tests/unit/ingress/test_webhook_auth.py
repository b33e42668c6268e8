"""Webhook signatures and API keys: GitHub's vectors, constant-time checks, exact reasons."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from rflow.ingress.auth import authenticate, sign, signature_matches, well_formed
from rflow.lang.model.triggers import AuthApiKey, AuthHmac, AuthNone

# The example in GitHub's "Validating webhook deliveries" documentation.
GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_PAYLOAD = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_github_documentation_vector():
    assert sign(GITHUB_SECRET, GITHUB_PAYLOAD) == GITHUB_SIGNATURE
    assert signature_matches(GITHUB_SECRET, GITHUB_PAYLOAD, GITHUB_SIGNATURE, "sha256")


@pytest.mark.parametrize("algorithm", ["sha1", "sha256", "sha512"])
def test_each_algorithm_signs_like_the_standard_library(algorithm):
    body = b'{"type": "push"}'
    digest = hmac.new(b"s3cret", body, getattr(hashlib, algorithm)).hexdigest()
    assert sign("s3cret", body, algorithm) == f"{algorithm}={digest}"
    assert signature_matches("s3cret", body, f"{algorithm}={digest}", algorithm)
    assert not signature_matches("other", body, f"{algorithm}={digest}", algorithm)
    assert not signature_matches("s3cret", body + b" ", f"{algorithm}={digest}", algorithm)


def test_prefix_and_hex_case_and_whitespace_are_tolerated():
    upper = "SHA256=" + GITHUB_SIGNATURE.split("=", 1)[1].upper()
    assert signature_matches(GITHUB_SECRET, GITHUB_PAYLOAD, f"  {upper} ", "sha256")


def test_a_signature_for_another_algorithm_does_not_match():
    sha1 = sign(GITHUB_SECRET, GITHUB_PAYLOAD, "sha1")
    assert not signature_matches(GITHUB_SECRET, GITHUB_PAYLOAD, sha1, "sha256")
    assert not well_formed(sha1, "sha256")


def test_comparison_is_constant_time(monkeypatch):
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert signature_matches(GITHUB_SECRET, GITHUB_PAYLOAD, GITHUB_SIGNATURE, "sha256")
    assert (
        authenticate(
            AuthApiKey(type="api_key", secret_env="KEY"),
            {"x-api-key": "k"},
            b"",
            {"KEY": "k"},
            workflow="w",
        )
        is None
    )
    assert len(calls) == 2


@pytest.mark.parametrize(
    ("signature", "ok"),
    [
        (GITHUB_SIGNATURE, True),
        ("sha256=" + "0" * 64, True),
        ("sha256=" + "0" * 63, False),
        ("sha256=" + "g" * 64, False),
        ("0" * 64, False),
        ("sha1=" + "0" * 64, False),
    ],
)
def test_well_formed(signature, ok):
    assert well_formed(signature, "sha256") is ok


HMAC = AuthHmac(type="hmac", secret_env="HOOK_SECRET")
ENV = {"HOOK_SECRET": GITHUB_SECRET}


def reason(reply):
    return (reply.status, reply.body["error"]) if reply is not None else None


def test_hmac_accepts_a_valid_signature():
    headers = {"x-hub-signature-256": GITHUB_SIGNATURE}
    assert authenticate(HMAC, headers, GITHUB_PAYLOAD, ENV, workflow="w") is None


def test_hmac_refusals_say_why():
    def check(headers, body=GITHUB_PAYLOAD, env=ENV):
        return reason(authenticate(HMAC, headers, body, env, workflow="w"))

    assert check({}) == (401, "missing X-Hub-Signature-256 header")
    wrong = sign("not the secret", GITHUB_PAYLOAD)
    assert check({"x-hub-signature-256": wrong}) == (401, "signature does not match")
    assert check({"x-hub-signature-256": GITHUB_SIGNATURE}, body=b"Hello, World?") == (
        401,
        "signature does not match",
    )
    assert check({"x-hub-signature-256": "md5=abc"}) == (
        401,
        "X-Hub-Signature-256 must be sha256=<hex digest of the body>",
    )
    assert check({"x-hub-signature-256": GITHUB_SIGNATURE}, env={}) == (
        500,
        "webhook secret not configured",
    )
    assert check({"x-hub-signature-256": GITHUB_SIGNATURE}, env={"HOOK_SECRET": ""}) == (
        500,
        "webhook secret not configured",
    )


def test_hmac_default_headers_follow_the_algorithm():
    for algorithm, header in [("sha1", "X-Hub-Signature"), ("sha512", "X-Hub-Signature-512")]:
        auth = AuthHmac(type="hmac", algorithm=algorithm, secret_env="HOOK_SECRET")
        signed = {header.lower(): sign(GITHUB_SECRET, b"x", algorithm)}
        assert authenticate(auth, signed, b"x", ENV, workflow="w") is None
        assert reason(authenticate(auth, {}, b"x", ENV, workflow="w")) == (
            401,
            f"missing {header} header",
        )


def test_a_custom_signature_header():
    auth = AuthHmac(type="hmac", header="X-Signature", secret_env="HOOK_SECRET")
    headers = {"x-signature": GITHUB_SIGNATURE}
    assert authenticate(auth, headers, GITHUB_PAYLOAD, ENV, workflow="w") is None


def test_api_key():
    auth = AuthApiKey(type="api_key", secret_env="HOOK_SECRET")
    ok = {"x-api-key": GITHUB_SECRET}
    assert authenticate(auth, ok, b"", ENV, workflow="w") is None
    assert reason(authenticate(auth, {}, b"", ENV, workflow="w")) == (
        401,
        "missing X-API-Key header",
    )
    assert reason(authenticate(auth, {"x-api-key": "guess"}, b"", ENV, workflow="w")) == (
        401,
        "API key does not match",
    )
    assert reason(authenticate(auth, ok, b"", {}, workflow="w")) == (
        500,
        "webhook secret not configured",
    )


def test_no_auth_needs_nothing():
    assert authenticate(AuthNone(type="none"), {}, b"", {}, workflow="w") is None


def test_a_refusal_never_contains_the_secret_or_the_expected_signature():
    replies = [
        authenticate(HMAC, {"x-hub-signature-256": "sha256=" + "0" * 64}, b"x", ENV, workflow="w"),
        authenticate(
            AuthApiKey(type="api_key", secret_env="HOOK_SECRET"),
            {"x-api-key": "guess"},
            b"",
            ENV,
            workflow="w",
        ),
    ]
    expected = sign(GITHUB_SECRET, b"x").split("=", 1)[1]
    for reply in replies:
        text = str(reply.body)
        assert GITHUB_SECRET not in text
        assert expected not in text
