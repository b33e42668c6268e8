"""Signing with a secp256k1 key inside a PKCS#11 token (an HSM).

The token signs with ``CKM_ECDSA`` over the 32-byte digest and answers ``r || s``; the
private key never leaves it (rflow asks for no attribute of it but its curve). The
public key is read from the token's public-key object with the same label, or, for a
token that keeps none, found as the one key that two signatures both recover to.

The library is python-pkcs11, which releases the GIL in every call into the token's C
library: each call runs in a worker thread, so a slow device never stalls the event
loop, and one session per token is shared by its keys (the library serializes the
operations on a session). A session the device lost is opened again on the next
signature. A refused PIN is never tried again by this process: a token locks after a
few wrong tries.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import SecretStr

from rflow.failures import FailureKind, RflowError
from rflow.lang.model import Pkcs11Key as Pkcs11Spec
from rflow.relayer.signing import (
    SECP256K1_N,
    Signature,
    SignatureMismatch,
    Unpicklable,
    address_of,
    candidates,
    recovered,
)

SECP256K1_PARAMS = bytes.fromhex("06052b8104000a")
"""``CKA_EC_PARAMS`` of secp256k1: the DER of its object identifier 1.3.132.0.10."""

_TRANSIENT = (
    "DeviceError",
    "DeviceMemory",
    "DeviceRemoved",
    "FunctionFailed",
    "GeneralError",
    "HostMemory",
    "SessionClosed",
    "SessionCount",
    "SessionHandleInvalid",
    "TokenNotPresent",
    "TokenNotRecognised",
    "UserNotLoggedIn",
    "ObjectHandleInvalid",
    "KeyHandleInvalid",
    "OperationActive",
)
"""python-pkcs11 errors that say the device or the session failed, not the request:
the session is dropped and opened again on the next try."""

_sessions: dict[tuple[str, str], Any] = {}
"""The open, logged-in session of each (library, token label)."""
_refused: dict[tuple[str, str], str] = {}
"""Tokens whose PIN this process was refused, with the refusal: never tried again."""
_lock = threading.Lock()


def _unavailable(relayer: str, token: str, what: str) -> RflowError:
    return RflowError(
        FailureKind.SIGNER_UNAVAILABLE, f"relayer {relayer}: PKCS#11 token {token!r}: {what}"
    )


def _refusal(relayer: str, token: str, what: str) -> RflowError:
    return RflowError(
        FailureKind.PERMISSION_DENIED, f"relayer {relayer}: PKCS#11 token {token!r}: {what}"
    )


def _name(exc: BaseException) -> str:
    return type(exc).__name__


def _session(spec: Pkcs11Spec, pin: SecretStr, relayer: str) -> Any:
    """The logged-in session of ``spec``'s token, opened when there is none (blocking)."""
    where = (spec.module, spec.token)
    with _lock:
        if where not in _sessions:
            _sessions[where] = _open(spec, pin, relayer, rw=False)
        return _sessions[where]


def _open(spec: Pkcs11Spec, pin: SecretStr, relayer: str, *, rw: bool) -> Any:
    """A new session of ``spec``'s token, logged in with ``pin`` (blocking)."""
    import pkcs11

    where = (spec.module, spec.token)
    if where in _refused:
        raise _refusal(relayer, spec.token, _refused[where])
    if not os.path.isfile(spec.module):
        raise _refusal(relayer, spec.token, f"no PKCS#11 library at {spec.module}")
    try:
        lib = pkcs11.lib(spec.module)
    except Exception as exc:  # a file that is not a PKCS#11 module, a failed C_Initialize
        raise _refusal(
            relayer, spec.token, f"{spec.module} could not be loaded ({_name(exc)})"
        ) from None
    try:
        token = lib.get_token(token_label=spec.token)
    except pkcs11.NoSuchToken:
        raise _refusal(relayer, spec.token, "no token with this label") from None
    except pkcs11.MultipleTokensReturned:
        raise _refusal(relayer, spec.token, "several tokens have this label") from None
    except pkcs11.PKCS11Error as exc:
        raise _unavailable(relayer, spec.token, f"the token list failed ({_name(exc)})") from None
    try:
        return token.open(rw=rw, user_pin=pin.get_secret_value())
    except (pkcs11.PinIncorrect, pkcs11.PinInvalid, pkcs11.PinLenRange) as exc:
        _refused[where] = f"the PIN was refused ({_name(exc)}); it is not tried again"
        raise _refusal(relayer, spec.token, _refused[where]) from None
    except (pkcs11.PinLocked, pkcs11.PinExpired) as exc:
        _refused[where] = f"the PIN is locked or expired ({_name(exc)})"
        raise _refusal(relayer, spec.token, _refused[where]) from None
    except pkcs11.UserAlreadyLoggedIn:
        # Logged in already by another session of this process: a session opened
        # without a PIN shares that login.
        return token.open(rw=rw)
    except pkcs11.PKCS11Error as exc:
        raise _unavailable(
            relayer, spec.token, f"opening a session failed ({_name(exc)})"
        ) from None


def _forget(spec: Pkcs11Spec, session: Any) -> None:
    with _lock:
        if _sessions.get((spec.module, spec.token)) is session:
            del _sessions[(spec.module, spec.token)]
    with contextlib.suppress(Exception):  # a session the device already lost
        session.close()


def _point(value: bytes) -> bytes:
    """A ``CKA_EC_POINT`` as 64 bytes x || y: DER-wrapped in an OCTET STRING as PKCS#11
    says, or bare as some tokens give it."""
    if len(value) == 65 and value[0] == 4:
        return value[1:]
    from asn1crypto.core import OctetString

    point = OctetString.load(value).native
    if len(point) != 65 or point[0] != 4:
        raise ValueError("not an uncompressed secp256k1 point")
    return point[1:]


class Pkcs11Key(Unpicklable):
    """A secp256k1 private key in a PKCS#11 token, found by its label."""

    kind: ClassVar[str] = "pkcs11"
    __slots__ = ("_pin", "_private", "_session", "public_key", "relayer", "spec")

    def __init__(self, relayer: str, spec: Pkcs11Spec, pin: SecretStr) -> None:
        self.relayer = relayer
        self.spec = spec
        self._pin = pin
        self._session: Any = None
        self._private: Any = None
        self.public_key = b""

    def __repr__(self) -> str:
        return f"Pkcs11Key(token={self.spec.token!r}, key_label={self.spec.key_label!r})"

    # --- blocking: each runs in a worker thread ----------------------------------------

    def _find(self) -> None:
        """Open the session, find the private key and the public key (blocking)."""
        import pkcs11
        from pkcs11 import Attribute, KeyType, ObjectClass

        spec, relayer = self.spec, self.relayer
        session = _session(spec, self._pin, relayer)
        try:
            private = session.get_key(object_class=ObjectClass.PRIVATE_KEY, label=spec.key_label)
        except pkcs11.NoSuchKey:
            raise _refusal(
                relayer, spec.token, f"no private key labelled {spec.key_label!r}"
            ) from None
        except pkcs11.MultipleObjectsReturned:
            raise _refusal(
                relayer, spec.token, f"several private keys are labelled {spec.key_label!r}"
            ) from None
        except pkcs11.PKCS11Error as exc:
            _forget(spec, session)
            raise _unavailable(
                relayer, spec.token, f"finding the key failed ({_name(exc)})"
            ) from None
        if private.key_type != KeyType.EC or private[Attribute.EC_PARAMS] != SECP256K1_PARAMS:
            raise _refusal(
                relayer, spec.token, f"key {spec.key_label!r} is not a secp256k1 elliptic-curve key"
            )
        try:
            public = session.get_key(object_class=ObjectClass.PUBLIC_KEY, label=spec.key_label)
            point = _point(public[Attribute.EC_POINT])
        except (pkcs11.NoSuchKey, pkcs11.MultipleObjectsReturned):
            point = b""
        self._session, self._private = session, private
        if not point:
            point = self._derived()
        self.public_key = point

    def _derived(self) -> bytes:
        """The public key of a token that keeps none: the one two signatures share."""
        found: set[bytes] | None = None
        for digest in (b"\x01" * 32, b"\x02" * 32):
            r, s = self._raw(digest)
            keys = candidates(digest, r, s)
            found = keys if found is None else found & keys
        if not found or len(found) != 1:
            raise _refusal(self.relayer, self.spec.token, "the key's public key cannot be found")
        return found.pop()

    def _raw(self, digest: bytes) -> tuple[int, int]:
        """The token's ``r`` and ``s`` for ``digest`` (blocking)."""
        import pkcs11
        from pkcs11 import Mechanism

        if self._session is None:
            self._find()
        session = self._session
        try:
            signature = self._private.sign(digest, mechanism=Mechanism.ECDSA)
        except pkcs11.PKCS11Error as exc:
            if _name(exc) in _TRANSIENT:
                self._session = self._private = None
                _forget(self.spec, session)
                raise _unavailable(
                    self.relayer, self.spec.token, f"signing failed ({_name(exc)})"
                ) from None
            raise _refusal(
                self.relayer, self.spec.token, f"signing was refused ({_name(exc)})"
            ) from None
        if len(signature) != 64:
            raise _refusal(self.relayer, self.spec.token, "the token's signature is not r || s")
        return int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")

    # --- the Key interface --------------------------------------------------------------

    async def sign_digest(self, digest: bytes) -> Signature:
        r, s = await asyncio.to_thread(self._raw, digest)
        try:
            return recovered(digest, r, s, self.public_key)
        except SignatureMismatch as exc:
            raise _refusal(
                self.relayer, self.spec.token, f"a signature was unusable: {exc}"
            ) from None

    async def close(self) -> None:
        # The session is the token's, shared by its keys: it stays open for them.
        self._session = self._private = None


async def open_key(relayer: str, spec: Pkcs11Spec, env: Mapping[str, str]) -> Pkcs11Key:
    """The key ``spec`` names, its token logged in to and its public key read."""
    pin = env.get(spec.pin_env)
    if not pin:
        raise RflowError(
            FailureKind.PERMISSION_DENIED,
            f"relayer {relayer}: environment variable {spec.pin_env} (the token's PIN) is not set",
        )
    key = Pkcs11Key(relayer, spec, SecretStr(pin))
    await asyncio.to_thread(key._find)
    return key


def generate(spec: Pkcs11Spec, pin: str, *, secret: bytes | None = None) -> str:
    """Make a secp256k1 key pair labelled ``spec.key_label`` in ``spec``'s token (or, with
    ``secret``, store that private key there) and return its address (blocking). The
    private key is sensitive and never extractable: the token will sign with it, and
    give it to no one. :class:`RflowError` when the label is taken or the token refuses."""
    relayer = spec.key_label
    with _lock:
        session = _open(spec, SecretStr(pin), relayer, rw=True)
    try:
        return _generate(session, spec, secret)
    finally:
        session.close()


def _generate(session: Any, spec: Pkcs11Spec, secret: bytes | None) -> str:
    import pkcs11
    from pkcs11 import Attribute, KeyType, Mechanism, ObjectClass

    relayer = spec.key_label
    try:
        session.get_key(object_class=ObjectClass.PRIVATE_KEY, label=spec.key_label)
    except pkcs11.NoSuchKey:
        pass
    except pkcs11.MultipleObjectsReturned:
        raise _refusal(
            relayer, spec.token, f"keys labelled {spec.key_label!r} exist already"
        ) from None
    else:
        raise _refusal(relayer, spec.token, f"a key labelled {spec.key_label!r} exists already")
    private_template = {
        Attribute.TOKEN: True,
        Attribute.PRIVATE: True,
        Attribute.SENSITIVE: True,
        Attribute.EXTRACTABLE: False,
        Attribute.SIGN: True,
        Attribute.LABEL: spec.key_label,
    }
    try:
        if secret is None:
            public, _ = session.generate_keypair(
                KeyType.EC,
                mechanism=Mechanism.EC_KEY_PAIR_GEN,
                store=True,
                label=spec.key_label,
                public_template={
                    Attribute.EC_PARAMS: SECP256K1_PARAMS,
                    Attribute.VERIFY: True,
                },
                private_template=private_template,
            )
            point = _point(public[Attribute.EC_POINT])
        else:
            from coincurve import PrivateKey

            scalar = int.from_bytes(secret, "big")
            if len(secret) != 32 or not 0 < scalar < SECP256K1_N:
                raise ValueError
            point = PrivateKey(secret).public_key.format(compressed=False)
            session.create_object(
                {
                    **private_template,
                    Attribute.CLASS: ObjectClass.PRIVATE_KEY,
                    Attribute.KEY_TYPE: KeyType.EC,
                    Attribute.EC_PARAMS: SECP256K1_PARAMS,
                    Attribute.VALUE: secret,
                }
            )
            from asn1crypto.core import OctetString

            session.create_object(
                {
                    Attribute.CLASS: ObjectClass.PUBLIC_KEY,
                    Attribute.KEY_TYPE: KeyType.EC,
                    Attribute.TOKEN: True,
                    Attribute.VERIFY: True,
                    Attribute.LABEL: spec.key_label,
                    Attribute.EC_PARAMS: SECP256K1_PARAMS,
                    Attribute.EC_POINT: OctetString(point).dump(),
                }
            )
            point = point[1:]
    except ValueError:
        raise _refusal(
            relayer, spec.token, "the key to store is not a secp256k1 private key"
        ) from None
    except pkcs11.PKCS11Error as exc:
        raise _refusal(
            relayer, spec.token, f"the token refused to make the key ({_name(exc)})"
        ) from None
    return address_of(point)
