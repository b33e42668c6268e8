"""The console's sign-in helpers: CSRF tokens, redirect targets, same-origin checks."""

from __future__ import annotations

from types import SimpleNamespace

from rflow.console import auth


def test_the_csrf_token_belongs_to_the_session_token():
    token = auth.csrf_for("token-a")
    assert token == auth.csrf_for("token-a")
    assert token != auth.csrf_for("token-b")
    assert "token-a" not in token
    assert auth.csrf_ok(token, token)
    assert not auth.csrf_ok(token, auth.csrf_for("token-b"))
    assert not auth.csrf_ok(token, None)
    assert not auth.csrf_ok(None, None)


def test_after_sign_in_only_console_paths_are_followed():
    assert auth.safe_next("/console/runs?status=failed") == "/console/runs?status=failed"
    for elsewhere in ("https://evil.example/", "//evil.example/console/", "/api/runs", None, "",
                      "/console/\\evil", "/console/\nx"):  # fmt: skip
        assert auth.safe_next(elsewhere) == "/console/runs", elsewhere


def test_a_request_from_another_site_is_not_same_origin():
    def request(**headers: str):
        return SimpleNamespace(headers=headers, host="127.0.0.1:6150")

    assert auth.same_origin(request())
    assert auth.same_origin(request(Origin="http://127.0.0.1:6150"))
    assert auth.same_origin(request(Referer="http://127.0.0.1:6150/console/runs"))
    assert not auth.same_origin(request(Origin="http://evil.example"))
    assert not auth.same_origin(request(Origin="null"))
    assert not auth.same_origin(request(Referer="http://127.0.0.1:6151/console/"))
