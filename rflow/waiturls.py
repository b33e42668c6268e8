"""Resume URLs of webhook waits: ``<base><path>/<token>``, the token made for one wait.

A wait's token is an HMAC of the wait's id (the step's idempotency key) under a random
key made once per database schema (``signing_keys``, purpose :data:`KEY_PURPOSE`): no
one can compute it from a trigger, a run id or another wait's URL. The wait's row keeps
only the token's sha256 (:func:`token_hash`); a request is hashed and looked up by it.
The same token is computed again wherever the URL is shown (``rflow runs show``, the API,
the console) or handed to a step (``${{ wait.url }}``), so it is never stored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from rflow.engine.context import WAIT_URL_VARIABLE

KEY_PURPOSE = "wait_urls"
"""The ``signing_keys`` row whose key makes the tokens."""

DEFAULT_PATH = "/hooks/wait"
"""The path of a webhook wait that declares none."""

PLACEHOLDER = WAIT_URL_VARIABLE
"""The variable ``${{ wait.url }}`` renders as (``${RFLOW_WAIT_URL}``): the executor fills
it in with the URL, and writes the URL back as it in what comes back."""

_CONTEXT = b"rflow wait url v1\x00"
TOKEN_LENGTH = 43
"""Characters of a token (256 bits, URL-safe base64 without padding)."""


def token(key: bytes, wait_id: str) -> str:
    """The token of the wait ``wait_id``."""
    digest = hmac.new(key, _CONTEXT + wait_id.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")


def token_hash(value: str) -> bytes:
    """What the wait's row keeps of its token, and a request's token is looked up by."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


def looks_like_token(value: str) -> bool:
    """Whether ``value`` has a token's shape (a request with another is not looked up)."""
    return len(value) == TOKEN_LENGTH and all(
        c.isascii() and (c.isalnum() or c in "-_") for c in value
    )


def path_of(spec: Mapping[str, Any] | None) -> str:
    """The path a parked wait's rendered ``webhook`` spec names (or the default)."""
    path = (spec or {}).get("path") or DEFAULT_PATH
    return str(path).rstrip("/")


def resume_path(path: str, value: str) -> str:
    """``<path>/<token>``."""
    return f"{path.rstrip('/')}/{value}"


def split(request_path: str) -> tuple[str, str]:
    """A request's path as (the wait's path, the token): the last segment is the token."""
    head, _, tail = request_path.rstrip("/").rpartition("/")
    return head, tail


def url(base: str, spec: Mapping[str, Any] | None, key: bytes, wait_id: str) -> str:
    """The full resume URL of the wait ``wait_id`` whose ``webhook`` spec is ``spec``."""
    return base.rstrip("/") + resume_path(path_of(spec), token(key, wait_id))
