"""``permissions.http_hosts``: which URLs an http_call may reach."""

from __future__ import annotations

import pytest

from rflow.failures import FailureKind, RflowError
from rflow.hosts import check_url

ALLOWED = ["api.example.com", "*.internal.example", "127.0.0.1:8080"]


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/v1",
        "https://API.Example.com:443/v1",
        "http://a.internal.example/",
        "http://a.b.internal.example/",
        "http://127.0.0.1:8080/hook",
    ],
)
def test_allowed(url: str) -> None:
    check_url(url, ALLOWED)


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com.evil.org/",
        "https://evil.org/?u=https://api.example.com",
        "https://api.example.com@evil.org/",
        "http://internal.example/",  # the wildcard covers subdomains only
        "http://notinternal.example/",
        "http://127.0.0.1/",
        "http://127.0.0.1:8081/",
        "http://localhost:8080/",
    ],
)
def test_refused(url: str) -> None:
    with pytest.raises(RflowError) as raised:
        check_url(url, ALLOWED)
    assert raised.value.kind == FailureKind.PERMISSION_DENIED


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://api.example.com/", "no-scheme", ""])
def test_only_http_urls(url: str) -> None:
    with pytest.raises(RflowError) as raised:
        check_url(url, None)
    assert raised.value.kind == FailureKind.INVALID_INPUT


def test_unset_allows_any_host() -> None:
    check_url("https://anything.example.net:1234/x", None)
