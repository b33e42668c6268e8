"""Operator actions on pending sends: list them, speed one up, cancel one.

Only the relayer that owns a send's signer signs for it. An action is written to
``send_controls`` first, then produced to the sends topic keyed like the send
(``network:relayer``); its outcome is read back from that row. An action nobody takes
within ``wait`` seconds is marked lapsed before the answer says so, so that it can never
be carried out after being reported as not done.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import psycopg

from rflow.codecs import SendControl
from rflow.failures import RflowError
from rflow.relayer import fees
from rflow.relayer.controls import refusal
from rflow.storage import send_controls, sends
from rflow.storage.sends import SendRow
from rflow.streams.control import ControlError, Sender

Database = Callable[[Callable[[psycopg.AsyncConnection], Awaitable[Any]]], Awaitable[Any]]

DEFAULT_WAIT = 30.0
"""Seconds an action waits for the relayer to take it."""
POLL_INTERVAL = 0.1


class SendActions:
    """``rflow sends`` and ``/api/sends`` over ``database`` and ``producer``."""

    def __init__(self, database: Database, producer: Sender) -> None:
        self.database = database
        self.producer = producer

    async def pending(
        self, *, network: str | None = None, relayer: str | None = None, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """The unsettled sends, in nonce order per signer."""
        rows = await self.database(
            lambda conn: sends.pending(conn, network=network, relayer=relayer, limit=limit)
        )
        return [pending_document(row) for row in rows]

    async def deferred(
        self,
        *,
        network: str | None = None,
        relayer: str | None = None,
        run_id: str | None = None,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:
        """The sends waiting, unsigned, for the base fee to fall under their cap."""
        relayers = [relayer] if relayer is not None else None
        rows = await self.database(
            lambda conn: sends.deferrals(
                conn, network=network, relayers=relayers, run_id=run_id, limit=limit
            )
        )
        return [deferral_document(row) for row in rows]

    async def find(self, ident: str) -> SendRow:
        """The one send ``ident`` names (its id, its send key, or an attempt's hash)."""
        matches = await self.database(lambda conn: sends.lookup(conn, ident))
        if not matches:
            raise ControlError(
                f"no send {ident!r}: give its id (rflow sends ls), its send key or the hash "
                "of one of its transactions",
                404,
            )
        if len(matches) > 1:
            keys = ", ".join(row.send_key for row in matches)
            raise ControlError(f"{ident!r} names several sends ({keys}): give the send key", 400)
        return matches[0]

    async def speedup(
        self,
        ident: str,
        *,
        max_fee: int | None = None,
        tip: int | None = None,
        above_cap: bool = False,
        wait: float = DEFAULT_WAIT,
        by: str | None = None,
    ) -> dict[str, Any]:
        """Replace the send's latest attempt with one paying more, at the same nonce;
        ``by`` is the principal who asks (the request records it)."""
        row = await self._open(ident, "speedup")
        try:
            # Checked here against the latest attempt, so a refusal needs no worker; the
            # relayer checks again, with what the network asks for now.
            fees.speedup(
                fees.Fees(row.latest.max_fee_per_gas, row.latest.max_priority_fee_per_gas),
                row.fee_cap,
                max_fee=max_fee,
                tip=tip,
                above_cap=above_cap,
            )
        except RflowError as exc:
            raise ControlError(f"send {row.send_id}: {exc.message}", 400) from None
        request = send_controls.Request(
            _request_id(), row.send_key, "speedup", max_fee, tip, above_cap, by
        )
        return await self._carry_out(row, request, wait)

    async def cancel(
        self, ident: str, *, wait: float = DEFAULT_WAIT, by: str | None = None
    ) -> dict[str, Any]:
        """Replace the send by a zero-value self-transfer at its nonce; ``by`` is the
        principal who asks (the request records it)."""
        row = await self._open(ident, "cancel")
        request = send_controls.Request(_request_id(), row.send_key, "cancel", requested_by=by)
        return await self._carry_out(row, request, wait)

    async def _open(self, ident: str, action: str) -> SendRow:
        row = await self.find(ident)
        why = refusal(row, action)
        if why is not None:
            raise ControlError(f"send {row.send_id}: {why}", 409)
        return row

    async def _carry_out(
        self, row: SendRow, request: send_controls.Request, wait: float
    ) -> dict[str, Any]:
        await self.database(lambda conn: send_controls.ask(conn, request))
        record = SendControl(
            request_id=request.request_id,
            send_key=row.send_key,
            network=row.network,
            relayer=row.relayer,
            action=request.action,
            requested_at=datetime.now(UTC),
        )
        try:
            await self.producer.send("rflow.sends", record.partition_key, record)
        except Exception:
            await self._lapse(request.request_id, "it could not be produced to the sends topic")
            raise
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            found = await self.database(lambda conn: send_controls.get(conn, request.request_id))
            if found["status"] in ("done", "refused"):
                break
            if loop.time() >= deadline:
                if found["status"] == "requested" and await self._lapse(
                    request.request_id, f"no relayer took it within {wait:g}s"
                ):
                    raise ControlError(
                        f"send {row.send_id}: no worker owning relayer {row.relayer!r} on "
                        f"{row.network} took the {request.action} within {wait:g}s, so it "
                        "will not be carried out; nothing was changed",
                        503,
                    )
                found = await self.database(
                    lambda conn: send_controls.get(conn, request.request_id)
                )
                if found["status"] != "refused":
                    break  # signed: stored, and broadcast by the relayer until mined
            await asyncio.sleep(POLL_INTERVAL)
        if found["status"] == "refused":
            raise ControlError(f"send {row.send_id}: {found['answer']}", 409)
        return outcome_document(row, found)

    async def _lapse(self, request_id: str, why: str) -> bool:
        return await self.database(lambda conn: send_controls.lapse(conn, request_id, why))


def _request_id() -> str:
    return "q" + secrets.token_hex(8)


def pending_document(row: dict[str, Any]) -> dict[str, Any]:
    """One pending send as ``rflow sends ls --json`` and ``GET /api/sends`` give it."""
    error = row["error"] or None
    if row["purpose"] == "fill":
        state = f"replacing {row['replaces']}" if row["replaces"] else "filling a nonce"
    elif error is not None:
        state = f"being replaced ({error.get('kind')})"
    elif row["waiting_for"]:
        state = "waiting"
    else:
        state = "pending"
    return {
        "id": row["send_id"],
        "send_key": row["send_key"],
        "purpose": row["purpose"],
        "state": state,
        "network": row["network"],
        "relayer": row["relayer"],
        "address": row["address"],
        "nonce": row["nonce"],
        "tx_hash": row["tx_hash"],
        "max_fee_per_gas": row["max_fee_per_gas"],
        "max_priority_fee_per_gas": row["max_priority_fee_per_gas"],
        "fee_cap": row["fee_cap"],
        "attempts": row["attempts"],
        "age_seconds": round(row["age"], 3),
        "created_at": row["created_at"].isoformat(),
        "deadline": row["deadline"].isoformat() if row["deadline"] else None,
        "run_id": row["run_id"],
        "step": row["step"],
        "replaces": row["replaces"],
        "error": error,
        "waiting_for": row["waiting_for"],
        "nonce_used": row["nonce_used"],
        "waiting_since": row["waiting_since"].isoformat() if row["waiting_since"] else None,
    }


def deferral_document(row: sends.Deferral) -> dict[str, Any]:
    """One deferred send (unsigned, no nonce) as ``rflow sends ls --json`` and ``GET
    /api/sends`` give it."""
    return {
        "id": row.send_id,
        "send_key": row.send_key,
        "state": "deferred",
        "network": row.network,
        "relayer": row.relayer,
        "run_id": row.run_id,
        "step": row.path,
        "attempt": row.attempt,
        "fee_cap": row.fee_cap,
        "waiting_for": row.reason,
        "deferred_at": row.deferred_at.isoformat() if row.deferred_at else None,
        "deadline": row.deadline.isoformat() if row.deadline else None,
    }


def outcome_document(row: SendRow, request: dict[str, Any]) -> dict[str, Any]:
    """What a carried-out speed-up or cancel did."""
    return {
        "id": row.send_id,
        "send_key": row.send_key,
        "action": request["action"],
        "request_id": request["request_id"],
        "status": request["status"],
        "tx_hash": request["tx_hash"],
        "nonce": request["signed_nonce"],
        "max_fee_per_gas": request["signed_max_fee_per_gas"],
        "max_priority_fee_per_gas": request["signed_max_priority_fee_per_gas"],
        "broadcast": request["answer"],
    }
