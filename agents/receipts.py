"""Following sends on chain: receipts with the network's confirmations, gas bumps,
rebroadcasts, drops and expiries, and nonce gaps filled by zero-value self-transfers.

The tracker watches every open send of the relayers this worker owns, loaded from
Postgres when ownership changes and added as the relayer broadcasts. A send settles
only on chain evidence: a receipt of any of its attempts, confirmed; or its nonce
used by another transaction, found in a confirmed block, while none of its own was
mined. A missing receipt, an unknown hash or "nonce too low" from a node that lags
mean *wait*: every endpoint of the network is asked, and the send stays pending with
the reason (:mod:`rflow.relayer.resign` has the rules). Nothing that may have reached
the chain is ever signed again with a new nonce.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rflow.codecs import SendRequest
from rflow.failures import FailureKind, RflowError, StepError
from rflow.ingress.rpc import RpcError, RpcUnavailable
from rflow.relayer import resign
from rflow.relayer.fees import Fees, bump, cancelling, gwei, raised
from rflow.relayer.node import Broadcast, Node
from rflow.relayer.signing import Signer
from rflow.secrets import placeholders
from rflow.storage import budgets, send_controls, sends
from rflow.storage.sends import Attempt, SendRow

if TYPE_CHECKING:
    from rflow.agents.relayer import Relayer

log = logging.getLogger("rflow.relayer")
MISSING_GRACE = 2.0
"""Seconds after a broadcast before the node not knowing a transaction means anything."""
MISSING_CHECKS = 2
"""Consecutive checks, a second apart, the node must not know a transaction to drop it."""
POOL_CHECK_INTERVAL = 1.0
EVERYWHERE_INTERVAL = 1.0
"""Seconds between asking every endpoint for the receipts the current one does not show."""
PROOF_INTERVAL = 2.0
"""Seconds between searches for the transaction that took an unexplained used nonce."""
DEFER_CHECK = 2.0
"""Seconds between checks of the base fee for the sends that wait for it to fall."""
RELEASE_AGAIN = 30.0
"""Seconds before a deferred send handed back to the sends topic is handed back again,
should the relayer not have taken it meanwhile."""
RELOAD_INTERVAL = 5.0
"""Open sends are reloaded from Postgres this often, so none is ever forgotten."""
FILL_GAS = 21_000


@dataclass
class Watched:
    """An open send and what this process knows about its latest broadcast."""

    row: SendRow
    accepted: bool
    nonce_low: bool = False
    seen_at: float = field(default_factory=time.monotonic)
    broadcast_at: float = field(default_factory=time.monotonic)
    retry_at: float = 0.0
    checked_at: float = 0.0
    missing: int = 0
    mined: bool = False
    """A receipt of it was seen (not yet confirmed): gone again means a reorg."""
    maybe_out: bool = True
    """It may have reached a node: only the chain can settle it (a refusal of a later
    broadcast fills its nonce rather than give the nonce back). False only for a send
    whose first broadcast every endpoint answered and none took."""
    everywhere_at: float = 0.0
    proof_at: float = 0.0
    underpriced: bool = False
    """Its last broadcast was refused for now (under the base fee, the pool full): it is
    still bumped, which is what may get it taken."""


class Lapsed(Exception):
    """An operator's request gave up waiting before it was carried out: nothing is done."""


class _FillerTaken(Exception):
    """The nonce has another self-transfer already: roll back what was written with it."""


class Tracker:
    """Watches open sends until each settles, and carries out what settling means."""

    def __init__(self, relayer: Relayer) -> None:
        self.relayer = relayer
        self.settings = relayer.settings
        self.watched: dict[str, Watched] = {}
        self.owned: set[tuple[str, str]] = set()
        self.lock = asyncio.Lock()
        """Held by each round and by each operator's request: one of them at a time decides
        what a send needs next."""
        self.deferred: set[tuple[str, int]] = set()
        """The sends of the owned relayers that wait, unsigned, for the base fee
        (``(send key, attempt)``; rows in ``send_deferrals``)."""
        self._wake = asyncio.Event()
        self._stopped = False
        self._loaded_at = 0.0
        self._deferrals_at = 0.0

    # --- what to watch ------------------------------------------------------------------

    def watch(
        self,
        row: SendRow,
        *,
        accepted: bool,
        nonce_low: bool = False,
        maybe_out: bool = True,
        underpriced: bool = False,
    ) -> None:
        """Follow ``row``; a send already watched keeps what is known of it."""
        if row.send_key in self.watched:
            return
        self.watched[row.send_key] = Watched(
            row, accepted, nonce_low, maybe_out=maybe_out, underpriced=underpriced
        )
        self._wake.set()

    async def own(self, owned: set[tuple[str, str]]) -> None:
        """The relayers this worker owns now: forget the others, load the new ones."""
        async with self.lock:
            self.owned = owned
            for key, watched in list(self.watched.items()):
                if (watched.row.network, watched.row.relayer) not in owned:
                    del self.watched[key]
            await self.load()

    async def load(self) -> None:
        """Watch every open send of the owned relayers (rebroadcast what was never seen),
        and know which of their sends wait for the base fee."""
        self._loaded_at = time.monotonic()
        deferred: set[tuple[str, int]] = set()
        for network, relayers in self._by_network().items():

            async def read(conn, n=network, r=relayers):
                return await sends.open_sends(conn, n, r), await sends.deferrals(
                    conn, network=n, relayers=r
                )

            rows, waiting = await self.relayer.db(read, "open sends")
            for row in rows:
                self.watch(row, accepted=False)
            deferred |= {(d.send_key, d.attempt) for d in waiting}
        self.deferred = deferred

    def _by_network(self) -> dict[str, list[str]]:
        by_network: dict[str, list[str]] = defaultdict(list)
        for network, relayer in self.owned:
            by_network[network].append(relayer)
        return by_network

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    # --- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        """Round after round until the worker stops; a failed round is logged and retried."""
        interval = self.settings.send_poll_interval
        while not self._stopped:
            if not self.watched and not self.deferred:
                self._wake.clear()
                # asyncio.timeout: wait_for can swallow a cancellation on Python 3.11.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(RELOAD_INTERVAL):
                        await self._wake.wait()
            try:
                async with self.lock:
                    if time.monotonic() - self._loaded_at > RELOAD_INTERVAL and self.owned:
                        await self.load()
                    await self.round()
                if self.deferred and time.monotonic() - self._deferrals_at >= DEFER_CHECK:
                    self._deferrals_at = time.monotonic()
                    await self.release_deferrals()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("following sends failed; trying again")
                await asyncio.sleep(1.0)
            await asyncio.sleep(interval)

    async def round(self) -> None:
        by_network: dict[str, list[Watched]] = defaultdict(list)
        for watched in list(self.watched.values()):
            by_network[watched.row.network].append(watched)
        for network, group in by_network.items():
            try:
                await self._round(network, group)
            except (RpcUnavailable, RpcError) as exc:
                log.warning("following sends on %s: %s", network, exc)

    async def _round(self, network: str, group: list[Watched]) -> None:
        node = await self.relayer.node(network)
        # A receipt can only exist for a send whose nonce a mined transaction has used:
        # the rest are not asked about, so a round costs the node a call per signer and a
        # lookup per send mined since, not a lookup per send followed.
        head, used = await node.mined_nonces(sorted({w.row.address for w in group}))
        taken = [w for w in group if w.row.nonce < used[w.row.address]]
        hashes = [a.tx_hash for w in taken for a in w.row.attempts]
        receipts = await node.receipts(hashes) if hashes else {}
        now = time.monotonic()
        # A used nonce with no receipt on this endpoint: the others may show it (a
        # load-balanced provider answers from nodes a few seconds apart).
        unseen = [w for w in taken if not self._mined_of(w, receipts)]
        due = [w for w in unseen if now - w.everywhere_at >= EVERYWHERE_INTERVAL]
        if due:
            found, _ = await node.receipts_everywhere(
                [a.tx_hash for w in due for a in w.row.attempts]
            )
            receipts.update(found)
            for watched in due:
                watched.everywhere_at = now
        confirmations = self.relayer.confirmations(network)
        unmined: list[Watched] = []
        unexplained: list[Watched] = []
        confirmed: list[tuple[Watched, dict[str, Any]]] = []
        for watched in group:
            mined = self._mined_of(watched, receipts)
            if mined:
                receipt = mined[0]
                block = int(receipt["blockNumber"], 16)
                if head - block + 1 >= confirmations:
                    confirmed.append((watched, receipt))
                elif not watched.mined:
                    log.info(
                        "send %s mined in block %d, waiting for %d confirmations",
                        watched.row.send_key,
                        block,
                        confirmations,
                    )
                watched.mined = True
                continue
            if watched.mined:
                # Mined, then reorged away before its confirmations: the signed transaction
                # is still good, so it goes back out as it is, at the same nonce.
                log.warning(
                    "send %s: its block was reorged away; rebroadcasting", watched.row.send_key
                )
                watched.mined = False
                watched.accepted = False
                watched.retry_at = 0.0
            if watched in unseen:
                unexplained.append(watched)
            else:
                unmined.append(watched)
        await self.settle_mined(confirmed)
        for watched in unexplained:
            if watched.row.send_key in self.watched:
                await self._each(watched, self.unexplained(watched, now))
        due = [w for w in unmined if w.accepted and now - w.checked_at >= POOL_CHECK_INTERVAL]
        pooled = await node.pooled([w.row.tx_hash for w in due]) if due else {}
        for watched in unmined:
            if watched.row.send_key not in self.watched:
                continue
            await self._each(watched, self.unmined(watched, now, pooled.get(watched.row.tx_hash)))

    @staticmethod
    async def _each(watched: Watched, work: Awaitable[None]) -> None:
        """One send's part of a round: a signer that does not answer (an HSM or a KMS
        away) holds up only the sends that need a signature now, not the round."""
        try:
            await work
        except RflowError as exc:
            if exc.kind is not FailureKind.SIGNER_UNAVAILABLE:
                raise
            log.warning("send %s waits for its signer: %s", watched.row.send_key, exc.message)

    @staticmethod
    def _mined_of(watched: Watched, receipts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return [receipts[a.tx_hash] for a in watched.row.attempts if a.tx_hash in receipts]

    # --- sends that wait for the base fee --------------------------------------------

    async def release_deferrals(self) -> None:
        """Hand back to the sends topic each deferred send whose cap the base fee allows
        now (or whose step's timeout ran out, so that it fails): the relayer agent takes
        it in its turn, as a delivery of a send never stored, and signs it, refuses it,
        or defers it again."""
        now = datetime.now(UTC)
        for network, relayers in self._by_network().items():
            waiting = await self.relayer.db(
                lambda conn, n=network, r=relayers: sends.deferrals(conn, network=n, relayers=r),
                "send deferrals",
            )
            if not waiting:
                continue
            try:
                market, base = await (await self.relayer.node(network)).market()
            except RflowError as exc:
                log.warning("no base fee from %s for the deferred sends: %s", network, exc)
                continue
            due = [
                d
                for d in waiting
                if (base + market.max_priority_fee_per_gas <= d.fee_cap)
                or (d.deadline is not None and now >= d.deadline)
            ]
            due = [
                d
                for d in due
                if d.released_at is None or (now - d.released_at).total_seconds() > RELEASE_AGAIN
            ]
            for deferral in due:
                log.info(
                    "send %s: the base fee %d wei allows it now; handing it back to be signed",
                    deferral.send_key,
                    base,
                )
                await self.relayer.resend(deferral)
            if due:
                attempts = [(d.send_key, d.attempt) for d in due]
                await self.relayer.db(
                    lambda conn, a=attempts: sends.released(conn, a), "release deferred sends"
                )

    # --- settling -------------------------------------------------------------------------

    async def settle_mined(self, confirmed: list[tuple[Watched, dict[str, Any]]]) -> None:
        """Settle sends with a confirmed receipt, all in one transaction, and answer them."""
        if not confirmed:
            return

        outcomes = [
            (watched.row, receipt, "succeeded" if int(receipt["status"], 16) == 1 else "reverted")
            for watched, receipt in confirmed
        ]

        gas = [
            budgets.GasSpent(
                tx_hash=receipt["transactionHash"],
                send_key=row.send_key,
                network=row.network,
                relayer=row.relayer,
                gas_used=int(receipt["gasUsed"], 16),
                effective_gas_price=int(receipt["effectiveGasPrice"], 16),
                value=row.value if status == "succeeded" else 0,
            )
            for row, receipt, status in outcomes
        ]
        # A step's reservations are spent by its success, released by its revert.
        spent = [r.send_key for r, _, st in outcomes if r.purpose == "step" and st == "succeeded"]
        released = [
            r.send_key for r, _, st in outcomes if r.purpose == "step" and st != "succeeded"
        ]

        async def work(conn) -> None:
            async with conn.transaction():
                await sends.settle_mined(
                    conn, [(row.send_key, status, receipt) for row, receipt, status in outcomes]
                )
                await budgets.record_gas_many(conn, gas)
                if spent:
                    await budgets.settle_many(conn, spent, "spent")
                if released:
                    await budgets.settle_many(conn, released, "released")

        await self.relayer.db(work, f"settle {len(confirmed)} send(s)")
        for row, receipt, status in outcomes:
            log.info(
                "send %s %s in block %s", row.send_key, status, int(receipt["blockNumber"], 16)
            )
        await self._answer(*(row.send_key for row, _, _ in outcomes))

    async def settle_failed(self, row: SendRow, error: StepError) -> None:
        """Settle an open send that never reached the chain (or whose nonce is gone)."""
        error = self.relayer.secrets(row.reply).scrub_error(error) or error
        data = error.model_dump(mode="json")

        async def work(conn) -> None:
            async with conn.transaction():
                await sends.settle(conn, row.send_key, status=_status_of(error), error=data)
                if row.purpose == "step":
                    await budgets.settle(conn, row.send_key, "released")

        await self.relayer.db(work, f"settle send {row.send_key}")
        log.warning("send %s failed: %s", row.send_key, error.message)
        await self._answer(row.send_key)

    async def _answer(self, *send_keys: str) -> None:
        for key in send_keys:
            self.watched.pop(key, None)
        rows = await self.relayer.db(lambda conn: sends.find_many(conn, send_keys), "find sends")
        await self.relayer.reply_many(
            [(row.reply, *result_of(row)) for row in rows.values() if row.reply and row.settled]
        )

    async def refused(self, row: SendRow, error: StepError) -> None:
        """The node refused a new send for good: it never went out. Its nonce goes back,
        or, when later nonces are already signed, a self-transfer fills it."""
        returned = await self.relayer.db(
            lambda conn: sends.return_nonce(conn, row.network, row.address, row.nonce),
            "return nonce",
        )
        if not returned:
            await self.fill(row, None)
        await self.settle_failed(row, error)

    # --- what an unmined send needs -------------------------------------------------------

    async def unmined(self, watched: Watched, now: float, known: bool | None) -> None:
        row = watched.row
        node = await self.relayer.node(row.network)
        if watched.nonce_low:
            await self.unexplained(watched, now)
            return
        deadline = row.deadline
        if (
            row.purpose == "step"
            and row.error is None
            and deadline is not None
            and datetime.now(UTC) >= deadline
        ):
            message = (
                f"the step's timeout ran out at {deadline:%Y-%m-%d %H:%M:%S} UTC with transaction "
                f"{row.tx_hash} unmined: a zero-value self-transfer takes its nonce {row.nonce}"
            )
            fees = cancelling(fees_of(row.latest), await self.market(node))
            await self.fill(row, StepError(kind=FailureKind.TIMEOUT, message=message), fees=fees)
            return
        if not watched.accepted:
            if now >= watched.retry_at:
                await self.rebroadcast(watched, now)
            if not watched.underpriced or watched.accepted:
                return
            # Refused for now for its price (under the base fee, say): a bump is the remedy.
        if known is not None:
            watched.checked_at = now
            if known or now - watched.broadcast_at < MISSING_GRACE:
                watched.missing = 0
            else:
                watched.missing += 1
                if watched.missing >= MISSING_CHECKS:
                    await self.vanished(watched)
                    return
        expired = now - watched.seen_at > self.settings.send_expire_after
        if row.purpose == "step" and row.error is None and expired:
            await self.fill(row, StepError(kind=FailureKind.EXPIRED, message=_expired(row)))
            return
        if row.purpose == "step" and row.error is not None:
            return  # being replaced: its self-transfer is bumped, a bump of it would compete
        if now - watched.broadcast_at > self.settings.send_bump_after:
            fees = bump(fees_of(row.latest), row.fee_cap)
            if fees is None:
                # At its cap: it keeps its nonce, and the operator sees why it waits.
                watched.broadcast_at = now
                await self.waiting(row, self._at_cap(row), nonce_used=False)
                return
            signer = await self.relayer.signer(row.relayer)
            attempt = await sign(
                signer, node, row.nonce, row.to_address, row.value, row.data, row.gas_limit, fees
            )

            async def bumped(conn) -> None:
                async with conn.transaction():
                    await sends.add_attempt(conn, row.send_key, attempt)
                    await sends.waiting(conn, row.send_key, None)

            await self.relayer.db(bumped, "bump")
            watched.row = await self._reload(row.send_key) or row
            log.info(
                "send %s not mined after %.0fs: bumped to %d wei/gas (%s)",
                row.send_key,
                now - watched.broadcast_at,
                fees.max_fee_per_gas,
                attempt.tx_hash,
            )
            watched.broadcast_at = now  # the next bump waits its period, taken or not
            await self.rebroadcast(watched, now)

    @staticmethod
    def _at_cap(row: SendRow) -> str:
        """Why a send at its fee cap is not bumped, and what an operator can do."""
        return (
            f"unmined at its fee cap of {gwei(row.fee_cap)} (its transaction pays "
            f"{gwei(row.latest.max_fee_per_gas)}): it keeps nonce {row.nonce} and waits for the "
            f"base fee to fall; speed it up above the cap (rflow sends speedup {row.send_id} "
            f"--above-cap) or cancel it (rflow sends cancel {row.send_id})"
        )

    async def rebroadcast(self, watched: Watched, now: float) -> str:
        """Broadcast the send's latest attempt; what the node answered, for a person."""
        node = await self.relayer.node(watched.row.network)
        try:
            outcome = await node.broadcast(watched.row.latest.raw)
        except RpcUnavailable as exc:
            log.warning("rebroadcast of %s failed: %s", watched.row.send_key, exc)
            watched.retry_at = now + 1.0
            return f"the node did not answer ({exc}); it is broadcast again until it does"
        except RflowError as exc:
            row = watched.row
            if watched.accepted or row.purpose != "step" or row.error is not None:
                log.warning("rebroadcast of %s refused: %s", row.send_key, exc)
                watched.retry_at = now + 1.0
                watched.accepted = False
                return f"{exc.message}; it is broadcast again every second"
            if watched.maybe_out:
                # An earlier broadcast may have reached a node: only the chain can tell,
                # so its nonce is taken by a self-transfer, and the send fails once that
                # (and not the send) is shown to have used it.
                watched.retry_at = now + 1.0
                await self.fill(row, exc.as_data())
                return (
                    f"{exc.message}: a self-transfer takes its nonce {row.nonce}; the send "
                    "fails once the chain shows that, not it, used the nonce"
                )
            # Refused by every node, and never taken by one: it never went out.
            self.watched.pop(row.send_key, None)
            await self.refused(row, exc.as_data())
            return f"{exc.message}: the send failed, it never went out"
        if outcome in (Broadcast.ACCEPTED, Broadcast.KNOWN):
            watched.underpriced = False
            if not watched.accepted and watched.row.purpose == "step":
                key = watched.row.send_key
                await self.relayer.db(lambda conn: budgets.settle(conn, key, "spent"), "hand-off")
            watched.accepted = True
            watched.broadcast_at = now
            watched.missing = 0
            return "accepted by the node"
        if outcome is Broadcast.NONCE_TOO_LOW:
            watched.nonce_low = True
            return "nonce too low: a transaction mined already used the nonce"
        watched.accepted = False
        watched.underpriced = True
        watched.retry_at = now + 1.0
        return "not taken for now (underpriced, or the node is busy); broadcast again every second"

    async def market(self, node: Node) -> Fees:
        """The fees the network asks for now; nothing (zero) when the node cannot say."""
        try:
            return await node.fees(cap=None, tip=None)
        except RflowError as exc:
            log.warning("no fee suggestion from the node: %s", exc)
            return Fees(0, 0)

    async def vanished(self, watched: Watched) -> None:
        """The current endpoint no longer knows the send's latest transaction, and none
        is mined. Only an absence every endpoint agrees on counts."""
        row = watched.row
        node = await self.relayer.node(row.network)
        known, complete = await node.known_everywhere([a.tx_hash for a in row.attempts])
        if known or not complete:
            watched.missing = 0
            return
        used = await node.nonce(row.address, "latest")
        if used > row.nonce:
            await self.unexplained(watched, time.monotonic(), force=True)
            return
        if row.error is None and row.purpose == "step":
            message = (
                f"transaction {row.tx_hash} (nonce {row.nonce}) left the pool of every "
                "endpoint unmined"
            )
            await self.fill(row, StepError(kind=FailureKind.DROPPED, message=message))
        else:
            # A filler, or a send already being replaced: put it back out.
            watched.accepted = False
            watched.missing = 0

    async def unexplained(self, watched: Watched, now: float, *, force: bool = False) -> None:
        """The send's nonce is used on chain (or a node said "nonce too low") and no
        endpoint shows a receipt of any of its transactions: look for the transaction
        that took the nonce and act only on what it proves (:mod:`rflow.relayer.resign`).
        Searched at most every :data:`PROOF_INTERVAL` seconds; nothing is bumped or
        rebroadcast meanwhile."""
        if not force and now - watched.proof_at < PROOF_INTERVAL:
            return
        watched.proof_at = now
        row = watched.row
        node = await self.relayer.node(row.network)
        taker = await node.taker(row.address, row.nonce)
        if taker is None and watched.nonce_low:
            used = await node.nonce(row.address, "latest")
            if used <= row.nonce:
                # No endpoint shows the nonce used: a node ahead of the others said so, or
                # a replacement of ours is pending. Broadcast again shortly.
                watched.nonce_low = False
                watched.accepted = False
                watched.retry_at = now + 1.0
                return
        watched.nonce_low = False
        send = resign.Send(
            nonce=row.nonce,
            own={a.tx_hash.lower() for a in row.attempts},
            purpose=row.purpose,
            replacing=StepError.model_validate(row.error).message if row.error else None,
        )
        decision = resign.decide(send, taker, self.relayer.confirmations(row.network))
        if decision.verdict in (resign.Verdict.WAIT, resign.Verdict.MINED):
            await self.waiting(row, decision.reason, nonce_used=taker is not None)
            return
        if decision.verdict is resign.Verdict.SETTLE:
            log.warning("send %s: %s", row.send_key, decision.reason)
            if row.purpose == "fill":
                self.watched.pop(row.send_key, None)
                await self.relayer.db(
                    lambda conn: sends.settle(conn, row.send_key, status="failed"),
                    "settle filler",
                )
            else:
                await self.settle_failed(row, StepError.model_validate(row.error))
            return
        await self.sign_again(watched, decision.reason)

    async def sign_again(self, watched: Watched, reason: str) -> None:
        """Sign the send with a new nonce: proven necessary (:data:`resign.Verdict.SIGN_AGAIN`)."""
        row = watched.row
        node = await self.relayer.node(row.network)
        signer = await self.relayer.signer(row.relayer)
        pending = await node.nonce(row.address, "pending")
        fees = await node.fees(cap=None, tip=None)
        fees = Fees(min(fees.max_fee_per_gas, row.fee_cap), fees.max_priority_fee_per_gas)

        async def work(conn) -> Attempt:
            async with conn.transaction():
                nonce = await sends.next_nonce(conn, row.network, row.address, pending)
                attempt = await sign(
                    signer, node, nonce, row.to_address, row.value, row.data, row.gas_limit, fees
                )
                await sends.add_attempt(conn, row.send_key, attempt)
                await sends.waiting(conn, row.send_key, None)
            return attempt

        attempt = await self.relayer.db(work, f"sign {row.send_key} again")
        log.warning(
            "send %s: %s; signed again with nonce %d (%s)",
            row.send_key,
            reason,
            attempt.nonce,
            attempt.tx_hash,
        )
        watched.row = await self._reload(row.send_key) or row
        watched.accepted = False
        watched.retry_at = 0.0

    async def waiting(self, row: SendRow, reason: str, *, nonce_used: bool) -> None:
        """Record what ``row`` waits for, and whether its nonce is used (logged when it
        changes)."""
        if row.waiting_for == reason and row.nonce_used == nonce_used:
            return
        changed = await self.relayer.db(
            lambda conn: sends.waiting(conn, row.send_key, reason, nonce_used=nonce_used),
            "send waiting",
        )
        if changed:
            log.info("send %s pending: %s", row.send_key, reason)
        watched = self.watched.get(row.send_key)
        if watched is not None:
            watched.row = dataclasses.replace(
                watched.row, waiting_for=reason, nonce_used=nonce_used
            )

    async def fill(
        self,
        row: SendRow,
        reason: StepError | None,
        *,
        fees: Fees | None = None,
        request: str | None = None,
    ) -> Attempt | None:
        """Take ``row``'s nonce with a zero-value self-transfer, paying enough to replace
        it (``fees``, else 12.5 % more than its latest attempt); ``row`` settles with
        ``reason`` once the nonce is used and it is not mined.

        The filler is stored before anything is broadcast, with ``reason`` and, for an
        operator's cancel, the claim of the ``request`` (:class:`Lapsed` if it gave up).
        Returns the filler's attempt; ``None`` when nothing was stored: the send settled,
        or is being replaced already, or its nonce has a filler."""
        node = await self.relayer.node(row.network)
        signer = await self.relayer.signer(row.relayer)
        latest = row.latest
        if fees is None:
            fees = Fees(raised(latest.max_fee_per_gas), raised(latest.max_priority_fee_per_gas))
        attempt = await sign_fill(signer, node, row.nonce, fees)
        key = filler_key(row)

        async def work(conn) -> bool:
            async with conn.transaction():
                if reason is not None and not await sends.mark(
                    conn, row.send_key, reason.model_dump(mode="json")
                ):
                    return False
                if request is not None and not await send_controls.claim(
                    conn, request, attempt.tx_hash
                ):
                    raise Lapsed(request)
                filler = sends.NewSend(
                    send_key=key,
                    purpose="fill",
                    run_id=None,
                    workflow=None,
                    reply=None,
                    network=row.network,
                    relayer=row.relayer,
                    address=row.address,
                    nonce=row.nonce,
                    to_address=signer.address,
                    value=0,
                    data=b"",
                    gas_limit=FILL_GAS,
                    fee_cap=max(fees.max_fee_per_gas * 4, row.fee_cap),
                    attempt=attempt,
                )
                if not await sends.insert_many(conn, [filler]) and request is not None:
                    existing = await sends.find(conn, key)
                    if existing is None or existing.tx_hash != attempt.tx_hash:
                        raise _FillerTaken  # not this one (a retry finds its own)
            return True

        try:
            stored = await self.relayer.db(work, f"fill nonce {row.nonce}")
        except _FillerTaken:
            stored = False
        if not stored:
            log.info("send %s: settled or being replaced already, not filled", row.send_key)
            if row.send_key in self.watched:
                self.watched[row.send_key].row = await self._reload(row.send_key) or row
            return None
        log.warning(
            "send %s: filling nonce %d with a self-transfer (%s)",
            row.send_key,
            row.nonce,
            reason.message if reason else "refused",
        )
        if row.send_key in self.watched:
            self.watched[row.send_key].row = await self._reload(row.send_key) or row
        filler = await self._reload(key)
        if filler is not None and not filler.settled:
            self.watch(filler, accepted=False)
        return attempt

    async def _reload(self, send_key: str) -> SendRow | None:
        return await self.relayer.db(lambda conn: sends.find(conn, send_key), "find send")


async def sign_fill(signer: Signer, node: Node, nonce: int, fees: Fees) -> Attempt:
    return await sign(signer, node, nonce, signer.address, 0, b"", FILL_GAS, fees)


def filler_key(row: SendRow) -> str:
    """The send key of the self-transfer that fills ``row``'s nonce."""
    return sends.filler_key(row.network, row.address, row.nonce)


def fees_of(attempt: Attempt) -> Fees:
    return Fees(attempt.max_fee_per_gas, attempt.max_priority_fee_per_gas)


def _status_of(error: StepError) -> str:
    if error.kind in (FailureKind.DROPPED, FailureKind.EXPIRED):
        return str(error.kind)
    if error.kind in (FailureKind.CANCELLED, FailureKind.TIMEOUT):
        return "cancelled"  # replaced on purpose, by an operator or at the step's deadline
    return "failed"


def _expired(row: SendRow) -> str:
    return f"transaction {row.tx_hash} (nonce {row.nonce}) was not mined in time"


async def sign(
    signer: Signer, node: Node, nonce: int, to: str, value: int, data: bytes, gas: int, fees: Fees
) -> Attempt:
    raw, tx_hash = await signer.sign(
        chain_id=node.chain_id,
        nonce=nonce,
        to=to,
        value=value,
        data=data,
        gas=gas,
        max_fee_per_gas=fees.max_fee_per_gas,
        max_priority_fee_per_gas=fees.max_priority_fee_per_gas,
    )
    return Attempt(tx_hash, nonce, fees.max_fee_per_gas, fees.max_priority_fee_per_gas, raw)


def reply_of(request: SendRequest) -> dict[str, Any]:
    """Where a send's result goes back to, and the variables its step filled in (names
    only: their values are scrubbed from the result, see :meth:`Relayer.secrets`)."""
    execute = request.execute
    reply = {
        "key": request.reply_key,
        "run_id": execute.run_id,
        "path": execute.path,
        "visit": execute.visit,
        "attempt": execute.attempt,
    }
    variables = placeholders(execute.action)
    if variables:
        reply["secrets"] = list(variables)
    return reply


def result_of(row: SendRow) -> tuple[Any, StepError | None]:
    """A settled send as a step's output or failure."""
    if row.status == "succeeded":
        return {
            "tx": {
                "hash": row.tx_hash,
                "status": "success",
                "block": row.block_number,
                "block_hash": row.block_hash,
                "gas_used": row.gas_used,
                "effective_gas_price": row.effective_gas_price,
                "nonce": row.nonce,
                "from": row.address,
                "to": row.to_address,
                "value": row.value,
            }
        }, None
    if row.status == "reverted":
        return None, StepError(
            kind=FailureKind.REVERTED,
            message=f"transaction {row.tx_hash} reverted in block {row.block_number}",
        )
    error = row.error or {}
    kind = error.get("kind", row.status)
    try:
        failure = FailureKind(kind)
    except ValueError:
        failure = FailureKind.DROPPED
    return None, StepError(kind=failure, message=error.get("message", f"the send {row.status}"))
