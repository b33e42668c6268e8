"""Webhook authentication: none, a shared API key, or a GitHub-style HMAC signature.

An HMAC signature header reads ``<algorithm>=<hex digest of the raw body>``, e.g.
``sha256=757107ea...`` (GitHub's ``X-Hub-Signature-256``). Every comparison of a
secret-derived value runs in constant time (:func:`hmac.compare_digest`), and no reply
ever contains a secret or a digest computed from one.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Mapping

from rflow.ingress.request import Reply, refuse
from rflow.lang.model.triggers import AuthApiKey, AuthHmac, AuthNone

log = logging.getLogger(__name__)

DIGESTS = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "sha512": hashlib.sha512}
"""The HMAC algorithms a webhook may use, by the name that prefixes the signature."""

SECRET_NOT_CONFIGURED = "webhook secret not configured"


def sign(secret: str | bytes, body: bytes, algorithm: str = "sha256") -> str:
    """The signature header value for ``body``: ``<algorithm>=<hex digest>``."""
    key = secret.encode() if isinstance(secret, str) else secret
    return f"{algorithm}={hmac.new(key, body, DIGESTS[algorithm]).hexdigest()}"


def signature_matches(secret: str | bytes, body: bytes, signature: str, algorithm: str) -> bool:
    """Whether ``signature`` is ``body``'s HMAC under ``secret``, compared in constant time.

    The algorithm prefix and the hex digits are read case-insensitively, and surrounding
    whitespace is ignored.
    """
    prefix, _, digest = signature.strip().partition("=")
    given = f"{prefix.lower()}={digest.lower()}".encode("utf-8", "replace")
    return hmac.compare_digest(sign(secret, body, algorithm).encode(), given)


def well_formed(signature: str, algorithm: str) -> bool:
    """Whether ``signature`` has the shape ``<algorithm>=<hex digest of the right length>``."""
    prefix, sep, digest = signature.strip().partition("=")
    size = DIGESTS[algorithm]().digest_size * 2
    return (
        bool(sep)
        and prefix.lower() == algorithm
        and len(digest) == size
        and all(c in "0123456789abcdefABCDEF" for c in digest)
    )


def auth_header(auth: AuthNone | AuthApiKey | AuthHmac) -> str | None:
    """The request header that carries the credential, if any."""
    if isinstance(auth, AuthHmac):
        return auth.signature_header
    if isinstance(auth, AuthApiKey):
        return auth.header
    return None


def authenticate(
    auth: AuthNone | AuthApiKey | AuthHmac,
    headers: Mapping[str, str],
    body: bytes,
    env: Mapping[str, str],
    *,
    workflow: str,
) -> Reply | None:
    """None when the request passes ``auth``, else the reply that refuses it.

    ``headers`` must have lower-case names. A secret variable that is unset or empty is
    the operator's fault, not the sender's: 500, with the variable named only in the log.
    """
    if isinstance(auth, AuthNone):
        return None
    secret = env.get(auth.secret_env, "")
    if not secret:
        log.error(
            "webhook of workflow %r: environment variable %s is not set; refusing requests",
            workflow,
            auth.secret_env,
        )
        return refuse(500, SECRET_NOT_CONFIGURED)
    header = auth_header(auth)
    assert header is not None
    given = headers.get(header.lower())
    if given is None:
        return refuse(401, f"missing {header} header")
    if isinstance(auth, AuthApiKey):
        if not hmac.compare_digest(secret.encode(), given.encode("utf-8", "replace")):
            return refuse(401, "API key does not match")
        return None
    if not well_formed(given, auth.algorithm):
        return refuse(401, f"{header} must be {auth.algorithm}=<hex digest of the body>")
    if not signature_matches(secret, body, given, auth.algorithm):
        return refuse(401, "signature does not match")
    return None
