"""The calls the relayer makes to a node, with the node's answers sorted into what they
mean for a send: simulated or reverted, accepted or refused, mined or not yet."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rflow.failures import FailureKind, RflowError
from rflow.ingress.pool import RpcPool
from rflow.ingress.rpc import JsonRpc, RpcError, RpcUnavailable
from rflow.relayer.build import revert_reason
from rflow.relayer.fees import Fees, suggest
from rflow.relayer.resign import Taker

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


GALLOP = 24
"""Blocks back from the head a nonce's taker is looked for, doubling: 2**24 blocks."""
SCAN = 64
"""A bracket this small is read whole, in one request, instead of halved."""
Outcome = Broadcast | RflowError | RpcUnavailable


class Node:
    """One network's endpoints, as the relayer uses them: reads from the current one,
    broadcasts and absences from all of them (:class:`~rflow.ingress.pool.RpcPool`)."""

    def __init__(self, rpc: RpcPool, chain_id: int) -> None:
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

    async def market(self) -> tuple[Fees, int]:
        """What the network asks for the next block (no cap), and its base fee."""
        try:
            history = await self.rpc.call("eth_feeHistory", hex(5), "latest", [50])
        except (RpcError, RpcUnavailable) as exc:
            raise unavailable(exc, "eth_feeHistory") from None
        return suggest(history)

    async def nonce(self, address: str, tag: str = "pending") -> int:
        return int(await self.rpc.call("eth_getTransactionCount", address, tag), 16)

    async def broadcast(self, raw: bytes) -> Broadcast:
        """Send a signed transaction to every endpoint. Raises ``RflowError`` when they
        all refuse it for good (``insufficient_funds``, or any other refusal as
        ``simulation_failed``), and ``RpcUnavailable`` when no endpoint took it and one's
        answer was lost: the send may or may not be out."""
        (outcome,) = await self.broadcast_many([raw])
        if isinstance(outcome, RflowError | RpcUnavailable):
            raise outcome
        return outcome

    async def broadcast_many(self, raws: Sequence[bytes]) -> list[Outcome]:
        """Send signed transactions to every endpoint, each in one request, in order (a
        signer's nonces ascending): for each transaction, what the endpoints' answers
        mean together (:func:`combined`)."""
        calls = [("eth_sendRawTransaction", ("0x" + raw.hex(),)) for raw in raws]
        answered = await self.rpc.each(calls)
        per_endpoint: list[list[Outcome]] = []
        for _, answers in answered:
            if isinstance(answers, RpcUnavailable):
                per_endpoint.append([answers] * len(raws))
                continue
            per_endpoint.append([_outcome(answer) for answer in answers])
        return [combined([each[i] for each in per_endpoint]) for i in range(len(raws))]

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
        """Whether the current endpoint knows each transaction (pending or mined)."""
        answers = await self.rpc.batch([("eth_getTransactionByHash", (h,)) for h in hashes])
        return {h: a is not None for h, a in zip(hashes, answers, strict=True)}

    async def receipts_everywhere(
        self, hashes: Sequence[str]
    ) -> tuple[dict[str, dict[str, Any]], bool]:
        """The receipts of ``hashes`` that any endpoint has, and whether every endpoint
        answered (when one did not, a missing receipt proves nothing)."""
        return await self._everywhere("eth_getTransactionReceipt", hashes)

    async def known_everywhere(self, hashes: Sequence[str]) -> tuple[set[str], bool]:
        """Which of ``hashes`` any endpoint knows (pending or mined), and whether every
        endpoint answered (an absence counts only when all of them say so)."""
        found, complete = await self._everywhere("eth_getTransactionByHash", hashes)
        return set(found), complete

    async def _everywhere(
        self, method: str, hashes: Sequence[str]
    ) -> tuple[dict[str, dict[str, Any]], bool]:
        """``method`` for each of ``hashes`` on every endpoint: the first non-null answer
        each hash got, and whether every endpoint answered every call."""
        found: dict[str, dict[str, Any]] = {}
        complete = True
        for _, answers in await self.rpc.each([(method, (h,)) for h in hashes]):
            if isinstance(answers, RpcUnavailable):
                complete = False
                continue
            for tx_hash, answer in zip(hashes, answers, strict=True):
                if isinstance(answer, RpcError | RpcUnavailable):
                    complete = False
                elif answer is not None and tx_hash not in found:
                    found[tx_hash] = answer
        return found, complete

    async def taker(self, address: str, nonce: int) -> Taker | None:
        """The transaction that used ``address``'s ``nonce``, as a block shows it, or
        ``None`` when no endpoint can show it now. Each endpoint is searched on its own
        (its answers stay one node's view of the chain), the current one first."""
        for name in self.rpc.names():
            try:
                found = await self.rpc.on_endpoint(name, lambda r: _taker_on(r, address, nonce))
            except (RpcError, RpcUnavailable, ValueError, TypeError, KeyError):
                continue
            if found is not None:
                return Taker(*found, endpoint=name)
        return None


async def _taker_on(rpc: JsonRpc, address: str, nonce: int) -> tuple[str, int, str, int] | None:
    """On one endpoint: ``(hash, block number, block hash, depth)`` of the transaction of
    ``address`` with ``nonce``, or ``None`` if this endpoint does not show it used.

    The block is found from the nonce counts alone (``eth_getTransactionCount`` at a
    block: the first block where it exceeds ``nonce`` holds the transaction), going back
    from the head by doubling steps, then halving the bracket; then that block's
    transactions are read. A node that cannot answer for old blocks (no archive) just
    finds nothing beyond what it keeps."""
    head = int(await rpc.call("eth_blockNumber"), 16)
    backs = sorted({min(2**i - 1, head) for i in range(GALLOP + 1)})
    counts = await rpc.answers(
        [("eth_getTransactionCount", (address, hex(head - back))) for back in backs]
    )
    above = head  # the lowest block known to count more than nonce
    below = None  # a block known to count nonce or fewer
    for back, count in zip(backs, counts, strict=True):
        if isinstance(count, RpcError | RpcUnavailable):
            return None
        if int(count, 16) <= nonce:
            below = head - back
            break
        above = head - back
    if below is None or below == head:
        return None
    while above - below > SCAN:
        middle = (above + below) // 2
        if int(await rpc.call("eth_getTransactionCount", address, hex(middle)), 16) <= nonce:
            below = middle
        else:
            above = middle
    blocks = list(range(below + 1, above + 1))
    counts = await rpc.batch([("eth_getTransactionCount", (address, hex(b))) for b in blocks])
    block = next(b for b, count in zip(blocks, counts, strict=True) if int(count, 16) > nonce)
    found = await rpc.call("eth_getBlockByNumber", hex(block), True)
    if not found:
        return None
    for tx in found.get("transactions") or ():
        if (
            isinstance(tx, dict)
            and str(tx.get("from", "")).lower() == address.lower()
            and int(tx["nonce"], 16) == nonce
        ):
            return str(tx["hash"]).lower(), block, found["hash"], head - block + 1
    return None


def combined(outcomes: Sequence[Outcome]) -> Outcome:
    """What one transaction's broadcast to several endpoints means: taken if any endpoint
    took it (or had it); else its nonce used if any says so; else perhaps out if an
    answer was lost; else refused for now if any said so; else refused for good."""
    for wanted in (Broadcast.ACCEPTED, Broadcast.KNOWN, Broadcast.NONCE_TOO_LOW):
        if wanted in outcomes:
            return wanted
    for outcome in outcomes:
        if isinstance(outcome, RpcUnavailable):
            return outcome
    if Broadcast.NOT_NOW in outcomes:
        return Broadcast.NOT_NOW
    return outcomes[0]


def _outcome(answer: Any) -> Outcome:
    """One endpoint's answer to ``eth_sendRawTransaction``, sorted."""
    if isinstance(answer, RpcError):
        return _refusal(answer)
    if isinstance(answer, RpcUnavailable):
        return answer
    return Broadcast.ACCEPTED


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
