"""A JSON-RPC proxy in front of anvil that answers as a lagging provider would.

Load-balanced providers answer from several nodes a few seconds (or blocks) apart: the
node that took a broadcast has the transaction, the one asked for its receipt a moment
later may not. Each fault is a setting that can change while the proxy runs:

- ``hide_receipts`` / ``hide_transactions``: for that many seconds after the proxy first
  sees a transaction (its broadcast, or a lookup of its hash), its receipt /
  ``eth_getTransactionByHash`` answers ``null``; chain head, nonces and blocks stay true.
- ``as_errors``: what is hidden is answered with a JSON-RPC error instead of ``null``.
- ``lag_blocks``: the node is that many blocks behind: its head, its ``latest``, its
  nonces and its receipts are those of the block that far back; a mined transaction
  newer than that shows as pending; blocks past its head do not exist.
- ``down``: every request is refused (HTTP 503).
- ``failing``: every call is answered with a JSON-RPC error.

Broadcasts always reach anvil (a provider relays them even when its own view lags).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from eth_utils import keccak

from tests.integration.harness import free_port
from tests.integration.rpc_front import RpcFront

_BLOCK_PARAM = {
    "eth_getTransactionCount": 1,
    "eth_getBalance": 1,
    "eth_getCode": 1,
    "eth_call": 1,
    "eth_estimateGas": 1,
}


@dataclass
class LaggingRpc(RpcFront):
    upstream: str
    hide_receipts: float = 0.0
    hide_transactions: float = 0.0
    as_errors: bool = False
    lag_blocks: int = 0
    down: bool = False
    failing: bool = False
    port: int = field(default_factory=free_port)
    seen: dict[str, float] = field(default_factory=dict)
    hidden: Counter = field(default_factory=Counter)
    """What was hidden: ``receipt``, ``transaction``, ``lagged`` answers."""
    calls: Counter = field(default_factory=Counter)
    """Calls answered, by method."""

    def __post_init__(self) -> None:
        self._open()
        self._ids = 0

    # --- the proxy ----------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        if self.down:
            return web.Response(status=503, text="endpoint down")
        body = json.loads(await request.read())
        if isinstance(body, list):
            answers = [await self.answer(call) for call in body]
            return web.json_response(answers)
        return web.json_response(await self.answer(body))

    async def answer(self, call: dict[str, Any]) -> dict[str, Any]:
        method, params, ident = call.get("method"), list(call.get("params") or []), call.get("id")
        self.calls[method] += 1
        if self.failing:
            return _error(ident, -32603, "internal error")
        head = None
        if self.lag_blocks:
            head = max(int(await self.upstream_call("eth_blockNumber"), 16) - self.lag_blocks, 0)
        if method == "eth_sendRawTransaction":
            self._saw("0x" + keccak(bytes.fromhex(params[0][2:])).hex())
            return await self.forward(call)
        if method in ("eth_getTransactionReceipt", "eth_getTransactionByHash"):
            tx_hash = str(params[0]).lower()
            self._saw(tx_hash)
            hide = (
                self.hide_receipts
                if method == "eth_getTransactionReceipt"
                else self.hide_transactions
            )
            what = "receipt" if method == "eth_getTransactionReceipt" else "transaction"
            if time.monotonic() - self.seen[tx_hash] < hide:
                self.hidden[what] += 1
                if self.as_errors:
                    return _error(ident, -32000, f"{what} temporarily unavailable")
                return _result(ident, None)
            answer = await self.forward(call)
            found = answer.get("result")
            mined_at = found.get("blockNumber") if found else None
            if head is not None and mined_at is not None and int(mined_at, 16) > head:
                self.hidden["lagged"] += 1
                if method == "eth_getTransactionReceipt":
                    return _result(ident, None)
                pending = {**found, "blockNumber": None, "blockHash": None}
                return _result(ident, {**pending, "transactionIndex": None})
            return answer
        if head is None:
            return await self.forward(call)
        return await self.lagged(call, method, params, ident, head)

    async def lagged(
        self, call: dict[str, Any], method: str, params: list[Any], ident: Any, head: int
    ) -> dict[str, Any]:
        """A call answered as of block ``head``."""
        if method == "eth_blockNumber":
            return _result(ident, hex(head))
        if method in ("eth_getBlockByNumber", "eth_feeHistory"):
            index = 0 if method == "eth_getBlockByNumber" else 1
            tag = params[index]
            if tag in ("latest", "pending", "safe", "finalized"):
                params[index] = hex(head)
            elif isinstance(tag, str) and tag.startswith("0x") and int(tag, 16) > head:
                if method == "eth_getBlockByNumber":
                    return _result(ident, None)
                params[index] = hex(head)
            return await self.forward({**call, "params": params})
        if method == "eth_getBlockByHash":
            answer = await self.forward(call)
            found = answer.get("result")
            if found and int(found["number"], 16) > head:
                return _result(ident, None)
            return answer
        if method in _BLOCK_PARAM:
            index = _BLOCK_PARAM[method]
            tag = params[index] if len(params) > index else "latest"
            if tag in ("latest", "pending", "safe", "finalized"):
                tag = hex(head)
            elif isinstance(tag, str) and tag.startswith("0x") and int(tag, 16) > head:
                return _error(ident, -32000, "header not found")
            params = [*params[:index], tag]
            return await self.forward({**call, "params": params})
        if method == "eth_getLogs":
            query = dict(params[0])
            if "blockHash" in query:
                block = await self.upstream_call("eth_getBlockByHash", query["blockHash"], False)
                if block is None or int(block["number"], 16) > head:
                    return _error(ident, -32000, "unknown block")
                return await self.forward(call)
            to = query.get("toBlock", "latest")
            if to in ("latest", "pending") or int(to, 16) > head:
                query["toBlock"] = hex(head)
            return await self.forward({**call, "params": [query]})
        return await self.forward(call)

    def _saw(self, tx_hash: str) -> None:
        self.seen.setdefault(tx_hash.lower(), time.monotonic())

    async def forward(self, call: dict[str, Any]) -> dict[str, Any]:
        _, answer = await self.post(self.upstream, json.dumps(call))
        return json.loads(answer)

    async def upstream_call(self, method: str, *params: Any) -> Any:
        self._ids += 1
        answer = await self.forward(
            {"jsonrpc": "2.0", "id": f"proxy-{self._ids}", "method": method, "params": params}
        )
        return answer.get("result")


def _result(ident: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def _error(ident: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
