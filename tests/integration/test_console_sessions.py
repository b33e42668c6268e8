"""Console sessions kept on the server: the cookie holds a random id, never the token; sign
out (in a real browser: the back button then shows the sign-in page, and a copy of the
cookie stops working), an idle timeout and a rotated token end a session; behind HTTPS the
cookie is Secure."""

from __future__ import annotations

import asyncio
import hashlib
import re
import urllib.error
import urllib.parse
import urllib.request
from http.cookies import SimpleCookie

import pytest
from playwright.async_api import expect
from pydantic import SecretStr

from rflow import storage
from rflow.console import auth
from tests.integration.browser import chromium, screenshot, sign_in
from tests.integration.harness import wait_until

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
workflows:
  hello:
    trigger: { manual: {} }
    steps:
      - id: greet
        command: { name: log, args: { message: "hello" } }
"""


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def request(
    url: str,
    *,
    cookies: dict[str, str] | None = None,
    form: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], list[str], str]:
    """One request, no redirect followed: (status, headers, Set-Cookie lines, body)."""
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if form is not None else "GET")
    if cookies:
        req.add_header("Cookie", "; ".join(f"{k}={v}" for k, v in cookies.items()))
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        resp = urllib.request.build_opener(NoRedirect).open(req, timeout=10)
    except urllib.error.HTTPError as exc:
        resp = exc
    with resp:
        set_cookies = resp.headers.get_all("Set-Cookie") or []
        return resp.status, dict(resp.headers), set_cookies, resp.read().decode()


def cookie_of(lines: list[str], name: str) -> tuple[str, str] | None:
    """(value, the whole Set-Cookie line) of cookie ``name``."""
    for line in lines:
        jar = SimpleCookie(line)
        if name in jar:
            return jar[name].value, line
    return None


def http_sign_in(base: str, token: str, headers: dict[str, str] | None = None) -> tuple[str, str]:
    """Sign in through the form as a browser would: (the session cookie, its Set-Cookie)."""
    _, _, lines, body = request(f"{base}/console/sign-in", headers=headers)
    nonce = cookie_of(lines, auth.SIGN_IN_COOKIE)
    assert nonce is not None
    field = re.search(r'name="csrf" value="([^"]+)"', body)
    assert field is not None and field.group(1) == nonce[0]
    status, answer, lines, _ = request(
        f"{base}/console/sign-in",
        cookies={auth.SIGN_IN_COOKIE: nonce[0]},
        form={"csrf": nonce[0], "token": token, "next": "/console/runs"},
        headers=headers,
    )
    assert status == 303 and answer["Location"] == "/console/runs", status
    found = cookie_of(lines, auth.SESSION_COOKIE)
    assert found is not None
    return found


async def session_row(settings, session_id: str) -> tuple | None:
    conn = await storage.connect(settings)
    async with conn:
        cur = await conn.execute(
            "SELECT principal, revoked_at, revoked_why FROM console_sessions WHERE id_hash = %s",
            (hashlib.sha256(session_id.encode()).digest(),),
        )
        return await cur.fetchone()


async def test_sign_out_ends_the_session_for_the_back_button_and_every_copy_of_the_cookie(
    settings, worker_factory, tmp_path
):
    project = tmp_path / "project.yaml"
    project.write_text(PROJECT)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    base, token = worker.url, settings.api_token.get_secret_value()

    async with chromium(tmp_path / "one") as browser:
        page = await browser.new_page()
        await sign_in(page, base, token)
        [cookie] = [c for c in await browser.cookies() if c["name"] == auth.SESSION_COOKIE]
        session_id = cookie["value"]
        # The cookie holds a random id, not the token; the server keeps only its hash.
        assert token not in session_id and len(session_id) >= 43
        assert await session_row(settings, session_id) == ("operator", None, None)
        conn = await storage.connect(settings)
        async with conn:
            rows = await (await conn.execute("SELECT * FROM console_sessions")).fetchall()
        assert session_id not in repr(rows) and token not in repr(rows)

        # A copy of the cookie works, in another browser and without one, until sign-out.
        status, *_ = request(f"{base}/console/runs", cookies={auth.SESSION_COOKIE: session_id})
        assert status == 200
        async with chromium(tmp_path / "two") as thief:
            await thief.add_cookies([cookie])
            other = await thief.new_page()
            await other.goto(f"{base}/console/workflows")
            await expect(other.locator("header .who")).to_contain_text("signed in as operator")

            await page.goto(f"{base}/console/workflows")
            await page.click("button:has-text('Sign out')")
            await expect(page).to_have_url(re.compile(r"/console/sign-in"))
            # The back button: the page is asked for again, and the sign-in answers.
            await page.go_back()
            await expect(page.locator("h1")).to_have_text("Sign in to the rflow console")
            await screenshot(page, "sessions-back-after-sign-out")

            # The copied cookie signs nobody in any more.
            await other.reload()
            await expect(other).to_have_url(re.compile(r"/console/sign-in"))
            await expect(other.locator("h1")).to_have_text("Sign in to the rflow console")
        status, headers, _, _ = request(
            f"{base}/console/runs", cookies={auth.SESSION_COOKIE: session_id}
        )
        assert status == 303 and headers["Location"].startswith("/console/sign-in")
        csrf = auth.csrf_for(session_id)  # even with the session's own CSRF token
        status, _, _, body = request(
            f"{base}/console/workflows/hello/pause",
            cookies={auth.SESSION_COOKIE: session_id},
            form={"csrf": csrf},
        )
        assert status == 401 and "not signed in" in body
        principal, revoked_at, why = await session_row(settings, session_id)
        assert (principal, why) == ("operator", "signed out") and revoked_at is not None


async def test_a_session_ends_when_idle_and_when_its_token_is_rotated(
    settings, worker_factory, tmp_path
):
    project = tmp_path / "project.yaml"
    project.write_text(PROJECT)
    worker = worker_factory(project_path=project, console_idle_timeout=3.0)
    await worker.wait_ready()
    base, token = worker.url, settings.api_token.get_secret_value()

    # Idle: a session nobody uses ends after the idle timeout (live refreshes do not count).
    idle, _ = await asyncio.to_thread(http_sign_in, base, token)
    live = {"HX-Request": "true"}

    async def signed_out() -> bool:
        status, *_ = await asyncio.to_thread(
            request, f"{base}/console/runs", cookies={auth.SESSION_COOKIE: idle}, headers=live
        )
        return status == 401

    assert not await signed_out()
    await wait_until(signed_out, timeout=30, what="the idle session to end")
    assert (await session_row(settings, idle))[2] == "idle for longer than the idle timeout"

    # Rotated: the worker restarted with a new RFLOW_API_TOKEN ends the old token's sessions.
    kept, _ = await asyncio.to_thread(http_sign_in, base, token)
    status, *_ = request(f"{base}/console/runs", cookies={auth.SESSION_COOKIE: kept})
    assert status == 200
    worker.stop()
    rotated = worker_factory(project_path=project, api_token=SecretStr("a-new-token-2f7e"))
    await rotated.wait_ready()
    status, headers, _, _ = await asyncio.to_thread(
        request, f"{rotated.url}/console/runs", cookies={auth.SESSION_COOKIE: kept}
    )
    assert status == 303 and headers["Location"].startswith("/console/sign-in")
    assert (await session_row(settings, kept))[2] == (
        "the principal's token changed (or the principal is gone)"
    )
    fresh, _ = await asyncio.to_thread(http_sign_in, rotated.url, "a-new-token-2f7e")
    status, *_ = request(f"{rotated.url}/console/runs", cookies={auth.SESSION_COOKIE: fresh})
    assert status == 200


async def test_behind_https_the_cookie_is_secure(settings, worker_factory, tmp_path):
    project = tmp_path / "project.yaml"
    project.write_text(PROJECT)
    token = settings.api_token.get_secret_value()
    proxied = worker_factory(project_path=project, trust_proxy=True)
    public = worker_factory(project_path=project, public_url="https://rflow.example.com")
    await proxied.wait_ready()
    await public.wait_ready()

    https = {"X-Forwarded-Proto": "https"}
    _, line = await asyncio.to_thread(http_sign_in, proxied.url, token, https)
    assert "Secure" in line and "HttpOnly" in line and "SameSite=Strict" in line
    _, line = await asyncio.to_thread(http_sign_in, proxied.url, token)
    assert "Secure" not in line  # the proxy said nothing: plain HTTP
    _, line = await asyncio.to_thread(http_sign_in, public.url, token)
    assert "Secure" in line
