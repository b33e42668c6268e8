"""Signing with a secp256k1 key inside AWS KMS (key spec ``ECC_SECG_P256K1``).

Two calls of KMS's JSON API over HTTPS (aiohttp, signed with :mod:`rflow.relayer.sigv4`):
``GetPublicKey`` once, when the key is opened (its spec, usage and curve are checked,
and the address is computed from the public key); ``Sign`` with ``MessageType:
DIGEST`` and ``ECDSA_SHA_256`` for each transaction, which answers a DER ``(r, s)``.
KMS does not hash a digest again, and its ``s`` may be high: :func:`recovered` makes the
signature low-``s`` and finds its recovery id.

An answer KMS could not give now (a 5xx, ``ThrottlingException``, a timeout, a refused
connection) is ``signer_unavailable``, tried again by the run's retry policy; a refusal
(access denied, a disabled or unknown key) is ``permission_denied``. Neither quotes a
credential.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

import aiohttp
from pydantic import SecretStr

from rflow.failures import FailureKind, RflowError
from rflow.lang.model import AwsKmsKey as KmsSpec
from rflow.relayer.signing import Signature, SignatureMismatch, Unpicklable, recovered
from rflow.relayer.sigv4 import Credentials, signed_headers

TIMEOUT = 10.0
"""Seconds a KMS call may take."""
KEY_SPEC = "ECC_SECG_P256K1"
_TRANSIENT = {
    "ThrottlingException",
    "KMSInternalException",
    "DependencyTimeoutException",
    "KeyUnavailableException",
    "LimitExceededException",
    "ServiceUnavailableException",
    "InternalFailure",
    "RequestTimeoutException",
}
"""KMS errors that say "not now" rather than "no"."""
_SECP256K1 = "1.3.132.0.10"


class KmsKey(Unpicklable):
    """A KMS key: its id, its endpoint, the credentials that sign requests to it."""

    kind: ClassVar[str] = "aws_kms"
    __slots__ = ("_credentials", "_http", "endpoint", "public_key", "relayer", "spec")

    def __init__(
        self, relayer: str, spec: KmsSpec, endpoint: str, credentials: Credentials
    ) -> None:
        self.relayer = relayer
        self.spec = spec
        self.endpoint = endpoint
        self._credentials = credentials
        self._http: aiohttp.ClientSession | None = None
        self.public_key = b""

    def __repr__(self) -> str:
        return f"KmsKey(key_id={self.spec.key_id!r}, endpoint={self.endpoint!r})"

    def _error(self, kind: FailureKind, what: str) -> RflowError:
        return RflowError(kind, f"relayer {self.relayer}: AWS KMS key {self.spec.key_id}: {what}")

    async def call(self, action: str, request: dict[str, Any]) -> dict[str, Any]:
        """One KMS API call: its answer, or :class:`RflowError`."""
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT))
        body = json.dumps(request).encode()
        headers = signed_headers(
            "POST",
            self.endpoint,
            {
                "Content-Type": "application/x-amz-json-1.1",
                "X-Amz-Target": f"TrentService.{action}",
            },
            body,
            self._credentials,
            region=self.spec.region,
            service="kms",
            now=datetime.now(UTC),
        )
        try:
            async with self._http.post(self.endpoint, data=body, headers=headers) as response:
                status, text = response.status, await response.read()
        except TimeoutError:
            raise self._error(
                FailureKind.SIGNER_UNAVAILABLE, f"{action} had no answer within {TIMEOUT:.0f}s"
            ) from None
        except aiohttp.ClientError as exc:
            raise self._error(
                FailureKind.SIGNER_UNAVAILABLE,
                f"{action} failed: {type(exc).__name__} reaching {self.endpoint}",
            ) from None
        try:
            answer = json.loads(text) if text else {}
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise self._error(
                FailureKind.SIGNER_UNAVAILABLE, f"{action} answered HTTP {status} without JSON"
            )
        if status == 200:
            return answer
        error = str(answer.get("__type") or f"HTTP {status}").rsplit("#", 1)[-1]
        message = str(answer.get("message") or answer.get("Message") or "").strip()
        transient = status >= 500 or error in _TRANSIENT
        raise self._error(
            FailureKind.SIGNER_UNAVAILABLE if transient else FailureKind.PERMISSION_DENIED,
            f"{action} was refused: {error}" + (f": {message}" if message else ""),
        )

    async def load(self) -> None:
        """Fetch and check the public key: spec ECC_SECG_P256K1, usage SIGN_VERIFY."""
        from asn1crypto.keys import PublicKeyInfo

        answer = await self.call("GetPublicKey", {"KeyId": self.spec.key_id})
        spec = answer.get("KeySpec") or answer.get("CustomerMasterKeySpec")
        if spec != KEY_SPEC or answer.get("KeyUsage") != "SIGN_VERIFY":
            raise self._error(
                FailureKind.PERMISSION_DENIED,
                f"is a {spec} key for {answer.get('KeyUsage')}; a relayer needs an "
                f"{KEY_SPEC} key for SIGN_VERIFY",
            )
        try:
            info = PublicKeyInfo.load(base64.b64decode(answer["PublicKey"]))
            curve = info["algorithm"]["parameters"].chosen.dotted
            point = bytes(info["public_key"])
            if curve != _SECP256K1 or len(point) != 65 or point[0] != 4:
                raise ValueError(curve)
        except Exception:  # whatever is wrong with it, it is not a secp256k1 public key
            raise self._error(
                FailureKind.PERMISSION_DENIED, "GetPublicKey did not answer a secp256k1 public key"
            ) from None
        self.public_key = point[1:]

    async def sign_digest(self, digest: bytes) -> Signature:
        from asn1crypto.algos import DSASignature

        answer = await self.call(
            "Sign",
            {
                "KeyId": self.spec.key_id,
                "Message": base64.b64encode(digest).decode(),
                "MessageType": "DIGEST",
                "SigningAlgorithm": "ECDSA_SHA_256",
            },
        )
        try:
            native = DSASignature.load(base64.b64decode(answer["Signature"])).native
            return recovered(digest, native["r"], native["s"], self.public_key)
        except SignatureMismatch as exc:
            raise self._error(
                FailureKind.PERMISSION_DENIED, f"a signature was unusable: {exc}"
            ) from None
        except Exception:  # no Signature, not base64, not DER
            raise self._error(
                FailureKind.PERMISSION_DENIED, "Sign did not answer a DER ECDSA signature"
            ) from None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


def credentials(spec: KmsSpec, env: Mapping[str, str], relayer: str) -> Credentials:
    """The credentials ``spec`` names, from ``env``."""
    key_id, secret = env.get(spec.access_key_id_env), env.get(spec.secret_access_key_env)
    missing = [
        name
        for name, value in (
            (spec.access_key_id_env, key_id),
            (spec.secret_access_key_env, secret),
        )
        if not value
    ]
    if missing or key_id is None or secret is None:
        raise RflowError(
            FailureKind.PERMISSION_DENIED,
            f"relayer {relayer}: AWS credentials not set: {', '.join(missing)}",
        )
    token = env.get(spec.session_token_env)
    return Credentials(key_id, SecretStr(secret), SecretStr(token) if token else None)


async def open_key(relayer: str, spec: KmsSpec, env: Mapping[str, str]) -> KmsKey:
    """The key ``spec`` names, its public key fetched and checked."""
    endpoint = f"https://kms.{spec.region}.amazonaws.com/"
    if spec.endpoint_env is not None:
        endpoint = env.get(spec.endpoint_env, "")
        if not endpoint:
            raise RflowError(
                FailureKind.PERMISSION_DENIED,
                f"relayer {relayer}: environment variable {spec.endpoint_env} (the KMS "
                "endpoint) is not set",
            )
    key = KmsKey(relayer, spec, endpoint, credentials(spec, env, relayer))
    try:
        await key.load()
    except BaseException:
        await key.close()
        raise
    return key
