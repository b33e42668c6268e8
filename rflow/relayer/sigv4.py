"""AWS Signature Version 4, for the few requests rflow makes to AWS (KMS).

Written out rather than taken from botocore: rflow signs two kinds of request (KMS
``GetPublicKey`` and ``Sign``) and botocore is tens of megabytes of service models. The
algorithm is AWS's (canonical request, string to sign, a key derived per day, region and
service); tests check it against AWS's published test suite.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qsl, quote, urlsplit

from pydantic import SecretStr

from rflow.relayer.signing import Unpicklable

ALGORITHM = "AWS4-HMAC-SHA256"


@dataclass(frozen=True, slots=True, repr=False)
class Credentials(Unpicklable):
    """An access key id and its secret (and a session token, for temporary credentials)."""

    access_key_id: str
    secret_access_key: SecretStr
    session_token: SecretStr | None = None

    def __repr__(self) -> str:
        return f"Credentials(access_key_id={self.access_key_id!r}, secret_access_key=<secret>)"


def _uri(path: str) -> str:
    return quote(path or "/", safe="/-_.~")


def _query(query: str) -> str:
    pairs = [
        (quote(k, safe="-_.~"), quote(v, safe="-_.~"))
        for k, v in parse_qsl(query, keep_blank_values=True)
    ]
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes,
    credentials: Credentials,
    *,
    region: str,
    service: str,
    now: datetime,
) -> dict[str, str]:
    """``headers`` plus ``Host``, ``X-Amz-Date``, the session token if any, and the
    ``Authorization`` that signs them all with the body, at ``now`` (UTC)."""
    parts = urlsplit(url)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    out = {**headers, "Host": parts.netloc, "X-Amz-Date": amz_date}
    if credentials.session_token is not None:
        out["X-Amz-Security-Token"] = credentials.session_token.get_secret_value()
    canonical = {name.lower(): " ".join(value.split()) for name, value in out.items()}
    names = sorted(canonical)
    request = "\n".join(
        [
            method.upper(),
            _uri(parts.path),
            _query(parts.query),
            "".join(f"{name}:{canonical[name]}\n" for name in names),
            ";".join(names),
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(request.encode()).hexdigest()])
    key = ("AWS4" + credentials.secret_access_key.get_secret_value()).encode()
    for part in (day, region, service, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["Authorization"] = (
        f"{ALGORITHM} Credential={credentials.access_key_id}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return out
