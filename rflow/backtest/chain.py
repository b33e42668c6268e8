"""The chain as a backtest sees it: read-only calls at a firing's block.

Sends are never broadcast: a send is simulated with ``eth_call`` (does it revert?) and
``eth_estimateGas`` (what would it use?) at the block of the original firing, on the
network's own nodes, or, with ``--fork-url``, on an anvil fork of that URL reset to that
block. Reads and queries run at the block too. A node that keeps no state that far back
(not an archive node) is asked at its latest block instead, and the answer says so.

Every answer is kept: the deployed version's replay and the candidate's ask the same
question once, and get the same answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rflow.codecs import json
from rflow.ingress.pool import RpcPool, network_endpoints
from rflow.ingress.rpc import JsonRpc, RpcError, RpcUnavailable
from rflow.lang.model import Project
from rflow.relayer.build import revert_reason
from rflow.secrets import Secrets
from rflow.settings import Settings

MISSING_STATE = (
    "missing trie node",
    "header not found",
    "unknown block",
    "block not found",
    "state not available",
    "historical state",
    "state is not available",
    "is not available",
    "pruned",
    "state histories",
    "not archive",
    "blockoutofrange",
    "block out of range",
    "distance to target block",
)
"""What nodes answer when they keep no state at the block asked (lower-case parts)."""

READ_ONLY = frozenset(
    {
        "eth_blockNumber",
        "eth_call",
        "eth_chainId",
        "eth_estimateGas",
        "eth_feeHistory",
        "eth_gasPrice",
        "eth_getBalance",
        "eth_getBlockByHash",
        "eth_getBlockByNumber",
        "eth_getBlockTransactionCountByNumber",
        "eth_getCode",
        "eth_getLogs",
        "eth_getProof",
        "eth_getStorageAt",
        "eth_getTransactionByHash",
        "eth_getTransactionCount",
        "eth_getTransactionReceipt",
        "eth_maxPriorityFeePerGas",
        "eth_blobBaseFee",
        "eth_syncing",
        "net_version",
        "web3_clientVersion",
    }
)
"""The JSON-RPC methods a ``query`` step may make in the sandbox: none changes a chain."""

BLOCK_PARAM = {
    "eth_call": 1,
    "eth_estimateGas": 1,
    "eth_getBalance": 1,
    "eth_getCode": 1,
    "eth_getTransactionCount": 1,
    "eth_getStorageAt": 2,
    "eth_getProof": 2,
}
"""Where each method takes its block: a query that says ``latest`` (or nothing) is asked
at the firing's block instead."""

MOVING_TAGS = frozenset({"latest", "pending", "safe", "finalized"})


class ChainError(Exception):
    """A network could not be asked at all (no URL, no node answering): the backtest
    cannot run."""


@dataclass(frozen=True, slots=True)
class Simulated:
    """What the chain says of one send: the gas it would use, or why it would revert."""

    gas_used: int | None
    revert: str | None
    source: str
    """``simulated``, ``fork`` or ``latest``."""
    block: int | None


@dataclass(frozen=True, slots=True)
class Read:
    """A read's answer, and whether it was asked at the latest block instead."""

    result: Any
    latest: bool
    error: RpcError | None = None


def anvil_binary() -> str | None:
    """anvil on the PATH, else the copy the local stack installs."""
    found = shutil.which("anvil")
    if found:
        return found
    stack = (
        Path(__file__).resolve().parents[2]
        / ".stack/npm/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil"
    )
    return str(stack) if stack.exists() else None


def missing_state(error: BaseException) -> bool:
    """Whether ``error`` says the node has no state at the block asked."""
    text = str(error).lower().replace("_", " ")
    return any(part in text for part in MISSING_STATE)


class Fork:
    """An anvil fork of ``url``, reset to the block each simulation asks for."""

    def __init__(self, url: str, binary: str | None = None) -> None:
        self.url = url
        self.binary = binary or anvil_binary()
        self.proc: subprocess.Popen[bytes] | None = None
        self.rpc: JsonRpc | None = None
        self.chain_id: int | None = None
        self.block: int | None = None
        self.latest = False
        """Whether the fork could not be reset to the block asked and runs at the URL's
        latest block instead."""

    async def start(self, block: int | None = None) -> Fork:
        """Start the fork (at ``block`` when given: anvil's ``--fork-block-number``)."""
        if self.binary is None:
            raise ChainError(
                "--fork-url needs anvil (Foundry) on the PATH, or the local stack's copy "
                "(scripts/stack install)"
            )
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.proc = subprocess.Popen(
            [
                self.binary,
                *("--host", "127.0.0.1", "--port", str(port)),
                *("--fork-url", self.url, "--no-mining", "--silent"),
                *(("--fork-block-number", str(block)) if block is not None else ()),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.rpc = await JsonRpc(f"http://127.0.0.1:{port}", timeout=60).__aenter__()
        deadline = time.monotonic() + 60
        while True:
            try:
                self.chain_id = await self.rpc.chain_id()
                self.block = block
                return self
            except RpcUnavailable:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    why = (self.proc.stderr.read() if self.proc.stderr else b"").decode(
                        "utf-8", "replace"
                    )
                    await self.close()
                    # anvil quotes the URL it forks, which may carry a provider's key.
                    why = Secrets({}).hide_urls(self.url).scrub(why.strip()[-300:])
                    raise ChainError(f"anvil could not fork --fork-url: {why}") from None
                await asyncio.sleep(0.05)

    async def at(self, block: int) -> None:
        """Reset the fork to ``block`` (no change when it is there already)."""
        assert self.rpc is not None
        if self.block == block:
            return
        try:
            await self.rpc.call(
                "anvil_reset", {"forking": {"jsonRpcUrl": self.url, "blockNumber": block}}
            )
            self.latest = False
        except RpcError as exc:
            if not missing_state(exc):
                why = Secrets({}).hide_urls(self.url).scrub(exc.message)
                raise ChainError(f"anvil could not fork block {block}: {why}") from None
            await self.rpc.call("anvil_reset", {"forking": {"jsonRpcUrl": self.url}})
            self.latest = True
        self.block = block

    async def close(self) -> None:
        if self.rpc is not None:
            await self.rpc.__aexit__(None, None, None)
            self.rpc = None
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


class Chain:
    """The networks of the projects compared, asked read-only, every answer kept."""

    def __init__(
        self,
        settings: Settings,
        projects: list[Project],
        env: Mapping[str, str],
        *,
        fork_url: str | None = None,
    ) -> None:
        self.settings = settings
        self.projects = projects
        self.env = env
        self.fork_url = fork_url
        self.fork: Fork | None = None
        self._pools: dict[str, RpcPool] = {}
        self._answers: dict[tuple[Any, ...], Any] = {}
        self._times: dict[tuple[str, int], int] = {}
        self._heads: dict[str, int] = {}
        self._forked: set[str] | None = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> Chain:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for pool in self._pools.values():
            with contextlib.suppress(Exception):
                await pool.__aexit__(None, None, None)
        if self.fork is not None:
            await self.fork.close()

    # --- nodes --------------------------------------------------------------------

    def chain_id(self, network: str) -> int | None:
        for project in self.projects:
            declared = project.networks.get(network)
            if declared is not None:
                return declared.chain_id
        return None

    async def _pool(self, network: str) -> RpcPool:
        pool = self._pools.get(network)
        if pool is not None:
            return pool
        project = next((p for p in self.projects if network in p.networks), None)
        if project is None:
            raise ChainError(f"network {network!r} is declared by neither project")
        try:
            urls = network_endpoints(self.settings, project, network, self.env)
        except LookupError as exc:
            raise ChainError(f"network {network}: {exc}") from None
        pool = await RpcPool(network, urls).__aenter__()
        self._pools[network] = pool
        return pool

    async def _forks(self, network: str, block: int) -> bool:
        """Whether ``network`` is simulated on the fork (its chain id is the fork's); the
        fork starts at the first block asked."""
        if self.fork_url is None:
            return False
        if self.fork is None:
            try:
                self.fork = await Fork(self.fork_url).start(block)
            except ChainError:  # the URL keeps no state there: at its head, then reset
                self.fork = await Fork(self.fork_url).start()
        return self.chain_id(network) == self.fork.chain_id

    async def _ask(self, network: str, method: str, *params: Any) -> Any:
        try:
            return await (await self._pool(network)).call(method, *params)
        except RpcUnavailable as exc:
            raise ChainError(f"network {network}: {method} unanswered: {exc}") from None

    # --- blocks -------------------------------------------------------------------

    async def head(self, network: str) -> int:
        """The network's latest block (asked once per backtest)."""
        if network not in self._heads:
            self._heads[network] = int(await self._ask(network, "eth_blockNumber"), 16)
        return self._heads[network]

    async def timestamp(self, network: str, number: int) -> int:
        key = (network, number)
        if key not in self._times:
            block = await self._ask(network, "eth_getBlockByNumber", hex(number), False)
            if block is None:
                raise ChainError(f"network {network}: no block {number}")
            self._times[key] = int(block["timestamp"], 16)
        return self._times[key]

    async def block_at(self, network: str, when: datetime) -> int:
        """The last block of ``network`` mined at or before ``when`` (0 when the chain
        starts later)."""
        target = int(when.timestamp())
        low, high = 0, await self.head(network)
        if await self.timestamp(network, high) <= target:
            return high
        while low < high:
            middle = (low + high + 1) // 2
            if await self.timestamp(network, middle) <= target:
                low = middle
            else:
                high = middle - 1
        return low

    async def base_fee(self, network: str, block: int) -> int:
        """What a unit of gas cost at ``block``: its base fee (the gas price before 1559)."""
        key = ("base_fee", network, block)
        if key not in self._answers:
            found = await self._ask(network, "eth_getBlockByNumber", hex(block), False)
            fee = (found or {}).get("baseFeePerGas")
            if fee is None:
                fee = await self._ask(network, "eth_gasPrice")
            self._answers[key] = int(fee, 16)
        return self._answers[key]

    # --- questions ----------------------------------------------------------------

    async def simulate(
        self, network: str, block: int, call: dict[str, Any], gas_limit: int | None
    ) -> Simulated:
        """``call`` (from, to, value, data) at ``block``: reverts or not, and its gas."""
        key = ("send", network, block, json.dumps(call), gas_limit)
        if key in self._answers:
            return self._answers[key]
        async with self._lock:
            if await self._forks(network, block):
                answer = await self._on_fork(block, call)
            else:
                answer = await self._on_node(network, block, call)
        self._answers[key] = answer
        return answer

    async def _on_node(self, network: str, block: int, call: dict[str, Any]) -> Simulated:
        tag, source = hex(block), "simulated"
        for _ in range(2):
            try:
                await self._ask(network, "eth_call", call, tag)
                gas = int(await self._ask(network, "eth_estimateGas", call, tag), 16)
                return Simulated(gas, None, source, block if source == "simulated" else None)
            except RpcError as exc:
                if missing_state(exc) and tag != "latest":
                    tag, source = "latest", "latest"
                    continue
                return Simulated(None, revert_reason(exc.data) or exc.message, source, block)
        raise AssertionError("unreachable")

    async def _on_fork(self, block: int, call: dict[str, Any]) -> Simulated:
        fork = self.fork
        assert fork is not None and fork.rpc is not None
        await fork.at(block)
        source = "latest" if fork.latest else "fork"
        try:
            await fork.rpc.call("eth_call", call, "latest")
            gas = int(await fork.rpc.call("eth_estimateGas", call, "latest"), 16)
            return Simulated(gas, None, source, block)
        except RpcError as exc:
            return Simulated(None, revert_reason(exc.data) or exc.message, source, block)
        except RpcUnavailable as exc:
            raise ChainError(f"the anvil fork did not answer: {exc}") from None

    async def read(self, network: str, block: int, method: str, params: list[Any]) -> Read:
        """``method`` with ``params`` as of ``block`` (a read-only method; see
        :data:`READ_ONLY`); an error the node answered comes back in ``error``."""
        params = at_block(method, params, block)
        key = ("read", network, block, method, json.dumps(params))
        if key in self._answers:
            return self._answers[key]
        if method == "eth_blockNumber":
            answer = Read(hex(block), False)
        else:
            async with self._lock:
                answer = await self._read(network, block, method, params)
        self._answers[key] = answer
        return answer

    async def _read(self, network: str, block: int, method: str, params: list[Any]) -> Read:
        if await self._forks(network, block):
            fork = self.fork
            assert fork is not None and fork.rpc is not None
            await fork.at(block)
            # Reset to the block, the fork's head is the firing's block; a fork that
            # could not reach it runs at the URL's head, which the block then names not.
            asked = (
                [("latest" if p == hex(block) else p) for p in params] if fork.latest else params
            )
            try:
                return Read(await fork.rpc.call(method, *asked), fork.latest)
            except RpcError as exc:
                return Read(None, fork.latest, exc)
            except RpcUnavailable as exc:
                raise ChainError(f"the anvil fork did not answer: {exc}") from None
        try:
            return Read(await (await self._pool(network)).call(method, *params), False)
        except RpcError as exc:
            if not missing_state(exc):
                return Read(None, False, exc)
        except RpcUnavailable as exc:
            raise ChainError(f"network {network}: {method} unanswered: {exc}") from None
        latest = [p if p != hex(block) else "latest" for p in params]
        try:
            return Read(await (await self._pool(network)).call(method, *latest), True)
        except RpcError as exc:
            return Read(None, True, exc)


def at_block(method: str, params: list[Any], block: int) -> list[Any]:
    """``params`` of ``method`` with a moving block tag (or none) replaced by ``block``."""
    params = list(params)
    tag = hex(block)
    index = BLOCK_PARAM.get(method)
    if index is not None:
        if len(params) <= index:
            params += [None] * (index - len(params)) + [tag]
        elif params[index] is None or params[index] in MOVING_TAGS:
            params[index] = tag
    elif method in ("eth_getBlockByNumber", "eth_getBlockTransactionCountByNumber"):
        if params and params[0] in MOVING_TAGS:
            params[0] = tag
    elif method == "eth_feeHistory" and len(params) >= 2 and params[1] in MOVING_TAGS:
        params[1] = tag
    elif method == "eth_getLogs" and params and isinstance(params[0], dict):
        query = dict(params[0])
        for name in ("fromBlock", "toBlock"):
            if query.get(name) in MOVING_TAGS or (name == "toBlock" and name not in query):
                query[name] = tag
        params[0] = query
    return params
