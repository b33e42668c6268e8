"""The calls the relayer makes to a node, with the node's answers sorted into what they
mean for a send: simulated or reverted, accepted or refused, mined or not yet."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class Probe:
    """A send as :meth:`Node.vet_many` asks about it; ``gas_limit`` is the step's own."""

    sender: str
    to: str
    value: int
    data: bytes
    gas_limit: int | None

    def call(self) -> dict[str, str]:
        return {
            "from": self.sender,
            "to": self.to,
            "value": hex(self.value),
            "data": "0x" + self.data.hex(),
        }


def _vetted(answer: Any, what: str) -> Any:
    """A call's answer, or the ``RflowError`` its error means: a revert (or any refusal)
    is ``simulation_failed`` with the decoded reason, an unanswered call ``rpc_timeout``."""
    if isinstance(answer, RpcError):
        return RflowError(
            FailureKind.SIMULATION_FAILED, f"{what}: {revert_reason(answer.data) or answer.message}"
        )
    if isinstance(answer, RpcUnavailable):
        return unavailable(answer, what)
    return answer


class Node:
    """One network's node, as the relayer uses it."""

    def __init__(self, rpc: JsonRpc, chain_id: int) -> None:
        self.rpc = rpc
        self.chain_id = chain_id

    async def vet_many(
        self, sends: Sequence[Probe]
    ) -> tuple[list[int | RflowError], dict[str, Any] | RflowError]:
        """Simulate each of ``sends`` and estimate the gas of those without a limit, and
        ask for the fee history once, all in one request: each send's gas limit (its own,
        or the estimate with headroom), or in its place the ``RflowError`` it fails with
        (the simulation's first); and the ``eth_feeHistory`` answer, or its error."""
        calls: list[tuple[str, Sequence[Any]]] = [("eth_feeHistory", (hex(5), "latest", [50]))]
        for probe in sends:
            call = probe.call()
            calls.append(("eth_call", (call, "latest")))
            if probe.gas_limit is None:
                calls.append(("eth_estimateGas", (call, "latest")))
        try:
            answers = iter(await self.rpc.answers(calls))
        except RpcUnavailable as exc:
            failed = unavailable(exc, "the call would revert")
            return [failed] * len(sends), unavailable(exc, "eth_feeHistory")
        history = next(answers)
        if isinstance(history, RpcError | RpcUnavailable):
            history = unavailable(history, "eth_feeHistory")
        limits: list[int | RflowError] = []
        for probe in sends:
            simulated = _vetted(next(answers), "the call would revert")
            estimated = (
                _vetted(next(answers), "gas estimation failed")
                if probe.gas_limit is None
                else probe.gas_limit
            )
            if isinstance(simulated, RflowError):
                limits.append(simulated)
            elif isinstance(estimated, RflowError):
                limits.append(estimated)
            elif probe.gas_limit is None:
                limits.append(int(estimated, 16) * GAS_HEADROOM[0] // GAS_HEADROOM[1])
            else:
                limits.append(estimated)
        return limits, history

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

    async def mined_nonces(self, addresses: Sequence[str]) -> tuple[int, dict[str, int]]:
        """The head block number and, for each of ``addresses``, its nonce at the head:
        every nonce below it is used by a mined transaction, and none at or above it."""
        calls: list[tuple[str, Sequence[Any]]] = [("eth_blockNumber", ())]
        calls += [("eth_getTransactionCount", (a, "latest")) for a in addresses]
        answers = await self.rpc.batch(calls)
        return int(answers[0], 16), {
            a: int(n, 16) for a, n in zip(addresses, answers[1:], strict=True)
        }

    async def receipts(self, hashes: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The receipts of ``hashes`` that have one."""
        answers = await self.rpc.batch([("eth_getTransactionReceipt", (h,)) for h in hashes])
        return {h: r for h, r in zip(hashes, answers, strict=True) if r}

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
