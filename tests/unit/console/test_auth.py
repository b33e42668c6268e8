"""The console's sign-in helpers: session ids, CSRF tokens, redirect targets, same-origin
checks, and when the cookie is Secure."""

from __future__ import annotations

from types import SimpleNamespace

from rflow.console import auth
from rflow.settings import Settings


def test_a_session_id_is_random_and_kept_only_as_its_hash():
    one, two = auth.new_session_id(), auth.new_session_id()
    assert one != two and len(one) >= 43  # 256 bits, URL-safe
    assert auth.id_hash(one) == auth.id_hash(one) != auth.id_hash(two)
    assert one.encode() not in auth.id_hash(one)


def test_the_csrf_token_belongs_to_the_session():
    token = auth.csrf_for("session-a")
    assert token == auth.csrf_for("session-a")
    assert token != auth.csrf_for("session-b")
    assert "session-a" not in token
    assert auth.csrf_ok(token, token)
    assert not auth.csrf_ok(token, auth.csrf_for("session-b"))
    assert not auth.csrf_ok(token, None)
    assert not auth.csrf_ok(None, None)


def test_a_session_remembers_its_token_only_as_a_check_keyed_by_its_id():
    digest = b"\x01" * 32
    check = auth.token_check("session-a", digest)
    assert check == auth.token_check("session-a", digest)
    assert check != auth.token_check("session-b", digest)  # another session's check differs
    assert check != auth.token_check("session-a", b"\x02" * 32)  # a rotated token fails it
    assert digest not in check


def test_after_sign_in_only_console_paths_are_followed():
    assert auth.safe_next("/console/runs?status=failed") == "/console/runs?status=failed"
    for elsewhere in ("https://evil.example/", "//evil.example/console/", "/api/runs", None, "",
                      "/console/\\evil", "/console/\nx"):  # fmt: skip
        assert auth.safe_next(elsewhere) == "/console/runs", elsewhere


def request(secure: bool = False, **headers: str) -> SimpleNamespace:
    return SimpleNamespace(headers=headers, host="127.0.0.1:6150", secure=secure)


def test_a_request_from_another_site_is_not_same_origin():
    plain = Settings()
    assert auth.same_origin(request(), plain)
    assert auth.same_origin(request(Origin="http://127.0.0.1:6150"), plain)
    assert auth.same_origin(request(Referer="http://127.0.0.1:6150/console/runs"), plain)
    assert not auth.same_origin(request(Origin="http://evil.example"), plain)
    assert not auth.same_origin(request(Origin="null"), plain)
    assert not auth.same_origin(request(Referer="http://127.0.0.1:6151/console/"), plain)
    # Behind a proxy, the public address is the console's own origin too.
    public = Settings(public_url="https://rflow.example.com")
    assert auth.same_origin(request(Origin="https://rflow.example.com"), public)
    assert not auth.same_origin(request(Origin="https://rflow.example.com"), plain)


def test_the_cookie_is_secure_when_the_browser_is_on_https():
    def secure(settings: Settings, req: SimpleNamespace) -> bool:
        return bool(auth.cookie_options(req, settings)["secure"])

    plain = Settings()
    assert not secure(plain, request())
    assert secure(plain, request(secure=True))
    # X-Forwarded-Proto is believed only from a proxy the operator says is there.
    assert not secure(plain, request(**{"X-Forwarded-Proto": "https"}))
    proxied = Settings(trust_proxy=True)
    assert secure(proxied, request(**{"X-Forwarded-Proto": "https"}))
    assert not secure(proxied, request(**{"X-Forwarded-Proto": "http"}))
    assert secure(Settings(public_url="https://rflow.example.com"), request())
    assert not secure(Settings(public_url="http://127.0.0.1:6066"), request())
    options = auth.cookie_options(request(), plain)
    assert (options["httponly"], options["samesite"], options["path"]) == (
        True,
        "Strict",
        "/console/",
    )
