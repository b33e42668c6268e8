"""Relayer signing: the EIP-1559 envelope built by rflow, against eth_account's; one
interface whatever holds the key; low s, the recovery id, and secrets kept."""

from __future__ import annotations

import asyncio
import copy
import os
import pickle

import pytest
from coincurve import PrivateKey
from eth_account import Account
from eth_keys import keys as eth_keys
from eth_utils import to_checksum_address
from hypothesis import given, settings
from hypothesis import strategies as st

from rflow.failures import RflowError
from rflow.lang import validate_text
from rflow.relayer.signing import (
    HALF_N,
    SECP256K1_N,
    LocalKey,
    Signature,
    SignatureMismatch,
    Signer,
    address_of,
    open_signer,
    recovered,
)

ACCOUNT = Account.from_key("0x" + "42" * 32)
SIGNER = Signer("payout", LocalKey(bytes(ACCOUNT.key)))

uint64 = st.integers(min_value=0, max_value=2**64 - 1)
uint256 = st.integers(min_value=0, max_value=2**256 - 1)


@settings(max_examples=200, deadline=None)
@given(
    chain_id=st.integers(min_value=1, max_value=2**64 - 1),
    nonce=uint64,
    to=st.binary(min_size=20, max_size=20),
    value=uint256,
    data=st.binary(max_size=300),
    gas=uint64,
    max_fee=uint256,
    tip=uint256,
)
def test_a_signed_send_is_byte_for_byte_what_eth_account_signs(
    chain_id, nonce, to, value, data, gas, max_fee, tip
):
    address = to_checksum_address(to)
    raw, tx_hash = asyncio.run(
        SIGNER.sign(
            chain_id=chain_id,
            nonce=nonce,
            to=address,
            value=value,
            data=data,
            gas=gas,
            max_fee_per_gas=max_fee,
            max_priority_fee_per_gas=tip,
        )
    )
    expected = Account.sign_transaction(
        {
            "type": 2,
            "chainId": chain_id,
            "nonce": nonce,
            "to": address,
            "value": value,
            "data": data,
            "gas": gas,
            "maxFeePerGas": max_fee,
            "maxPriorityFeePerGas": tip,
        },
        ACCOUNT.key,
    )
    assert raw == bytes(expected.raw_transaction)
    assert tx_hash == "0x" + bytes(expected.hash).hex()
    assert Account.recover_transaction(raw) == ACCOUNT.address


# --- one interface for every key holder ---------------------------------------------


class Device:
    """A key holder that answers as an HSM or a KMS does: ``r`` and ``s`` only, and ``s``
    high or low as it comes (here: the high one, whenever the low one was made)."""

    kind = "device"

    def __init__(self, key: PrivateKey, other: PrivateKey | None = None) -> None:
        self._key, self._other = key, other or key
        self.public_key = key.public_key.format(compressed=False)[1:]

    async def sign_digest(self, digest: bytes) -> Signature:
        sig = self._other.sign_recoverable(digest, hasher=None)
        r, s = int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:64], "big")
        return recovered(digest, r, SECP256K1_N - s, self.public_key)

    async def close(self) -> None:
        return None


def test_a_device_s_is_made_low_and_v_is_the_recovery_that_gives_its_address():
    key = PrivateKey()
    signer = Signer("vault", Device(key))
    for _ in range(300):
        digest = os.urandom(32)
        signature = asyncio.run(signer.sign_digest(digest))
        assert signature.s <= HALF_N
        rsv = eth_keys.Signature(vrs=(signature.v, signature.r, signature.s))
        assert rsv.recover_public_key_from_msg_hash(digest).to_checksum_address() == signer.address


def test_a_signature_by_another_key_or_out_of_range_is_refused():
    digest = os.urandom(32)
    with pytest.raises(SignatureMismatch, match="does not recover"):
        asyncio.run(Device(PrivateKey(), other=PrivateKey()).sign_digest(digest))
    public = PrivateKey().public_key.format(compressed=False)[1:]
    for r, s in ((0, 1), (1, 0), (SECP256K1_N, 1), (1, SECP256K1_N)):
        with pytest.raises(SignatureMismatch, match="out of range"):
            recovered(digest, r, s, public)


def test_the_address_comes_from_the_public_key():
    key = PrivateKey(bytes(ACCOUNT.key))
    assert address_of(key.public_key.format(compressed=False)[1:]) == ACCOUNT.address
    assert SIGNER.address == ACCOUNT.address and SIGNER.kind == "key_env"


def test_a_local_key_is_never_shown_pickled_or_copied():
    secret = bytes(ACCOUNT.key).hex()
    assert secret not in repr(SIGNER) and secret not in repr(SIGNER._key)
    for thing in (SIGNER, SIGNER._key):
        with pytest.raises(TypeError, match="never pickled or copied"):
            pickle.dumps(thing)
        with pytest.raises(TypeError):
            copy.copy(thing)


def test_a_key_env_relayer_opens_the_same_signer_and_refuses_what_is_no_key():
    project = validate_text(
        "networks: { local: { chain_id: 31337 } }\n"
        "relayers: { dev: { key_env: DEV_KEY, networks: [local] } }\n",
        {},
    ).project
    assert project is not None
    opened = asyncio.run(open_signer(project, "dev", {"DEV_KEY": bytes(ACCOUNT.key).hex()}))
    assert opened.address == ACCOUNT.address
    for bad in ("0x1234", "zz" * 32, "00" * 32, "ff" * 32):
        with pytest.raises(RflowError, match="DEV_KEY does not hold a valid private key") as err:
            asyncio.run(open_signer(project, "dev", {"DEV_KEY": bad}))
        assert bad not in err.value.message
