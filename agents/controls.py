"""Operators' speed-ups and cancels of pending sends, carried out by the relayer that owns
the send's signer (requests travel on the sends topic, keyed ``network:relayer``).

A request is taken only while its row in ``send_controls`` says ``requested``, in the
transaction that stores what it signs: a speed-up is a new attempt at the send's nonce
with higher fees; a cancel is the zero-value self-transfer at that nonce that the tracker
uses for drops and expiries (:meth:`Tracker.fill`). Either is broadcast at once and
followed by the tracker like any attempt, and the node's answer is recorded. A cancel
settles the send ``cancelled`` only once the self-transfer is mined; if one of the send's
own attempts is mined first, that outcome stands.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from rflow.agents.receipts import Lapsed, Tracker, fees_of, filler_key, sign
from rflow.codecs import SendControl
from rflow.failures import FailureKind, RflowError, StepError
from rflow.relayer import fees
from rflow.relayer.controls import refusal
from rflow.storage import send_controls, sends
from rflow.storage.sends import SendRow

if TYPE_CHECKING:
    from rflow.agents.relayer import Relayer

log = logging.getLogger("rflow.relayer")


class Controls:
    """Carries out the operators' requests for the sends of the relayers this worker owns."""

    def __init__(self, relayer: Relayer, tracker: Tracker) -> None:
        self.relayer = relayer
        self.tracker = tracker

    async def carry_out(self, record: SendControl) -> str | None:
        """Carry out ``record``'s request, or refuse it with the reason; a request that is
        no longer ``requested`` (answered, lapsed, or a repeated delivery) is left alone.
        Returns why the record itself is bad (for the dead-letter path), else ``None``."""
        request = await self._db(lambda conn: send_controls.get(conn, record.request_id))
        if request is None:
            return f"send request {record.request_id} has no row in send_controls"
        if request["status"] != "requested":
            log.info("send request %s is %s already", record.request_id, request["status"])
            return None
        if (request["send_key"], request["action"]) != (record.send_key, record.action):
            await self._refuse(record, "the request's record does not match its row")
            return (
                f"send request {record.request_id} asks to {record.action} {record.send_key}, "
                f"its row to {request['action']} {request['send_key']}"
            )
        async with self.tracker.lock:
            row = await self._db(lambda conn: sends.find(conn, record.send_key))
            why = refusal(row, record.action)
            if why is not None:
                await self._refuse(record, why)
                return None
            try:
                if record.action == "speedup":
                    await self._speedup(row, request)
                else:
                    await self._cancel(row, request)
            except Lapsed:
                log.info("send request %s lapsed before it was carried out", record.request_id)
            except RflowError as exc:  # fees a node would not take, or past the cap
                await self._refuse(record, exc.message)
        return None

    async def _speedup(self, row: SendRow, request: dict[str, Any]) -> None:
        node = await self.relayer.node(row.network)
        chosen = fees.speedup(
            fees_of(row.latest),
            row.fee_cap,
            max_fee=request["max_fee_per_gas"],
            tip=request["max_priority_fee_per_gas"],
            above_cap=request["above_cap"],
            market=await self.tracker.market(node),
        )
        signer = await self.relayer.signer(row.relayer)
        attempt = await sign(
            signer, node, row.nonce, row.to_address, row.value, row.data, row.gas_limit, chosen
        )
        request_id = request["request_id"]

        async def store(conn: Any) -> None:
            async with conn.transaction():
                if not await send_controls.claim(conn, request_id, attempt.tx_hash):
                    raise Lapsed(request_id)
                await sends.add_attempt(conn, row.send_key, attempt)

        await self._db(store)
        log.info(
            "send %s sped up by request %s: %s max fee, %s tip (%s)",
            row.send_key,
            request_id,
            fees.gwei(chosen.max_fee_per_gas),
            fees.gwei(chosen.max_priority_fee_per_gas),
            attempt.tx_hash,
        )
        await self._broadcast(row.send_key, request_id, out_before=True)

    async def _cancel(self, row: SendRow, request: dict[str, Any]) -> None:
        node = await self.relayer.node(row.network)
        chosen = fees.cancelling(fees_of(row.latest), await self.tracker.market(node))
        request_id = request["request_id"]
        reason = StepError(
            kind=FailureKind.CANCELLED,
            message=(
                f"cancelled by an operator: a zero-value self-transfer took its nonce "
                f"{row.nonce} (request {request_id})"
            ),
        )
        attempt = await self.tracker.fill(row, reason, fees=chosen, request=request_id)
        if attempt is None:
            await self._refuse_id(request_id, "the send settled or began being replaced meanwhile")
            return
        await self._broadcast(filler_key(row), request_id, out_before=False)

    async def _broadcast(self, send_key: str, request_id: str, *, out_before: bool) -> None:
        """Broadcast the attempt just stored for ``send_key`` and record the node's answer.

        ``out_before``: an earlier attempt of the send may be out (a speed-up), so a
        refusal of this one is never taken as the send having never gone out."""
        row = await self._db(lambda conn: sends.find(conn, send_key))
        self.tracker.watch(row, accepted=False)
        watched = self.tracker.watched[send_key]
        watched.row = row
        watched.accepted = watched.accepted or out_before
        answer = await self.tracker.rebroadcast(watched, time.monotonic())
        await self._db(lambda conn: send_controls.done(conn, request_id, answer))

    async def _refuse(self, record: SendControl, reason: str) -> None:
        await self._refuse_id(record.request_id, reason)

    async def _refuse_id(self, request_id: str, reason: str) -> None:
        log.info("send request %s refused: %s", request_id, reason)
        await self._db(lambda conn: send_controls.refuse(conn, request_id, reason))

    async def _db(self, work: Any) -> Any:
        return await self.relayer.db(work, "send request")
