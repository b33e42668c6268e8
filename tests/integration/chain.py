"""Chain helpers for integration tests: deploy, transact, mine and reorg on anvil.

Contracts come from ``tests/contracts/build/<Name>.json`` (``scripts/compile-contracts``
writes them; they are committed, so no compiler is needed here). Every helper takes an
``AsyncWeb3``; :func:`connect` makes one. Receipts are polled every few milliseconds:
web3's default of 100 ms would dominate a test's run time.

The stack's anvil is shared by every test running at the same time, so prefer
:func:`funded_account` (a fresh account, no nonce races with other tests) over the
dev key, and run reorgs on a :func:`private_anvil` (a reorg on the shared chain can
replace another test's blocks).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import AsyncHTTPProvider, AsyncWeb3

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "tests" / "contracts" / "build"
ANVIL_BIN = (
    REPO / ".stack" / "npm" / "node_modules" / "@foundry-rs" / "anvil-linux-amd64" / "bin" / "anvil"
)

DEV_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
"""anvil's first default account (well known; funded only on local dev chains)."""


def connect(url: str) -> AsyncWeb3:
    """An ``AsyncWeb3`` on ``url`` (close it with ``await w3.provider.disconnect()``)."""
    return AsyncWeb3(AsyncHTTPProvider(url))


@cache
def artifact(name: str) -> dict[str, Any]:
    """The build JSON of contract ``name``: ``{"abi": [...], "bytecode": "0x..."}``."""
    return json.loads((BUILD / f"{name}.json").read_text())


def artifact_path(name: str) -> Path:
    """The build JSON file of contract ``name`` (usable as a contract's ``abi`` file)."""
    return BUILD / f"{name}.json"


async def rpc(w3: AsyncWeb3, method: str, *params: Any) -> Any:
    """A raw JSON-RPC call; raises ``RuntimeError`` with the node's error."""
    answer = await w3.provider.make_request(method, list(params))
    if answer.get("error"):
        raise RuntimeError(f"{method} failed: {answer['error']}")
    return answer.get("result")


async def funded_account(w3: AsyncWeb3, ether: int = 100) -> LocalAccount:
    """A new account holding ``ether`` (set with ``anvil_setBalance``, no transaction)."""
    account = Account.create()
    await rpc(w3, "anvil_setBalance", account.address, hex(ether * 10**18))
    return account


def dev_account() -> LocalAccount:
    """anvil's first default account (shared: other tests may use its nonces too)."""
    return Account.from_key(DEV_KEY)


async def wait_receipt(
    w3: AsyncWeb3, tx_hash: Any, *, timeout: float = 30.0, interval: float = 0.005
) -> Any:
    """The receipt of ``tx_hash``, polled every ``interval`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        receipt = await rpc(w3, "eth_getTransactionReceipt", _hex(tx_hash))
        if receipt is not None:
            return receipt
        if time.monotonic() > deadline:
            raise AssertionError(f"no receipt for {_hex(tx_hash)} after {timeout}s")
        await asyncio.sleep(interval)


async def signed(w3: AsyncWeb3, account: LocalAccount, tx: dict[str, Any]) -> bytes:
    """``tx`` completed (chain id, nonce, gas, EIP-1559 fees) and signed by ``account``."""
    tx = dict(tx)
    tx.setdefault("from", account.address)
    tx.setdefault("chainId", await w3.eth.chain_id)
    tx.setdefault("nonce", await w3.eth.get_transaction_count(account.address, "pending"))
    tx.setdefault("value", 0)
    if "gas" not in tx:
        tx["gas"] = int(await w3.eth.estimate_gas(tx) * 1.2) + 10_000
    if "maxFeePerGas" not in tx and "gasPrice" not in tx:
        base = (await w3.eth.get_block("latest"))["baseFeePerGas"]
        tx["maxPriorityFeePerGas"] = 10**9
        tx["maxFeePerGas"] = base * 2 + 10**9
        tx["type"] = 2
    tx.pop("from")
    return bytes(account.sign_transaction(tx).raw_transaction)


async def send(w3: AsyncWeb3, account: LocalAccount, tx: dict[str, Any]) -> dict[str, Any]:
    """Sign and send ``tx``; the receipt (a JSON-RPC object), failing on a revert."""
    raw = await signed(w3, account, tx)
    tx_hash = await rpc(w3, "eth_sendRawTransaction", "0x" + raw.hex())
    receipt = await wait_receipt(w3, tx_hash)
    if int(receipt["status"], 16) != 1:
        raise AssertionError(f"transaction {tx_hash} reverted")
    return receipt


async def deploy(
    w3: AsyncWeb3, name: str, *args: Any, account: LocalAccount
) -> tuple[str, dict[str, Any]]:
    """Deploy contract ``name`` from its build JSON; (checksummed address, receipt)."""
    build = artifact(name)
    factory = w3.eth.contract(abi=build["abi"], bytecode=build["bytecode"])
    data = factory.constructor(*args).data_in_transaction
    receipt = await send(w3, account, {"data": data})
    return AsyncWeb3.to_checksum_address(receipt["contractAddress"]), receipt


def calldata(w3: AsyncWeb3, name: str, address: str, function: str, *args: Any) -> str:
    """The call data of ``function(*args)`` on contract ``name`` at ``address``."""
    contract = w3.eth.contract(address=address, abi=artifact(name)["abi"])
    return contract.encode_abi(function, args=list(args))


async def transact(
    w3: AsyncWeb3, name: str, address: str, function: str, *args: Any, account: LocalAccount
) -> dict[str, Any]:
    """Call ``function(*args)`` of contract ``name`` at ``address`` in a transaction."""
    data = calldata(w3, name, address, function, *args)
    return await send(w3, account, {"to": address, "data": data})


async def head(w3: AsyncWeb3) -> dict[str, Any]:
    """The latest block (JSON-RPC object: number, hash, parentHash, ... as 0x hex)."""
    return await rpc(w3, "eth_getBlockByNumber", "latest", False)


async def mine(w3: AsyncWeb3, blocks: int = 1) -> None:
    """Mine ``blocks`` empty blocks at once (``anvil_mine``)."""
    await rpc(w3, "anvil_mine", hex(blocks))


async def evm_mine(w3: AsyncWeb3) -> None:
    """Mine one block with whatever is pending (``evm_mine``)."""
    await rpc(w3, "evm_mine")


async def reorg(
    w3: AsyncWeb3, depth: int, transactions: Sequence[tuple[bytes | dict[str, Any], int]] = ()
) -> None:
    """Replace the last ``depth`` blocks (``anvil_reorg``).

    The new blocks hold only ``transactions``: pairs of (signed raw transaction, or a
    transaction request for an unlocked account; offset of the new block, 0 for the
    first replaced height up to ``depth - 1``). The chain keeps its height.
    """
    pairs = [
        ["0x" + tx.hex() if isinstance(tx, bytes) else tx, offset] for tx, offset in transactions
    ]
    await rpc(w3, "anvil_reorg", depth, pairs)


@asynccontextmanager
async def private_anvil(
    chain_id: int = 31337, port: int | None = None, args: Sequence[str] = ()
) -> AsyncIterator[str]:
    """A fresh anvil of our own (the stack's binary) on ``port`` or a free one, with
    extra command-line ``args``; yields its URL.

    For tests that reorg, roll back, or need blocks no other test mines in between.
    """
    if not ANVIL_BIN.exists():
        raise AssertionError(f"anvil not found at {ANVIL_BIN}: run scripts/stack install")
    if port is None:
        port = free_port()
    proc = subprocess.Popen(
        [
            str(ANVIL_BIN),
            *("--host", "127.0.0.1", "--port", str(port), "--chain-id", str(chain_id)),
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        w3 = connect(url)
        deadline = time.monotonic() + 20
        while True:
            try:
                await rpc(w3, "eth_chainId")
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"private anvil on port {port} did not start") from None
                await asyncio.sleep(0.02)
        await w3.provider.disconnect()
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _hex(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "0x" + bytes(value).hex()
