"""The local chain: anvil answers JSON-RPC and mines a signed transfer."""

from __future__ import annotations

import pytest
from eth_account import Account
from web3 import AsyncHTTPProvider, AsyncWeb3

from rflow.settings import Settings

# anvil's first default account (well known; funded only on local dev chains).
DEV_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"


@pytest.fixture
async def w3(settings: Settings):
    w3 = AsyncWeb3(AsyncHTTPProvider(settings.rpc_url("local")))
    yield w3
    await w3.provider.disconnect()


async def test_anvil_answers_chain_id(w3):
    assert await w3.eth.chain_id == 31337


async def test_anvil_mines_a_signed_transfer(w3):
    sender = Account.from_key(DEV_KEY)
    recipient = Account.create().address
    nonce = await w3.eth.get_transaction_count(sender.address, "pending")
    block = await w3.eth.get_block("latest")
    tx = {
        "chainId": 31337,
        "nonce": nonce,
        "to": recipient,
        "value": 12345,
        "gas": 21000,
        "maxFeePerGas": block["baseFeePerGas"] * 2 + 10**9,
        "maxPriorityFeePerGas": 10**9,
        "type": 2,
    }
    signed = sender.sign_transaction(tx)
    tx_hash = await w3.eth.send_raw_transaction(signed.raw_transaction)
    receipt = await w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30, poll_latency=0.01)
    assert receipt["status"] == 1
    assert await w3.eth.get_balance(recipient) == 12345
