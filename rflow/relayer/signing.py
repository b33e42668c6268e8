"""Relayer keys and transaction signing.

A key comes from the environment variable its relayer declares and lives only in a
:class:`Signer`: never logged, never in a record, never in a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import rlp
from coincurve import PrivateKey
from eth_account import Account
from eth_utils import keccak

from rflow.failures import FailureKind, RflowError
from rflow.lang.model import Project


@dataclass(frozen=True, slots=True)
class Signer:
    """One relayer's signing key and its address (checksummed). The key is kept parsed,
    so a signature does not derive its public key again (an elliptic-curve
    multiplication)."""

    relayer: str
    address: str
    _key: PrivateKey = field(repr=False)

    def sign(
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
        libsecp256k1 signs deterministically (RFC 6979) with a low ``s``, so the bytes are
        the ones eth_account would produce (a unit test compares them).
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
        signature = self._key.sign_recoverable(digest, hasher=None)
        r, s = signature[:32], signature[32:64]
        raw = _EIP1559 + rlp.encode(
            [*fields, signature[64], int.from_bytes(r, "big"), int.from_bytes(s, "big")]
        )
        return raw, "0x" + keccak(raw).hex()


_EIP1559 = b"\x02"


def _address_bytes(address: str) -> bytes:
    raw = bytes.fromhex(address.removeprefix("0x"))
    if len(raw) != 20:
        raise ValueError(f"not an address: {address!r}")
    return raw


def signer(project: Project, relayer: str, env: Mapping[str, str]) -> Signer:
    """The signer of ``relayer``; ``permission_denied`` naming the variable when its key is
    missing or is not a private key (the value itself is never shown)."""
    declared = project.relayers.get(relayer)
    if declared is None:
        raise RflowError(FailureKind.PERMISSION_DENIED, f"no relayer named {relayer!r}")
    try:
        secret = declared.signer_key(env).get_secret_value()
    except LookupError as exc:
        raise RflowError(FailureKind.PERMISSION_DENIED, f"relayer {relayer}: {exc}") from None
    try:
        account = Account.from_key(secret)
    except Exception:  # the key's text must not reach a message
        raise RflowError(
            FailureKind.PERMISSION_DENIED,
            f"relayer {relayer}: {declared.key_env} does not hold a valid private key",
        ) from None
    if declared.address is not None and declared.address.lower() != account.address.lower():
        raise RflowError(
            FailureKind.PERMISSION_DENIED,
            f"relayer {relayer}: the key in {declared.key_env} signs for {account.address}, "
            f"not the declared address {declared.address}",
        )
    return Signer(relayer, account.address, PrivateKey(bytes(account.key)))
