"""The calls the relayer makes to a node, with the node's answers sorted into what they
mean for a send: simulated or reverted, accepted or refused, mined or not yet."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from rflow.failures import FailureKind, RflowError
from rflow.ingress.rpc import JsonRpc, RpcError, RpcUnavailable
from rflow.relayer.build import revert_reason
from rflow.relayer.fees import Fees, suggest

GAS_HEADROOM = (6, 5)
"""Estimated gas times 1.2: state can move between the estimate and inclusion."""


class Broadcast(enum.Enum):
    """What the node did with a signed transaction."""

    ACCEPTED = "accepted"
    KNOWN = "known"  # it already had it: as good as accepted
    NONCE_TOO_LOW = "nonce_too_low"  # the nonce is used on chain (by us or someone else)
    NOT_NOW = "not_now"  # refused for now (underpriced, rate limited): try again later


_KNOWN = ("already known", "known transaction", "already imported", "alreadyknown")
_NONCE_LOW = ("nonce too low", "nonce is too low", "oldnonce")
_NOT_NOW = (
    "underpriced",
    "fee cap less than block base fee",
    "less than block base fee",
    "max fee per gas less than",
    "txpool is full",
    "rate limit",
    "too many requests",
)
_FUNDS = ("insufficient funds", "insufficient balance")


def unavailable(exc: Exception, what: str) -> RflowError:
    """An unreachable or failing node, as the retryable ``rpc_timeout``."""
    return RflowError(FailureKind.RPC_TIMEOUT, f"{what}: {exc}")


class Node:
    """One network's node, as the relayer uses it."""

    def __init__(self, rpc: JsonRpc, chain_id: int) -> None:
        self.rpc = rpc
        self.chain_id = chain_id

    async def _call(self, method: str, what: str, sender: str, to: str, value: int, data: bytes):
        """``method`` on the send as a call; a revert is ``simulation_failed`` with its
        decoded reason, an unreachable node ``rpc_timeout``."""
        call = {"from": sender, "to": to, "value": hex(value), "data": "0x" + data.hex()}
        try:
            return await self.rpc.call(method, call, "latest")
        except RpcError as exc:
            reason = revert_reason(exc.data) or exc.message
            raise RflowError(FailureKind.SIMULATION_FAILED, f"{what}: {reason}") from None
        except RpcUnavailable as exc:
            raise unavailable(exc, what) from None

    async def simulate(self, sender: str, to: str, value: int, data: bytes) -> None:
        """``eth_call`` the send; ``simulation_failed`` with the decoded reason on a revert."""
        await self._call("eth_call", "the call would revert", sender, to, value, data)

    async def gas_limit(self, sender: str, to: str, value: int, data: bytes) -> int:
        """``eth_estimateGas`` with headroom."""
        estimate = await self._call(
            "eth_estimateGas", "gas estimation failed", sender, to, value, data
        )
        return int(estimate, 16) * GAS_HEADROOM[0] // GAS_HEADROOM[1]

    async def fees(self, *, cap: int | None, tip: int | None) -> Fees:
        """Fees for the next block (see :func:`rflow.relayer.fees.suggest`)."""
        try:
            history = await self.rpc.call("eth_feeHistory", hex(5), "latest", [50])
        except (RpcError, RpcUnavailable) as exc:
            raise unavailable(exc, "eth_feeHistory") from None
        fees, _ = suggest(history, cap=cap, tip=tip)
        return fees

    async def nonce(self, address: str, tag: str = "pending") -> int:
        return int(await self.rpc.call("eth_getTransactionCount", address, tag), 16)

    async def broadcast(self, raw: bytes) -> Broadcast:
        """Send a signed transaction. Raises ``RflowError`` when the node refuses it for
        good (``insufficient_funds``, or any other refusal as ``simulation_failed``), and
        ``RpcUnavailable`` when the answer was lost: the send may or may not be out."""
        try:
            await self.rpc.call("eth_sendRawTransaction", "0x" + raw.hex())
        except RpcError as exc:
            outcome = _refusal(exc)
            if isinstance(outcome, RflowError):
                raise outcome from None
            return outcome
        return Broadcast.ACCEPTED

    async def broadcast_many(
        self, raws: Sequence[bytes]
    ) -> list[Broadcast | RflowError | RpcUnavailable]:
        """Send signed transactions in one request, in order (a signer's nonces ascending):
        each one's :class:`Broadcast`, or in its place the ``RflowError`` of a refusal for
        good or the ``RpcUnavailable`` of a lost answer, as :meth:`broadcast` raises them."""
        calls = [("eth_sendRawTransaction", ("0x" + raw.hex(),)) for raw in raws]
        try:
            answers = await self.rpc.answers(calls)
        except RpcUnavailable as exc:
            return [exc] * len(raws)
        outcomes: list[Broadcast | RflowError | RpcUnavailable] = []
        for answer in answers:
            if isinstance(answer, RpcError):
                outcomes.append(_refusal(answer))
            elif isinstance(answer, RpcUnavailable):
                outcomes.append(answer)
            else:
                outcomes.append(Broadcast.ACCEPTED)
        return outcomes

    async def receipts(self, hashes: Sequence[str]) -> tuple[int, dict[str, dict[str, Any]]]:
        """The head block number and the receipts of ``hashes`` that have one."""
        calls: list[tuple[str, Sequence[Any]]] = [("eth_blockNumber", ())]
        calls += [("eth_getTransactionReceipt", (h,)) for h in hashes]
        answers = await self.rpc.batch(calls)
        head = int(answers[0], 16)
        found = {h: r for h, r in zip(hashes, answers[1:], strict=True) if r}
        return head, found

    async def pooled(self, hashes: Sequence[str]) -> dict[str, bool]:
        """Whether the node knows each transaction (pending or mined)."""
        answers = await self.rpc.batch([("eth_getTransactionByHash", (h,)) for h in hashes])
        return {h: a is not None for h, a in zip(hashes, answers, strict=True)}


def _refusal(exc: RpcError) -> Broadcast | RflowError:
    """What a node's error answer to ``eth_sendRawTransaction`` means for the send."""
    message = exc.message.lower()
    if any(m in message for m in _KNOWN):
        return Broadcast.KNOWN
    if any(m in message for m in _NONCE_LOW):
        return Broadcast.NONCE_TOO_LOW
    if any(m in message for m in _NOT_NOW):
        return Broadcast.NOT_NOW
    if any(m in message for m in _FUNDS):
        return RflowError(
            FailureKind.INSUFFICIENT_FUNDS, f"the node refused the send: {exc.message}"
        )
    return RflowError(FailureKind.SIMULATION_FAILED, f"the node refused the send: {exc.message}")
