"""The console's sign-in: server-side sessions, their cookie, and CSRF tokens.

A person signs in with the token of a principal (``operator``'s ``RFLOW_API_TOKEN`` or
one the project declares), exactly the token the HTTP API takes. Signing in creates a
session on the server (``console_sessions``): a random id, stored only as its sha256,
with the principal, an expiry and an idle timeout. The browser's cookie holds the id
and nothing else; it cannot be read by scripts (``HttpOnly``), is sent only from the
console's own pages (``SameSite=Strict``), ends with the browser session, and is
``Secure`` when the console is reached over HTTPS (``RFLOW_PUBLIC_URL`` says https, or
a trusted proxy's ``X-Forwarded-Proto`` does). Signing out revokes the session on the
server, so a copied cookie stops working; so does rotating the principal's token (the
session keeps an HMAC of the token's digest, keyed by its id, and every request checks
it against the current token).

Every form carries the session's CSRF token, an HMAC of the session's id (per session,
unknowable without the cookie), checked in constant time before anything is done; the
sign-in form, which has no session yet, uses a random value kept in a cookie of its own
and repeated in the form (double submit). A request that names an ``Origin`` other than
the console's own is refused as well.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from aiohttp import web

from rflow.settings import Settings

PREFIX = "/console"
SESSION_COOKIE = "rflow_console"
SIGN_IN_COOKIE = "rflow_console_sign_in"
FLASH_COOKIE = "rflow_console_flash"
CSRF_FIELD = "csrf"

_CSRF_CONTEXT = b"rflow console csrf v2"
_TOKEN_CONTEXT = b"rflow console token v1"


def new_session_id() -> str:
    """A session's id: 256 random bits, what the cookie holds."""
    return secrets.token_urlsafe(32)


def id_hash(session_id: str) -> bytes:
    """What the server keeps of a session's id (its sha256)."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).digest()


def csrf_for(session_id: str) -> str:
    """The CSRF token of the session ``session_id``: it cannot be computed without the
    id, which scripts on other sites (and scripts on the console's pages) never see."""
    key = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).digest()
    return hmac.new(key, _CSRF_CONTEXT, hashlib.sha256).hexdigest()


def token_check(session_id: str, token_digest: bytes) -> bytes:
    """What a session keeps of the token it was signed in with: an HMAC of the token's
    digest keyed by the session's id, so the stored value says nothing of the token, and
    a rotated token no longer matches."""
    key = session_id.encode("utf-8", "surrogatepass")
    return hmac.new(key, _TOKEN_CONTEXT + token_digest, hashlib.sha256).digest()


def csrf_ok(expected: str | None, given: str | None) -> bool:
    """Whether ``given`` is the expected CSRF token (compared in constant time)."""
    if not expected or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def new_sign_in_nonce() -> str:
    """A random value for the sign-in form's double-submit check."""
    return secrets.token_urlsafe(24)


def scheme(request: web.Request, settings: Settings) -> str:
    """``https`` when the browser reached the console over HTTPS: the request itself, a
    trusted proxy's ``X-Forwarded-Proto``, or an https ``RFLOW_PUBLIC_URL``."""
    if request.secure:
        return "https"
    if settings.trust_proxy:
        forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        if forwarded in ("http", "https"):
            return forwarded
    if settings.public_url and settings.public_url.lower().startswith("https://"):
        return "https"
    return "http"


def same_origin(request: web.Request, settings: Settings) -> bool:
    """False when the request says it comes from another site's page (``Origin``, or
    ``Referer`` without one); a request that names neither is judged by its CSRF token.
    The console's own origin is the request's host, or ``RFLOW_PUBLIC_URL``'s."""
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source:
        return True
    if source == "null":  # an opaque origin: a sandboxed frame, a file, another site
        return False
    parts = urlsplit(source)
    if parts.scheme not in ("http", "https"):
        return False
    hosts = {request.host}
    if settings.trust_proxy and request.headers.get("X-Forwarded-Host"):
        hosts.add(request.headers["X-Forwarded-Host"].split(",")[0].strip())
    if settings.public_url:
        hosts.add(urlsplit(settings.public_url).netloc)
    return parts.netloc in hosts


def safe_next(value: str | None) -> str:
    """Where to go after signing in or acting: a console path, never another site."""
    if not value or not value.startswith(PREFIX + "/") or value.startswith("//"):
        return PREFIX + "/runs"
    if "\\" in value or any(ord(c) < 32 for c in value):
        return PREFIX + "/runs"
    return value


def cookie_options(request: web.Request, settings: Settings) -> dict[str, object]:
    """A session cookie for the console's paths: no ``Max-Age``, so it ends with the
    browser session (the server ends it sooner); ``Secure`` whenever the console is
    reached over HTTPS."""
    return {
        "path": PREFIX + "/",
        "httponly": True,
        "samesite": "Strict",
        "secure": scheme(request, settings) == "https",
    }


def sign_in(
    response: web.StreamResponse, request: web.Request, settings: Settings, session_id: str
) -> None:
    """Give the browser the session's id on ``response``."""
    response.set_cookie(SESSION_COOKIE, session_id, **cookie_options(request, settings))
    response.del_cookie(SIGN_IN_COOKIE, path=PREFIX + "/")


def sign_out(response: web.StreamResponse) -> None:
    """Make the browser forget the session (the server has revoked it)."""
    response.del_cookie(SESSION_COOKIE, path=PREFIX + "/")
