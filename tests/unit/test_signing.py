"""Relayer signing: the EIP-1559 envelope built by rflow, against eth_account's."""

from __future__ import annotations

import asyncio

from eth_account import Account
from eth_utils import to_checksum_address
from hypothesis import given, settings
from hypothesis import strategies as st

from rflow.relayer.signing import LocalKey, Signer

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
