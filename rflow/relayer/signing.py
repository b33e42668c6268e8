"""Relayer signing: one interface, wherever the key is.

A relayer declares where its key is (:class:`rflow.lang.model.Relayer`): ``key_env``, a
raw key in an environment variable (for development); ``pkcs11``, a key inside an HSM
(:mod:`rflow.relayer.pkcs11`); ``aws_kms``, a key inside AWS KMS
(:mod:`rflow.relayer.kms`). Each is a :class:`Key`: a public key and one operation,
``sign_digest``. Everything else is shared and lives here: the EIP-1559 envelope, the
address (computed from the public key, never taken on trust), and what makes a
signature usable on chain whatever returned it: a low ``s`` and the recovery id that
recovers the key's own address (an HSM or KMS answers ``r`` and ``s`` only; both
recoveries are tried). The relayer holds a :class:`Signer` and never learns which kind
it has.

Signing may wait on a device or a network, so :meth:`Signer.sign` is a coroutine; a
``key_env`` key signs inline (libsecp256k1, well under a millisecond) and never leaves
the event loop.

Secrets stay in memory: no signer, key or credential has a ``repr`` that shows one, none
can be pickled or copied, and no error or log line quotes a key, a PIN or a secret
access key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NoReturn, Protocol

import rlp
from coincurve import PrivateKey, PublicKey
from eth_utils import keccak, to_checksum_address

from rflow.failures import FailureKind, RflowError
from rflow.lang.model import Project
from rflow.lang.model import Relayer as RelayerSpec

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
"""The order of secp256k1's group."""
HALF_N = SECP256K1_N // 2


@dataclass(frozen=True, slots=True)
class Signature:
    """A signature as Ethereum wants it: ``s`` at most n/2, ``v`` the y parity (0 or 1)."""

    v: int
    r: int
    s: int


class Key(Protocol):
    """Where a secp256k1 key is held, and the one thing it does: sign a 32-byte digest.

    ``public_key`` is the uncompressed point without its ``0x04`` prefix (64 bytes).
    ``sign_digest`` returns a low-``s`` signature whose ``v`` recovers ``public_key``
    (:func:`recovered` makes one from a device's ``r`` and ``s``); it raises
    :class:`RflowError`: ``signer_unavailable`` when the holder did not answer (try
    again), ``permission_denied`` when it refused.
    """

    kind: ClassVar[str]
    public_key: bytes

    async def sign_digest(self, digest: bytes) -> Signature: ...

    async def close(self) -> None: ...


class Unpicklable:
    """Refuses pickling and copying: what holds a key or a credential stays in memory."""

    __slots__ = ()

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise TypeError(f"a {type(self).__name__} holds a secret: it is never pickled or copied")


class LocalKey(Unpicklable):
    """A key in the worker's memory, from an environment variable (``key_env``)."""

    kind: ClassVar[str] = "key_env"
    __slots__ = ("_key", "public_key")

    def __init__(self, secret: bytes) -> None:
        # Kept parsed, so a signature does not derive the public key again.
        self._key = PrivateKey(secret)
        self.public_key = self._key.public_key.format(compressed=False)[1:]

    async def sign_digest(self, digest: bytes) -> Signature:
        # libsecp256k1 signs deterministically (RFC 6979) with a low s, and gives v.
        sig = self._key.sign_recoverable(digest, hasher=None)
        return Signature(
            sig[64], int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:64], "big")
        )

    async def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return "LocalKey(<secret>)"


def address_of(public_key: bytes) -> str:
    """The checksummed address of a 64-byte public key (x || y)."""
    if len(public_key) != 64:
        raise ValueError("a secp256k1 public key is 64 bytes (x || y)")
    return to_checksum_address(keccak(public_key)[-20:])


class SignatureMismatch(ValueError):
    """A device's signature is malformed or recovers to another key."""


def recovered(digest: bytes, r: int, s: int, public_key: bytes) -> Signature:
    """The Ethereum signature of ``digest`` from a device's ``r`` and ``s``: ``s`` made low
    (``n - s`` signs the same), ``v`` the recovery id whose key is ``public_key``.
    :class:`SignatureMismatch` when neither recovers it (a wrong key, a device that
    hashed the digest again)."""
    if not (0 < r < SECP256K1_N and 0 < s < SECP256K1_N):
        raise SignatureMismatch("r or s is out of range")
    if s > HALF_N:
        s = SECP256K1_N - s
    rs = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    for v in (0, 1):
        try:
            candidate = PublicKey.from_signature_and_message(rs + bytes([v]), digest, hasher=None)
        except Exception:  # no point for this recovery id
            continue
        if candidate.format(compressed=False)[1:] == public_key:
            return Signature(v, r, s)
    raise SignatureMismatch("the signature does not recover to the key's public key")


def candidates(digest: bytes, r: int, s: int) -> set[bytes]:
    """The public keys (64 bytes each) a signature of ``digest`` may have come from."""
    rs = r.to_bytes(32, "big") + (SECP256K1_N - s if s > HALF_N else s).to_bytes(32, "big")
    found = set()
    for v in (0, 1):
        try:
            point = PublicKey.from_signature_and_message(rs + bytes([v]), digest, hasher=None)
        except Exception:  # no point for this recovery id
            continue
        found.add(point.format(compressed=False)[1:])
    return found


class Signer(Unpicklable):
    """One relayer's signer: its address (from its key's public key) and how it signs an
    EIP-1559 transaction. Whatever holds the key, the relayer uses it the same way."""

    __slots__ = ("_key", "address", "relayer")

    def __init__(self, relayer: str, key: Key) -> None:
        self.relayer = relayer
        self._key = key
        self.address = address_of(key.public_key)

    @property
    def kind(self) -> str:
        """``key_env``, ``pkcs11`` or ``aws_kms``: for messages, never for decisions."""
        return self._key.kind

    async def sign(
        self,
        *,
        chain_id: int,
        nonce: int,
        to: str,
        value: int,
        data: bytes,
        gas: int,
        max_fee_per_gas: int,
        max_priority_fee_per_gas: int,
    ) -> tuple[bytes, str]:
        """An EIP-1559 transaction signed: its raw bytes and its hash (0x hex).

        The envelope is built here, as EIP-1559 defines it (``0x02 || rlp([chain_id,
        nonce, max_priority_fee_per_gas, max_fee_per_gas, gas, to, value, data,
        access_list, y_parity, r, s])``, signed over the same list without the signature):
        eth_account's validation of a transaction dict took three quarters of the time.
        A ``key_env`` key signs deterministically (RFC 6979), so its bytes are the ones
        eth_account would produce (a unit test compares them).
        """
        fields = [
            chain_id,
            nonce,
            max_priority_fee_per_gas,
            max_fee_per_gas,
            gas,
            _address_bytes(to),
            value,
            data,
            [],
        ]
        digest = keccak(_EIP1559 + rlp.encode(fields))
        signature = await self._key.sign_digest(digest)
        raw = _EIP1559 + rlp.encode([*fields, signature.v, signature.r, signature.s])
        return raw, "0x" + keccak(raw).hex()

    async def sign_digest(self, digest: bytes) -> Signature:
        """A low-``s`` signature of a 32-byte digest that recovers to :attr:`address`."""
        return await self._key.sign_digest(digest)

    async def close(self) -> None:
        """Let go of the key's session or connection (a key in memory has none)."""
        await self._key.close()

    def __repr__(self) -> str:
        return f"Signer(relayer={self.relayer!r}, address={self.address!r}, kind={self.kind!r})"


_EIP1559 = b"\x02"


def _address_bytes(address: str) -> bytes:
    raw = bytes.fromhex(address.removeprefix("0x"))
    if len(raw) != 20:
        raise ValueError(f"not an address: {address!r}")
    return raw


def where(declared: RelayerSpec) -> str:
    """Where a relayer's key is, for messages: ``the key in PAYOUT_KEY``, ``key 'payout'
    in PKCS#11 token 'rflow'``, ``AWS KMS key alias/payout``."""
    if declared.pkcs11 is not None:
        return f"key {declared.pkcs11.key_label!r} in PKCS#11 token {declared.pkcs11.token!r}"
    if declared.aws_kms is not None:
        return f"AWS KMS key {declared.aws_kms.key_id} ({declared.aws_kms.region})"
    return f"the key in {declared.key_env}"


async def open_key(relayer: str, declared: RelayerSpec, env: Mapping[str, str]) -> Key:
    """The key ``declared`` names, opened (a token logged in to, a KMS key's public key
    fetched). :class:`RflowError` ``permission_denied`` when it cannot be used as
    declared, ``signer_unavailable`` when its holder did not answer."""
    if declared.pkcs11 is not None:
        from rflow.relayer import pkcs11

        return await pkcs11.open_key(relayer, declared.pkcs11, env)
    if declared.aws_kms is not None:
        from rflow.relayer import kms

        return await kms.open_key(relayer, declared.aws_kms, env)
    try:
        secret = declared.signer_key(env).get_secret_value()
    except LookupError as exc:
        raise RflowError(FailureKind.PERMISSION_DENIED, f"relayer {relayer}: {exc}") from None
    try:
        raw = bytes.fromhex(secret.strip().removeprefix("0x"))
        if len(raw) != 32:
            raise ValueError
        return LocalKey(raw)
    except Exception:  # the key's text must not reach a message
        raise RflowError(
            FailureKind.PERMISSION_DENIED,
            f"relayer {relayer}: {declared.key_env} does not hold a valid private key",
        ) from None


async def open_signer(project: Project, relayer: str, env: Mapping[str, str]) -> Signer:
    """The signer of ``relayer``: its key opened and its address checked against the one
    declared. :class:`RflowError` ``permission_denied`` naming where the key is (never a
    key, a PIN or a credential) when it cannot sign as declared; ``signer_unavailable``
    when its HSM or KMS did not answer."""
    declared = project.relayers.get(relayer)
    if declared is None:
        raise RflowError(FailureKind.PERMISSION_DENIED, f"no relayer named {relayer!r}")
    key = await open_key(relayer, declared, env)
    signer = Signer(relayer, key)
    if declared.address is not None and declared.address.lower() != signer.address.lower():
        await signer.close()
        raise RflowError(
            FailureKind.PERMISSION_DENIED,
            f"relayer {relayer}: {where(declared)} signs for {signer.address}, "
            f"not the declared address {declared.address}",
        )
    return signer


ASK_TIMEOUT = 15.0
"""Seconds ``rflow validate`` and ``rflow doctor`` wait for a signer's public key."""


def configured(declared: RelayerSpec, env: Mapping[str, str]) -> bool:
    """Whether the environment holds what the signer needs (its key, PIN or credentials);
    validation warns about what is missing."""
    if declared.pkcs11 is not None:
        return bool(env.get(declared.pkcs11.pin_env))
    if declared.aws_kms is not None:
        kms = declared.aws_kms
        needed = [kms.access_key_id_env, kms.secret_access_key_env, kms.endpoint_env]
        return all(env.get(name) for name in needed if name is not None)
    return bool(declared.key_env and env.get(declared.key_env))


async def ask_address(relayer: str, declared: RelayerSpec, env: Mapping[str, str]) -> str:
    """The address ``declared``'s key signs for, asked of whatever holds it (bounded by
    :data:`ASK_TIMEOUT`); :class:`RflowError` when it cannot be asked."""
    try:
        async with asyncio.timeout(ASK_TIMEOUT):
            key = await open_key(relayer, declared, env)
    except TimeoutError:
        raise RflowError(
            FailureKind.SIGNER_UNAVAILABLE,
            f"relayer {relayer}: {where(declared)} did not answer within {ASK_TIMEOUT:.0f}s",
        ) from None
    try:
        return address_of(key.public_key)
    finally:
        await key.close()


async def address_findings(
    project: Project, env: Mapping[str, str]
) -> list[tuple[tuple[str, ...], Literal["error", "warning"], str]]:
    """What asking each relayer's signer for its address finds, for ``rflow validate``:
    ``(data path, severity, message)``. A declared ``address`` the key does not sign for
    is an error at ``relayers.NAME.address``; a signer that cannot be asked from here (a
    variable that holds no key, an HSM or KMS reachable from the workers only) is a
    warning at its declaration. Relayers without a declared address, or whose secrets
    are not set (already a warning), are not asked."""

    async def one(name: str, declared: RelayerSpec) -> Any:
        if declared.address is None or not configured(declared, env):
            return None
        try:
            address = await ask_address(name, declared, env)
        except RflowError as exc:
            why = exc.message.removeprefix(f"relayer {name}: ")
            return (
                ("relayers", name, declared.kind),
                "warning",
                f"{why}: the address was not checked",
            )
        if address.lower() != declared.address.lower():
            return (
                ("relayers", name, "address"),
                "error",
                f"{where(declared)} signs for {address}, not for the declared address "
                f"{declared.address}",
            )
        return None

    found = await asyncio.gather(*(one(n, r) for n, r in project.relayers.items()))
    return [finding for finding in found if finding is not None]
