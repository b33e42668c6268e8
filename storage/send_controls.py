"""Operators' speed-ups and cancels of pending sends, and what became of each.

The asker (``rflow sends``, the HTTP API) writes a request here, then produces it to the
sends topic; the relayer that owns the send's signer takes it only while it is still
``requested``, in the transaction that stores the new signed attempt (``signed``), and
records the node's answer to its broadcast (``done``) or why it refused (``refused``). An
asker that stops waiting marks the request ``lapsed`` first, so nothing reported as not
done can happen later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from rflow.storage.errors import translated

_INSERT = """
INSERT INTO send_controls (request_id, send_key, action, max_fee_per_gas,
                           max_priority_fee_per_gas, above_cap, requested_by)
VALUES (%(request_id)s, %(send_key)s, %(action)s, %(max_fee_per_gas)s,
        %(max_priority_fee_per_gas)s, %(above_cap)s, %(requested_by)s)
ON CONFLICT (request_id) DO NOTHING
"""
_OF_SEND = """
SELECT request_id, action, status, requested_by, requested_at, answered_at, tx_hash, answer
FROM send_controls WHERE send_key = %s ORDER BY requested_at
"""
_OF_RUN = """
SELECT s.send_id, c.action, c.status, c.requested_by, c.requested_at, c.answered_at, c.tx_hash,
       c.answer
FROM send_controls c JOIN sends s USING (send_key)
WHERE s.run_id = %s AND c.status <> 'lapsed'
ORDER BY c.requested_at
"""
_GET = """
SELECT c.*, a.max_fee_per_gas AS signed_max_fee_per_gas,
       a.max_priority_fee_per_gas AS signed_max_priority_fee_per_gas, a.nonce AS signed_nonce
FROM send_controls c LEFT JOIN send_attempts a ON a.tx_hash = c.tx_hash
WHERE c.request_id = %s
"""
# Claiming again with the same transaction (a retry after a lost answer) still holds.
_CLAIM = """
UPDATE send_controls SET status = 'signed', tx_hash = %(tx_hash)s, answered_at = now()
WHERE request_id = %(request_id)s
  AND (status = 'requested' OR (status = 'signed' AND tx_hash = %(tx_hash)s))
"""
_DONE = """
UPDATE send_controls SET status = 'done', answer = %s, answered_at = now()
WHERE request_id = %s AND status = 'signed'
"""
_REFUSE = """
UPDATE send_controls SET status = 'refused', answer = %s, answered_at = now()
WHERE request_id = %s AND status = 'requested'
"""
_LAPSE = """
UPDATE send_controls SET status = 'lapsed', answer = %s, answered_at = now()
WHERE request_id = %s AND status = 'requested'
"""


@dataclass(frozen=True, slots=True)
class Request:
    """A speed-up or a cancel of one send, as asked for."""

    request_id: str
    send_key: str
    action: str
    max_fee_per_gas: int | None = None
    max_priority_fee_per_gas: int | None = None
    above_cap: bool = False
    requested_by: str | None = None
    """The principal who asked for it."""


async def ask(conn: psycopg.AsyncConnection, request: Request) -> None:
    """Record ``request`` as ``requested`` (before it is produced to the sends topic)."""
    with translated():
        await conn.execute(
            _INSERT,
            {
                "request_id": request.request_id,
                "send_key": request.send_key,
                "action": request.action,
                "max_fee_per_gas": request.max_fee_per_gas,
                "max_priority_fee_per_gas": request.max_priority_fee_per_gas,
                "above_cap": request.above_cap,
                "requested_by": request.requested_by,
            },
        )


async def get(conn: psycopg.AsyncConnection, request_id: str) -> dict[str, Any] | None:
    """A request as it stands, with the fees and nonce of the attempt it signed (if any)."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_GET, (request_id,))
            row = await cur.fetchone()
    if row is None:
        return None
    for name in (
        "max_fee_per_gas",
        "max_priority_fee_per_gas",
        "signed_max_fee_per_gas",
        "signed_max_priority_fee_per_gas",
        "signed_nonce",
    ):
        if row[name] is not None:
            row[name] = int(row[name])
    return row


async def of_send(conn: psycopg.AsyncConnection, send_key: str) -> list[dict[str, Any]]:
    """Every speed-up and cancel asked of one send, oldest first, with who asked."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_OF_SEND, (send_key,))
            return list(await cur.fetchall())


async def of_run(conn: psycopg.AsyncConnection, run_id: str) -> list[dict[str, Any]]:
    """Every speed-up and cancel asked of a run's sends (but those that lapsed, which
    changed nothing), oldest first, with who asked and how it ended."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_OF_RUN, (run_id,))
            return list(await cur.fetchall())


async def claim(conn: psycopg.AsyncConnection, request_id: str, tx_hash: str) -> bool:
    """Take a ``requested`` request as carried out by the attempt ``tx_hash`` (inside the
    transaction that stores it); False if it lapsed or was answered otherwise already."""
    with translated():
        cur = await conn.execute(_CLAIM, {"tx_hash": tx_hash, "request_id": request_id})
    return cur.rowcount == 1


async def done(conn: psycopg.AsyncConnection, request_id: str, answer: str) -> None:
    """Record the node's answer to the broadcast of a signed request."""
    with translated():
        await conn.execute(_DONE, (answer, request_id))


async def refuse(conn: psycopg.AsyncConnection, request_id: str, reason: str) -> bool:
    """Refuse a ``requested`` request with ``reason``; False if it was no longer open."""
    with translated():
        cur = await conn.execute(_REFUSE, (reason, request_id))
    return cur.rowcount == 1


async def lapse(conn: psycopg.AsyncConnection, request_id: str, reason: str) -> bool:
    """Give up on a request nobody has taken: True if it lapsed (it can never be carried
    out now), False if the relayer took or refused it first."""
    with translated():
        cur = await conn.execute(_LAPSE, (reason, request_id))
    return cur.rowcount == 1
