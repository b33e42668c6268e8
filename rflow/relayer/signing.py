"""Relayer keys and transaction signing.

A key comes from the environment variable its relayer declares and lives only in a
:class:`Signer`: never logged, never in a record, never in a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from eth_account import Account
from eth_keys.datatypes import PrivateKey

from rflow.failures import FailureKind, RflowError
from rflow.lang.model import Project


@dataclass(frozen=True, slots=True)
class Signer:
    """One relayer's signing key and its address (checksummed). The key is kept parsed,
    with its public key worked out once: from raw bytes, every signature would derive it
    again (an elliptic-curve multiplication)."""

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
        """An EIP-1559 transaction signed: its raw bytes and its hash (0x hex)."""
        signed = Account.sign_transaction(
            {
                "type": 2,
                "chainId": chain_id,
                "nonce": nonce,
                "to": to,
                "value": value,
                "data": data,
                "gas": gas,
                "maxFeePerGas": max_fee_per_gas,
                "maxPriorityFeePerGas": max_priority_fee_per_gas,
            },
            self._key,
        )
        return bytes(signed.raw_transaction), "0x" + bytes(signed.hash).hex()


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
