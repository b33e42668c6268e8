"""The relayer's durable record: nonces, sends and every signed attempt of each.

A send's row is written in the same transaction as its nonce and its budget
reservations, and committed before the transaction is broadcast. Once a key has a row
it is never signed again with another nonce unless the chain proves the first one can
never be mined (its nonce was taken by another transaction).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from rflow.storage.columns import columns
from rflow.storage.errors import translated

SETTLED = ("succeeded", "reverted", "dropped", "expired", "cancelled", "failed")
STATUSES = ("pending", *SETTLED)
"""Every status a send can have, the open one first."""

_NEXT_NONCE = """
UPDATE relayer_nonces SET next_nonce = next_nonce + %(count)s
WHERE network = %(network)s AND address = %(address)s
RETURNING next_nonce - %(count)s
"""
# First use, or a resync: never below what the chain has used, never back over what we
# have signed ourselves.
_SYNC_NONCE = """
INSERT INTO relayer_nonces (network, address, next_nonce)
VALUES (%(network)s, %(address)s, %(chain)s + %(count)s)
ON CONFLICT (network, address) DO UPDATE
    SET next_nonce = greatest(relayer_nonces.next_nonce, %(chain)s) + %(count)s
RETURNING next_nonce - %(count)s
"""
_RETURN_NONCE = """
UPDATE relayer_nonces SET next_nonce = %s
WHERE network = %s AND address = %s AND next_nonce = %s + 1
"""
# Many sends with their first attempts in one statement, one array per column; an
# attempt is stored only with its send (a key stored already keeps its row and attempts).
_INSERT_MANY = """
WITH stored AS (
    INSERT INTO sends (send_key, purpose, run_id, workflow, reply, network, relayer, address,
                       nonce, to_address, value, data, gas_limit, fee_cap, tx_hash, error,
                       send_id, deadline)
    SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::jsonb[], %b::text[],
                         %b::text[], %b::text[], %b::bigint[], %b::text[], %b::numeric[],
                         %b::bytea[], %b::bigint[], %b::numeric[], %b::text[], %b::jsonb[],
                         %b::text[], %b::timestamptz[])
    ON CONFLICT (send_key) DO NOTHING
    RETURNING send_key
), attempts AS (
    INSERT INTO send_attempts (tx_hash, send_key, nonce, max_fee_per_gas,
                               max_priority_fee_per_gas, raw)
    SELECT a.* FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::numeric[], %b::numeric[],
                           %b::bytea[]) AS a(tx_hash, send_key, nonce, max_fee, tip, raw)
    WHERE a.send_key IN (SELECT send_key FROM stored)
    ON CONFLICT (tx_hash) DO NOTHING
)
SELECT send_key FROM stored
"""
_ATTEMPT = """
INSERT INTO send_attempts (tx_hash, send_key, nonce, max_fee_per_gas, max_priority_fee_per_gas, raw)
VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (tx_hash) DO NOTHING
"""
_LATEST = "UPDATE sends SET tx_hash = %s, nonce = %s, updated_at = now() WHERE send_key = %s"
_SELECT = """
SELECT s.*, coalesce(
    (SELECT jsonb_agg(jsonb_build_object(
        'tx_hash', a.tx_hash, 'nonce', a.nonce,
        'max_fee_per_gas', a.max_fee_per_gas::text,
        'max_priority_fee_per_gas', a.max_priority_fee_per_gas::text,
        'raw', encode(a.raw, 'hex'), 'created_at', a.created_at) ORDER BY a.created_at)
     FROM send_attempts a WHERE a.send_key = s.send_key), '[]'::jsonb) AS attempts
FROM sends s
"""
_FIND = _SELECT + " WHERE s.send_key = %s"
_FIND_MANY = _SELECT + " WHERE s.send_key = ANY(%s)"
_OPEN = _SELECT + " WHERE s.settled_at IS NULL AND s.network = %s AND s.relayer = ANY(%s)"
# A send is replaced for one reason: the first to mark it wins (marking it again with the
# same reason, a retry, changes nothing), and a settled one is left.
_MARK = """
UPDATE sends SET error = %(error)s, updated_at = now()
WHERE send_key = %(send_key)s AND settled_at IS NULL
  AND (error IS NULL OR error = %(error)s)
"""
_SETTLE = """
UPDATE sends SET status = %(status)s, tx_hash = coalesce(%(tx_hash)s, tx_hash),
    block_number = %(block_number)s, block_hash = %(block_hash)s, gas_used = %(gas_used)s,
    effective_gas_price = %(effective_gas_price)s, error = %(error)s,
    waiting_for = NULL, waiting_since = NULL,
    settled_at = now(), updated_at = now()
WHERE send_key = %(send_key)s AND settled_at IS NULL
"""
# The reason is replaced only when it changes, so `waiting_since` says how long it holds.
_WAITING = """
UPDATE sends SET waiting_for = %(reason)s, nonce_used = %(nonce_used)s,
    waiting_since = CASE WHEN %(reason)s::text IS NULL THEN NULL
                         WHEN waiting_for IS DISTINCT FROM %(reason)s::text THEN now()
                         ELSE waiting_since END
WHERE send_key = %(send_key)s AND settled_at IS NULL
  AND (waiting_for IS DISTINCT FROM %(reason)s::text OR nonce_used <> %(nonce_used)s)
"""
_BY_RUN = """
SELECT s.send_key, s.send_id, s.network, s.relayer, s.nonce, s.tx_hash, s.status,
       s.block_number, s.gas_used, s.effective_gas_price, s.value, s.to_address, s.error,
       s.waiting_for, s.waiting_since, s.reply ->> 'path' AS step,
       a.max_fee_per_gas, a.max_priority_fee_per_gas,
       (SELECT count(*) FROM send_attempts c WHERE c.send_key = s.send_key) AS attempts
FROM sends s LEFT JOIN send_attempts a ON a.tx_hash = s.tx_hash
WHERE s.run_id = %s ORDER BY s.created_at
"""
# The nonce is the mined transaction's: a send signed again with a new nonce (on proof
# that another transaction took its first) reports the one the chain shows.
_SETTLE_MINED = """
UPDATE sends SET status = x.status, tx_hash = coalesce(x.tx_hash, sends.tx_hash),
    nonce = coalesce((SELECT a.nonce FROM send_attempts a WHERE a.tx_hash = x.tx_hash),
                     sends.nonce),
    block_number = x.block_number, block_hash = x.block_hash, gas_used = x.gas_used,
    effective_gas_price = x.effective_gas_price, error = NULL,
    waiting_for = NULL, waiting_since = NULL,
    settled_at = now(), updated_at = now()
FROM unnest(%b::text[], %b::text[], %b::text[], %b::bigint[], %b::text[], %b::numeric[],
            %b::numeric[])
    AS x(send_key, status, tx_hash, block_number, block_hash, gas_used, effective_gas_price)
WHERE sends.send_key = x.send_key AND sends.settled_at IS NULL
"""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One signed transaction of a send."""

    tx_hash: str
    nonce: int
    max_fee_per_gas: int
    max_priority_fee_per_gas: int
    raw: bytes


@dataclass(frozen=True, slots=True)
class _Send:
    """What every send is: its key, its run, its signer and nonce, and the call."""

    send_key: str
    purpose: str
    run_id: str | None
    workflow: str | None
    reply: dict[str, Any] | None
    network: str
    relayer: str
    address: str
    nonce: int
    to_address: str
    value: int
    data: bytes
    gas_limit: int
    fee_cap: int


@dataclass(frozen=True, slots=True)
class SendRow(_Send):
    """A send as stored."""

    status: str
    tx_hash: str
    block_number: int | None
    block_hash: str | None
    gas_used: int | None
    effective_gas_price: int | None
    error: dict[str, Any] | None
    attempts: tuple[Attempt, ...] = field(default=())
    send_id: str = ""
    deadline: datetime | None = None
    """When the step's timeout runs out: a send still unmined then is cancelled."""
    waiting_for: str | None = None
    """What the open send waits for, for a person (see :func:`waiting`)."""
    nonce_used: bool = False
    """The chain shows its nonce used: nothing is left to speed up or cancel."""

    @property
    def settled(self) -> bool:
        return self.status in SETTLED

    @property
    def latest(self) -> Attempt:
        return self.attempts[-1]


def _row(found: dict[str, Any]) -> SendRow:
    attempts = tuple(
        Attempt(
            a["tx_hash"],
            int(a["nonce"]),
            int(a["max_fee_per_gas"]),
            int(a["max_priority_fee_per_gas"]),
            bytes.fromhex(a["raw"]),
        )
        for a in found["attempts"]
    )

    def optional(name: str) -> int | None:
        value = found[name]
        return None if value is None else int(value)

    return SendRow(
        send_key=found["send_key"],
        purpose=found["purpose"],
        run_id=found["run_id"],
        workflow=found["workflow"],
        reply=found["reply"],
        network=found["network"],
        relayer=found["relayer"],
        address=found["address"],
        nonce=int(found["nonce"]),
        to_address=found["to_address"],
        value=int(found["value"]),
        data=bytes(found["data"]),
        gas_limit=int(found["gas_limit"]),
        fee_cap=int(found["fee_cap"]),
        status=found["status"],
        tx_hash=found["tx_hash"],
        block_number=optional("block_number"),
        block_hash=found["block_hash"],
        gas_used=optional("gas_used"),
        effective_gas_price=optional("effective_gas_price"),
        error=found["error"],
        attempts=attempts,
        send_id=found["send_id"],
        deadline=found["deadline"],
        waiting_for=found.get("waiting_for"),
        nonce_used=bool(found.get("nonce_used")),
    )


def filler_key(network: str, address: str, nonce: int) -> str:
    """The send key of the zero-value self-transfer that fills ``address``'s ``nonce``."""
    return f"fill:{network}:{address.lower()}:{nonce}"


def send_id(send_key: str) -> str:
    """The short id of a send, for people to type: ``s`` and the first 12 hex digits of the
    sha256 of its key (migration 0016 gives rows stored before it the same)."""
    return "s" + hashlib.sha256(send_key.encode()).hexdigest()[:12]


async def next_nonce(
    conn: psycopg.AsyncConnection,
    network: str,
    address: str,
    chain_nonce: int | None,
    count: int = 1,
) -> int | None:
    """Allocate the signer's next ``count`` nonces (inside the caller's transaction); the
    first is returned, the others follow it.

    With ``chain_nonce`` (the node's pending count) the counter is created or brought up
    to it; without, an unknown signer gives ``None`` (ask the chain, then call again).
    """
    params = {"network": network, "address": address.lower(), "chain": chain_nonce, "count": count}
    with translated():
        cur = await conn.execute(_NEXT_NONCE if chain_nonce is None else _SYNC_NONCE, params)
        found = await cur.fetchone()
    return None if found is None else int(found[0])


async def return_nonce(
    conn: psycopg.AsyncConnection, network: str, address: str, nonce: int
) -> bool:
    """Give ``nonce`` back if it is still the last one allocated (a send refused before
    it was ever out); False if later nonces exist and the gap must be filled instead."""
    with translated():
        cur = await conn.execute(_RETURN_NONCE, (nonce, network, address.lower(), nonce))
    return cur.rowcount == 1


@dataclass(frozen=True, slots=True)
class NewSend(_Send):
    """A send to store with its first signed attempt."""

    attempt: Attempt
    error: dict[str, Any] | None = None
    deadline: datetime | None = None

    def row(self) -> tuple[Any, ...]:
        """The ``sends`` row, in the column order of :data:`_INSERT_MANY`."""
        return (
            self.send_key,
            self.purpose,
            self.run_id,
            self.workflow,
            Jsonb(self.reply) if self.reply is not None else None,
            self.network,
            self.relayer,
            self.address.lower(),
            self.nonce,
            self.to_address,
            self.value,
            self.data,
            self.gas_limit,
            self.fee_cap,
            self.attempt.tx_hash,
            Jsonb(self.error) if self.error is not None else None,
            send_id(self.send_key),
            self.deadline,
        )


_MINED_COLUMNS = (
    "send_key", "status", "tx_hash", "block_number", "block_hash", "gas_used",
    "effective_gas_price",
)  # fmt: skip


async def insert_many(conn: psycopg.AsyncConnection, new: Sequence[NewSend]) -> set[str]:
    """Store new sends with their first attempts in one statement; the keys stored (a key
    that exists already is left as it is, and its attempt is not stored)."""
    if not new:
        return set()
    sends = [send.row() for send in new]
    attempts = [_attempt_params(send.send_key, send.attempt) for send in new]
    with translated():
        cur = await conn.execute(_INSERT_MANY, [*columns(sends, 18), *columns(attempts, 6)])
        return {key for (key,) in await cur.fetchall()}


def _attempt_params(send_key: str, attempt: Attempt) -> tuple[Any, ...]:
    return (
        attempt.tx_hash,
        send_key,
        attempt.nonce,
        attempt.max_fee_per_gas,
        attempt.max_priority_fee_per_gas,
        attempt.raw,
    )


async def _add_attempt(conn: psycopg.AsyncConnection, send_key: str, attempt: Attempt) -> None:
    await conn.execute(_ATTEMPT, _attempt_params(send_key, attempt))


async def add_attempt(conn: psycopg.AsyncConnection, send_key: str, attempt: Attempt) -> None:
    """Store a replacement (a gas bump, or a re-signing with a fresh nonce) as the latest."""
    with translated():
        async with conn.transaction():
            await _add_attempt(conn, send_key, attempt)
            await conn.execute(_LATEST, (attempt.tx_hash, attempt.nonce, send_key))


async def find(conn: psycopg.AsyncConnection, send_key: str) -> SendRow | None:
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_FIND, (send_key,))
            found = await cur.fetchone()
    return None if found is None else _row(found)


async def find_many(conn: psycopg.AsyncConnection, send_keys: Sequence[str]) -> dict[str, SendRow]:
    """The stored sends among ``send_keys``, by key (keys without a row are left out)."""
    if not send_keys:
        return {}
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_FIND_MANY, (list(send_keys),))
            return {found["send_key"]: _row(found) for found in await cur.fetchall()}


_REFUSE = """
INSERT INTO send_refusals (send_key, attempt, error)
SELECT * FROM unnest(%b::text[], %b::integer[], %b::jsonb[])
ON CONFLICT (send_key, attempt) DO NOTHING
"""
_REFUSALS = """
SELECT r.send_key, r.attempt, r.error
FROM send_refusals r JOIN unnest(%b::text[], %b::integer[]) AS x(send_key, attempt)
  ON r.send_key = x.send_key AND r.attempt = x.attempt
"""


async def refuse_many(
    conn: psycopg.AsyncConnection, refused: Sequence[tuple[str, int, dict[str, Any]]]
) -> None:
    """Keep the answer of each refused send attempt, ``(send key, attempt, error)``; the
    first answer of an attempt stays."""
    if not refused:
        return
    rows = [(key, attempt, Jsonb(error)) for key, attempt, error in refused]
    with translated():
        await conn.execute(_REFUSE, columns(rows, 3, unique_by=lambda row: row[:2]))


# Withdrawing a send and storing it are serialized per send key: whichever takes the
# key's lock first decides, and the other sees what it did.
_LOCK_KEYS = """
SELECT pg_advisory_xact_lock(hashtextextended(k, 727)) FROM unnest(%s::text[]) AS k ORDER BY k
"""
_WITHDRAW = """
INSERT INTO send_refusals (send_key, attempt, error)
SELECT %(key)s, %(attempt)s, %(error)s
WHERE NOT EXISTS (SELECT 1 FROM sends WHERE send_key = %(key)s)
ON CONFLICT (send_key, attempt) DO NOTHING
"""
_STORED = "SELECT 1 FROM sends WHERE send_key = %s"


async def lock_keys(conn: psycopg.AsyncConnection, send_keys: Sequence[str]) -> None:
    """Hold the locks of ``send_keys`` until the caller's transaction ends (taken in
    order, so two holders of several keys never wait on each other)."""
    if not send_keys:
        return
    with translated():
        await conn.execute(_LOCK_KEYS, (sorted(set(send_keys)),))


async def withdraw(
    conn: psycopg.AsyncConnection, send_key: str, attempt: int, error: dict[str, Any]
) -> bool:
    """Withdraw attempt ``attempt`` of a send that is no longer wanted: unless it is
    stored (signed) already, it is refused from now on with ``error`` and never signed.
    True when it was withdrawn; False when it was stored first (it goes on)."""
    with translated():
        async with conn.transaction():
            await conn.execute(_LOCK_KEYS, ([send_key],))
            await conn.execute(
                _WITHDRAW, {"key": send_key, "attempt": attempt, "error": Jsonb(error)}
            )
            stored = await conn.execute(_STORED, (send_key,))
            return await stored.fetchone() is None


async def refusals(
    conn: psycopg.AsyncConnection, attempts: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], dict[str, Any]]:
    """The kept refusals among ``attempts`` (``(send key, attempt)``), by attempt."""
    if not attempts:
        return {}
    with translated():
        cur = await conn.execute(_REFUSALS, columns(list(attempts), 2))
        return {(key, attempt): error for key, attempt, error in await cur.fetchall()}


async def open_sends(
    conn: psycopg.AsyncConnection, network: str, relayers: Sequence[str]
) -> list[SendRow]:
    """Every unsettled send of ``relayers`` on ``network``, with their attempts."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_OPEN, (network, list(relayers)))
            return [_row(found) for found in await cur.fetchall()]


async def mark(conn: psycopg.AsyncConnection, send_key: str, error: dict[str, Any]) -> bool:
    """Record why an open send is being replaced (dropped, expired, cancelled) before it
    settles; False if it is settled, or being replaced already for another reason."""
    with translated():
        cur = await conn.execute(_MARK, {"error": Jsonb(error), "send_key": send_key})
    return cur.rowcount == 1


async def waiting(
    conn: psycopg.AsyncConnection, send_key: str, reason: str | None, *, nonce_used: bool = False
) -> bool:
    """Record what the open send ``send_key`` waits for (``None``: nothing any more), and
    whether the chain shows its nonce used; False when that was recorded already, or the
    send has settled."""
    params = {"send_key": send_key, "reason": reason, "nonce_used": nonce_used}
    with translated():
        cur = await conn.execute(_WAITING, params)
    return cur.rowcount == 1


async def settle(
    conn: psycopg.AsyncConnection,
    send_key: str,
    *,
    status: str,
    receipt: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> bool:
    """Settle an open send (inside the caller's transaction); False if it already was."""
    with translated():
        cur = await conn.execute(_SETTLE, _settled(send_key, status, receipt, error))
    return cur.rowcount == 1


async def settle_mined(
    conn: psycopg.AsyncConnection, mined: Sequence[tuple[str, str, dict[str, Any]]]
) -> None:
    """Settle open sends from their receipts, each ``(send_key, status, receipt)``, in one
    round trip (inside the caller's transaction); a settled one is left as it is."""
    if not mined:
        return
    rows = [
        tuple(_settled(key, status, receipt, None)[c] for c in _MINED_COLUMNS)
        for key, status, receipt in mined
    ]
    with translated():
        await conn.execute(_SETTLE_MINED, columns(rows, 7, unique_by=lambda row: row[0]))


def _settled(
    send_key: str, status: str, receipt: dict[str, Any] | None, error: dict[str, Any] | None
) -> dict[str, Any]:
    def quantity(name: str) -> int | None:
        value = (receipt or {}).get(name)
        return None if value is None else int(value, 16)

    return {
        "send_key": send_key,
        "status": status,
        "tx_hash": (receipt or {}).get("transactionHash"),
        "block_number": quantity("blockNumber"),
        "block_hash": (receipt or {}).get("blockHash"),
        "gas_used": quantity("gasUsed"),
        "effective_gas_price": quantity("effectiveGasPrice"),
        "error": Jsonb(error) if error is not None else None,
    }


async def of_run(conn: psycopg.AsyncConnection, run_id: str) -> list[dict[str, Any]]:
    """A run's sends: nonce, latest transaction and its fees, outcome, gas, attempts."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_BY_RUN, (run_id,))
            rows = await cur.fetchall()
    for row in rows:
        for name in (
            "nonce",
            "block_number",
            "gas_used",
            "effective_gas_price",
            "value",
            "max_fee_per_gas",
            "max_priority_fee_per_gas",
        ):
            if row[name] is not None:
                row[name] = int(row[name])
    return rows


_PENDING = """
SELECT s.send_id, s.send_key, s.purpose, s.network, s.relayer, s.address, s.nonce, s.tx_hash,
       a.max_fee_per_gas, a.max_priority_fee_per_gas, s.fee_cap, s.deadline, s.error,
       s.waiting_for, s.waiting_since, s.nonce_used, s.created_at,
       extract(epoch FROM now() - s.created_at)::float8 AS age,
       (SELECT count(*) FROM send_attempts c WHERE c.send_key = s.send_key) AS attempts,
       coalesce(s.run_id, r.run_id) AS run_id,
       coalesce(s.reply, r.reply) ->> 'path' AS step,
       r.send_id AS replaces
FROM sends s
JOIN send_attempts a ON a.tx_hash = s.tx_hash
LEFT JOIN sends r ON s.purpose = 'fill' AND r.purpose = 'step' AND r.network = s.network
    AND r.address = s.address AND r.nonce = s.nonce
WHERE s.settled_at IS NULL
  AND (%(network)s::text IS NULL OR s.network = %(network)s::text)
  AND (%(relayer)s::text IS NULL OR s.relayer = %(relayer)s::text)
ORDER BY s.network, s.relayer, s.nonce, s.purpose DESC
LIMIT %(limit)s
"""
# A send by its short id, its key, or the hash of any of its signed attempts.
_LOOKUP = """
SELECT send_key FROM sends WHERE send_id = %(id)s OR send_key = %(id)s
UNION
SELECT send_key FROM send_attempts WHERE tx_hash = lower(%(id)s)
"""


async def pending(
    conn: psycopg.AsyncConnection,
    *,
    network: str | None = None,
    relayer: str | None = None,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """The unsettled sends in nonce order per signer, for ``rflow sends ls``: each with its
    latest attempt's fees, how many attempts it has, its age in seconds, and its run and
    step (a filler names the step send it replaces, as ``replaces``)."""
    params = {"network": network, "relayer": relayer, "limit": limit}
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_PENDING, params)
            rows = await cur.fetchall()
    for row in rows:
        for name in ("nonce", "max_fee_per_gas", "max_priority_fee_per_gas", "fee_cap"):
            row[name] = int(row[name])
    return rows


async def lookup(conn: psycopg.AsyncConnection, ident: str) -> list[SendRow]:
    """The sends ``ident`` names: by short id, send key, or the hash of any attempt (more
    than one only when a short id is shared)."""
    with translated():
        cur = await conn.execute(_LOOKUP, {"id": ident})
        keys = [key for (key,) in await cur.fetchall()]
    found = await find_many(conn, keys)
    return [found[key] for key in keys if key in found]


_OPEN_OF_RUN = "SELECT send_id FROM sends WHERE run_id = %s AND settled_at IS NULL ORDER BY nonce"


async def open_of_run(conn: psycopg.AsyncConnection, run_id: str) -> list[str]:
    """The ids of ``run_id``'s sends not settled yet."""
    with translated():
        cur = await conn.execute(_OPEN_OF_RUN, (run_id,))
        return [send_id for (send_id,) in await cur.fetchall()]


_BY_STATUS = "SELECT status, count(*) FROM sends GROUP BY status"


async def count_by_status(conn: psycopg.AsyncConnection) -> dict[str, int]:
    """How many sends are in each status."""
    with translated():
        cur = await conn.execute(_BY_STATUS)
        return dict(await cur.fetchall())


_EVER = """
SELECT EXISTS (SELECT 1 FROM sends WHERE (%(network)s::text IS NULL OR network = %(network)s)
                                     AND (%(relayer)s::text IS NULL OR relayer = %(relayer)s))
"""


async def ever(
    conn: psycopg.AsyncConnection, *, network: str | None = None, relayer: str | None = None
) -> bool:
    """Whether any send, settled or not, was made on ``network`` by ``relayer``."""
    with translated():
        cur = await conn.execute(_EVER, {"network": network, "relayer": relayer})
        row = await cur.fetchone()
        return bool(row and row[0])


@dataclass(frozen=True, slots=True)
class Deferral:
    """A send waiting, unsigned and with no nonce, for the base fee to fall under its cap."""

    send_key: str
    attempt: int
    run_id: str
    workflow: str
    path: str
    network: str
    relayer: str
    fee_cap: int
    reason: str
    request: bytes
    deadline: datetime | None = None
    send_id: str = ""
    deferred_at: datetime | None = None
    released_at: datetime | None = None


_DEFER = """
INSERT INTO send_deferrals (send_key, attempt, send_id, run_id, workflow, path, network,
                            relayer, fee_cap, reason, request, deadline)
SELECT * FROM unnest(%b::text[], %b::integer[], %b::text[], %b::text[], %b::text[], %b::text[],
                     %b::text[], %b::text[], %b::numeric[], %b::text[], %b::bytea[],
                     %b::timestamptz[])
ON CONFLICT (send_key, attempt) DO UPDATE
    SET reason = excluded.reason, fee_cap = excluded.fee_cap, released_at = NULL
"""
_UNDEFER = """
DELETE FROM send_deferrals d
USING unnest(%b::text[], %b::integer[]) AS x(send_key, attempt)
WHERE d.send_key = x.send_key AND d.attempt = x.attempt
"""
_DEFERRALS = """
SELECT * FROM send_deferrals
WHERE (%(network)s::text IS NULL OR network = %(network)s::text)
  AND (%(relayers)s::text[] IS NULL OR relayer = ANY(%(relayers)s::text[]))
  AND (%(run_id)s::text IS NULL OR run_id = %(run_id)s::text)
ORDER BY deferred_at, send_key
LIMIT %(limit)s
"""
_RELEASED = """
UPDATE send_deferrals SET released_at = now()
FROM unnest(%b::text[], %b::integer[]) AS x(send_key, attempt)
WHERE send_deferrals.send_key = x.send_key AND send_deferrals.attempt = x.attempt
"""


async def defer_many(conn: psycopg.AsyncConnection, deferrals: Sequence[Deferral]) -> None:
    """Keep sends that wait for the base fee (one already kept gets the new reason)."""
    if not deferrals:
        return
    rows = [(d.send_key, d.attempt, send_id(d.send_key), *_deferred(d)) for d in deferrals]
    with translated():
        await conn.execute(_DEFER, columns(rows, 12, unique_by=lambda row: row[:2]))


def _deferred(d: Deferral) -> tuple[Any, ...]:
    return (
        d.run_id, d.workflow, d.path, d.network, d.relayer, d.fee_cap, d.reason, d.request,
        d.deadline,
    )  # fmt: skip


async def undefer_many(conn: psycopg.AsyncConnection, attempts: Sequence[tuple[str, int]]) -> None:
    """Forget the deferrals of ``attempts`` (``(send key, attempt)``): stored or refused."""
    if not attempts:
        return
    with translated():
        await conn.execute(_UNDEFER, columns(list(attempts), 2))


async def released(conn: psycopg.AsyncConnection, attempts: Sequence[tuple[str, int]]) -> None:
    """Note that the deferrals of ``attempts`` were handed back to the sends topic now."""
    if not attempts:
        return
    with translated():
        await conn.execute(_RELEASED, columns(list(attempts), 2))


async def deferrals(
    conn: psycopg.AsyncConnection,
    *,
    network: str | None = None,
    relayers: Sequence[str] | None = None,
    run_id: str | None = None,
    limit: int = 1000,
) -> list[Deferral]:
    """The sends waiting for the base fee, oldest first."""
    params = {
        "network": network,
        "relayers": list(relayers) if relayers is not None else None,
        "run_id": run_id,
        "limit": limit,
    }
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_DEFERRALS, params)
            found = await cur.fetchall()
    return [
        Deferral(
            send_key=row["send_key"],
            attempt=row["attempt"],
            run_id=row["run_id"],
            workflow=row["workflow"],
            path=row["path"],
            network=row["network"],
            relayer=row["relayer"],
            fee_cap=int(row["fee_cap"]),
            reason=row["reason"],
            request=bytes(row["request"]),
            deadline=row["deadline"],
            send_id=row["send_id"],
            deferred_at=row["deferred_at"],
            released_at=row["released_at"],
        )
        for row in found
    ]
