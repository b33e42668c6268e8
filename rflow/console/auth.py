"""The console's sign-in: the API's bearer token kept in a session cookie, and CSRF tokens.

A person signs in with the token of a principal (``operator``'s ``RFLOW_API_TOKEN`` or one
the project declares), exactly the token the HTTP API takes. The console keeps it in a
session cookie that scripts cannot read (``HttpOnly``), that the browser sends only on
requests from the console's own pages (``SameSite=Strict``), and that ends with the
browser session; every request resolves it against the current principals again, so a
token rotated by a deploy signs its sessions out.

Every form carries a CSRF token derived from the session's token with HMAC, checked in
constant time before anything is done; the sign-in form, which has no session yet, uses a
random value kept in a cookie of its own and repeated in the form (double submit). A
request that names an ``Origin`` other than the console's own is refused as well.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from aiohttp import web

PREFIX = "/console"
SESSION_COOKIE = "rflow_console"
SIGN_IN_COOKIE = "rflow_console_sign_in"
FLASH_COOKIE = "rflow_console_flash"
CSRF_FIELD = "csrf"

_CSRF_CONTEXT = b"rflow console csrf v1"


def csrf_for(token: str) -> str:
    """The CSRF token of the session signed in with ``token``: it cannot be computed
    without the token, which scripts on other sites never see."""
    key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
    return hmac.new(key, _CSRF_CONTEXT, hashlib.sha256).hexdigest()


def csrf_ok(expected: str | None, given: str | None) -> bool:
    """Whether ``given`` is the expected CSRF token (compared in constant time)."""
    if not expected or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def new_sign_in_nonce() -> str:
    """A random value for the sign-in form's double-submit check."""
    return secrets.token_urlsafe(24)


def same_origin(request: web.Request) -> bool:
    """False when the request says it comes from another site's page (``Origin``, or
    ``Referer`` without one); a request that names neither is judged by its CSRF token."""
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source:
        return True
    if source == "null":  # an opaque origin: a sandboxed frame, a file, another site
        return False
    parts = urlsplit(source)
    return parts.netloc == request.host and parts.scheme in ("http", "https")


def safe_next(value: str | None) -> str:
    """Where to go after signing in or acting: a console path, never another site."""
    if not value or not value.startswith(PREFIX + "/") or value.startswith("//"):
        return PREFIX + "/runs"
    if "\\" in value or any(ord(c) < 32 for c in value):
        return PREFIX + "/runs"
    return value


def cookie_options(request: web.Request) -> dict[str, object]:
    """A session cookie for the console's paths: no ``Max-Age``, so it ends with the
    browser session; ``Secure`` whenever the console is reached over HTTPS."""
    return {
        "path": PREFIX + "/",
        "httponly": True,
        "samesite": "Strict",
        "secure": request.secure,
    }


def sign_in(response: web.StreamResponse, request: web.Request, token: str) -> None:
    """Keep ``token`` as the session on ``response``."""
    response.set_cookie(SESSION_COOKIE, token, **cookie_options(request))
    response.del_cookie(SIGN_IN_COOKIE, path=PREFIX + "/")


def sign_out(response: web.StreamResponse) -> None:
    """End the session on ``response``."""
    response.del_cookie(SESSION_COOKIE, path=PREFIX + "/")
