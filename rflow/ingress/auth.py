"""Webhook authentication: none, a shared API key, or an HMAC signature.

A GitHub-style signature header reads ``<algorithm>=<hex digest of the raw body>``, e.g.
``sha256=757107ea...`` (GitHub's ``X-Hub-Signature-256``). A timestamped signature (an
``hmac`` auth with ``timestamp_header``) signs a string holding the delivery's Unix time
and its body, as Stripe (``{timestamp}.{body}``, header ``t=<time>,v1=<digest>``) and
Slack (``v0:{timestamp}:{body}``, headers ``X-Slack-Request-Timestamp`` and
``X-Slack-Signature: v0=<digest>``) do: a delivery whose time is outside the tolerance
is refused, and the signature of one that passes is returned as :class:`Signed`, for the
ingress to accept once (a replay within the tolerance reuses it).

Every comparison of a secret-derived value runs in constant time
(:func:`hmac.compare_digest`), and no reply ever contains a secret or a digest computed
from one.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from rflow.ingress.request import Reply, refuse
from rflow.lang.model.triggers import AuthApiKey, AuthHmac, AuthNone
from rflow.lang.units import format_duration

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


@dataclass(frozen=True)
class Signed:
    """A timestamped signature that passed: the ingress accepts it once, and may forget
    it at ``expires_at`` (from then its time is outside the tolerance anyway)."""

    signature: str
    """The matching hex digest, lower case."""
    expires_at: datetime


MAX_TIMESTAMP_DIGITS = 12


def sign_timestamped(
    secret: str | bytes,
    body: bytes,
    timestamp: int,
    *,
    signed_string: str = "{timestamp}.{body}",
    algorithm: str = "sha256",
) -> str:
    """The hex digest a timestamped signature carries for ``body`` sent at ``timestamp``."""
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, _signed(signed_string, timestamp, body), DIGESTS[algorithm]).hexdigest()


def _signed(template: str, timestamp: int | str, body: bytes) -> bytes:
    before, after = template.split("{body}")
    stamp = str(timestamp)
    return (
        before.replace("{timestamp}", stamp).encode()
        + body
        + after.replace("{timestamp}", stamp).encode()
    )


def authenticate(
    auth: AuthNone | AuthApiKey | AuthHmac,
    headers: Mapping[str, str],
    body: bytes,
    env: Mapping[str, str],
    *,
    workflow: str,
    now: datetime | None = None,
) -> Reply | Signed | None:
    """None when the request passes ``auth``, else the reply that refuses it; a request
    that passes a timestamped signature (at ``now``, default the clock) gives its
    :class:`Signed`.

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
    if auth.timestamp_header is not None:
        return _timestamped(auth, header, given, headers, body, secret, now or datetime.now(UTC))
    if not well_formed(given, auth.algorithm):
        return refuse(401, f"{header} must be {auth.algorithm}=<hex digest of the body>")
    if not signature_matches(secret, body, given, auth.algorithm):
        return refuse(401, "signature does not match")
    return None


def _timestamped(
    auth: AuthHmac,
    header: str,
    given: str,
    headers: Mapping[str, str],
    body: bytes,
    secret: str,
    now: datetime,
) -> Reply | Signed:
    """Check a timestamped signature: its time within the tolerance, then its digest."""
    assert auth.timestamp_header is not None
    parts = [part.strip() for part in given.split(",")]
    if auth.timestamp_header.lower() == header.lower():
        # One header for both, as Stripe's: t=<time>,v1=<digest>[,v1=<digest>...]
        stamp = next((part[2:] for part in parts if part.startswith("t=")), None)
        where = f"the t= of {header}"
        if stamp is None:
            return refuse(401, f"{header} has no t=<Unix time in seconds>")
    else:
        where = auth.timestamp_header
        stamp = headers.get(auth.timestamp_header.lower())
        if stamp is None:
            return refuse(401, f"missing {auth.timestamp_header} header")
    stamp = stamp.strip()
    if not (stamp.isascii() and stamp.isdigit()) or len(stamp) > MAX_TIMESTAMP_DIGITS:
        return refuse(401, f"{where} must be a Unix time in seconds")
    sent = int(stamp)
    tolerance = auth.tolerance.total_seconds()
    skew = now.timestamp() - sent
    if abs(skew) > tolerance:
        when = f"{skew:.0f}s ago" if skew > 0 else f"{-skew:.0f}s ahead of this clock"
        return refuse(
            401,
            f"the delivery was signed {when}, outside the tolerance of "
            f"{format_duration(auth.tolerance)}: a late or replayed delivery is refused",
        )
    prefix, size = auth.prefix, DIGESTS[auth.algorithm]().digest_size * 2
    candidates = [
        part[len(prefix) :].lower()
        for part in parts
        if part.lower().startswith(prefix.lower())
        and len(part) - len(prefix) == size
        and all(c in "0123456789abcdefABCDEF" for c in part[len(prefix) :])
    ]
    if not candidates:
        return refuse(401, f"{header} must hold {prefix}<hex digest of the signed string>")
    expected = sign_timestamped(
        secret, body, sent, signed_string=auth.signed_string, algorithm=auth.algorithm
    ).encode()
    matched = [c for c in candidates if hmac.compare_digest(expected, c.encode())]
    if not matched:
        return refuse(401, "signature does not match")
    return Signed(matched[0], datetime.fromtimestamp(sent, UTC) + timedelta(seconds=tolerance))
