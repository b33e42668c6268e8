"""Webhook deliveries: the idempotency claims of the HTTP ingress, shared by all workers.

A delivery with an idempotency key is handled in three steps: :func:`claim` the key
(which gives the generation to fire under), produce the firing to Kafka, then
:func:`accept` it; when producing fails, :func:`release` the claim so the sender's retry
can take it. A worker that dies between claim and answer leaves a pending claim that
another request may take over after :data:`STALE_AFTER`, under the same generation: the
firing it may already have produced and the one produced now share one trigger key, and
the intake agent keeps only the first.

Every time here is the database's clock, so workers with skewed clocks agree on expiry.

The timestamped signatures a webhook accepted are kept too (:func:`claim_signature`),
until the delivery's time leaves the tolerance, so a replay within it is refused; those
times are the ingress's clock, the one that checks the tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from uuid import UUID

import psycopg

from rflow.storage.errors import StorageError, translated

STALE_AFTER = timedelta(seconds=30)
"""How long a pending claim is honoured before another request may take it over; longer
than any produce attempt the ingress makes."""


class DeliveryStatus(StrEnum):
    """The ``status`` column."""

    PENDING = "pending"
    ACCEPTED = "accepted"


class ClaimOutcome(StrEnum):
    """What :func:`claim` found."""

    CLAIMED = "claimed"
    """The caller holds the key and must produce the firing, then accept or release."""
    DUPLICATE = "duplicate"
    """The key was accepted within its TTL: acknowledge and ignore the delivery."""
    BUSY = "busy"
    """Another request holds a fresh claim on the key: the sender should retry later."""


@dataclass(frozen=True)
class Claim:
    """The outcome of a claim and the generation it concerns."""

    outcome: ClaimOutcome
    generation: int


_CLAIM = """
INSERT INTO webhook_deliveries AS d
    (workflow, idempotency_key, generation, status, claim_id, claimed_at, expires_at)
VALUES (%(workflow)s, %(key)s, 1, 'pending', %(claim_id)s, now(), now() + %(ttl)s)
ON CONFLICT (workflow, idempotency_key) DO UPDATE SET
    -- An accepted key whose TTL ran out fires anew; a pending one was never answered,
    -- so it keeps its generation and therefore its trigger key.
    generation = CASE WHEN d.status = 'accepted' THEN d.generation + 1 ELSE d.generation END,
    status = 'pending',
    claim_id = EXCLUDED.claim_id,
    claimed_at = now(),
    accepted_at = NULL,
    expires_at = EXCLUDED.expires_at
WHERE (d.status = 'accepted' AND d.expires_at <= now())
   OR (d.status = 'pending' AND (d.claimed_at IS NULL OR d.claimed_at <= now() - %(stale)s))
RETURNING generation
"""

_CURRENT = """
SELECT generation, status, expires_at > now() AS live,
       claimed_at IS NOT NULL AND claimed_at > now() - %(stale)s AS held
FROM webhook_deliveries
WHERE workflow = %(workflow)s AND idempotency_key = %(key)s
"""

_ACCEPT = """
UPDATE webhook_deliveries
SET status = 'accepted', claim_id = NULL, accepted_at = now(), expires_at = now() + %(ttl)s
WHERE workflow = %(workflow)s AND idempotency_key = %(key)s
  AND generation = %(generation)s AND status = 'pending'
"""

_RELEASE = """
UPDATE webhook_deliveries
SET claim_id = NULL, claimed_at = NULL
WHERE workflow = %(workflow)s AND idempotency_key = %(key)s
  AND claim_id = %(claim_id)s AND status = 'pending'
"""

# A claim races only with other claims of the same key, each of which changes the row
# into a state this loop settles on; a handful of rounds is plenty.
_ATTEMPTS = 5


async def claim(
    conn: psycopg.AsyncConnection,
    workflow: str,
    key: str,
    *,
    claim_id: UUID,
    ttl: timedelta,
    stale_after: timedelta = STALE_AFTER,
) -> Claim:
    """Claim idempotency key ``key`` of ``workflow`` for the request ``claim_id``.

    A new key, an accepted key past its TTL, and a pending claim that is stale or was
    released are claimed; an accepted key within its TTL is a duplicate; a fresh pending
    claim of another request is busy.
    """
    params = {
        "workflow": workflow,
        "key": key,
        "claim_id": claim_id,
        "ttl": ttl,
        "stale": stale_after,
    }
    with translated():
        for _ in range(_ATTEMPTS):
            cur = await conn.execute(_CLAIM, params)
            row = await cur.fetchone()
            if row is not None:
                return Claim(ClaimOutcome.CLAIMED, row[0])
            # The upsert left the row alone; read it in a new snapshot to say why. It can
            # have changed in between (expired, released), in which case claim again.
            cur = await conn.execute(_CURRENT, params)
            current = await cur.fetchone()
            if current is None:
                continue
            generation, status, live, held = current
            if status == DeliveryStatus.ACCEPTED and live:
                return Claim(ClaimOutcome.DUPLICATE, generation)
            if status == DeliveryStatus.PENDING and held:
                return Claim(ClaimOutcome.BUSY, generation)
    raise StorageError(f"the claim of webhook delivery {key!r} of {workflow!r} kept changing")


async def accept(
    conn: psycopg.AsyncConnection,
    workflow: str,
    key: str,
    *,
    generation: int,
    ttl: timedelta,
) -> bool:
    """Mark ``generation`` of ``key`` accepted, its TTL counting from now.

    Returns False when the row was already accepted (a takeover under the same
    generation got there first), which is fine: that generation's firing is in Kafka.
    """
    params = {"workflow": workflow, "key": key, "generation": generation, "ttl": ttl}
    with translated():
        cur = await conn.execute(_ACCEPT, params)
        return cur.rowcount == 1


async def release(
    conn: psycopg.AsyncConnection, workflow: str, key: str, *, claim_id: UUID
) -> bool:
    """Give up the pending claim ``claim_id`` so that a retry may take it over at once.

    The generation stays: if the failed attempt reached Kafka after all, the retry's
    firing has the same trigger key and is ignored downstream. Returns False when the
    claim is no longer this request's.
    """
    params = {"workflow": workflow, "key": key, "claim_id": claim_id}
    with translated():
        cur = await conn.execute(_RELEASE, params)
        return cur.rowcount == 1


# --- timestamped signatures ----------------------------------------------------------

_CLAIM_SIGNATURE = """
INSERT INTO webhook_signatures AS s (scope, signature, claim_id, expires_at)
VALUES (%(scope)s, %(signature)s, %(claim_id)s, %(expires_at)s)
ON CONFLICT (scope, signature) DO UPDATE SET
    claim_id = EXCLUDED.claim_id, expires_at = EXCLUDED.expires_at
WHERE s.expires_at <= %(now)s
RETURNING 1
"""

_RELEASE_SIGNATURE = """
DELETE FROM webhook_signatures
WHERE scope = %(scope)s AND signature = %(signature)s AND claim_id = %(claim_id)s
"""

# Forgotten a little at a time, by whoever claims: a few rows per claim keep the table
# to the signatures of the last tolerance.
_FORGET_SIGNATURES = """
DELETE FROM webhook_signatures WHERE ctid IN (
    SELECT ctid FROM webhook_signatures WHERE expires_at <= %(now)s LIMIT 20
)
"""


async def claim_signature(
    conn: psycopg.AsyncConnection,
    scope: str,
    signature: str,
    *,
    claim_id: UUID,
    expires_at: datetime,
    now: datetime,
) -> bool:
    """Take timestamped ``signature`` for the request ``claim_id``: True when it is new
    (or the one taken before has expired at ``now``), False when it was used already,
    a replayed delivery. Times are the ingress's clock, the one that checks tolerance."""
    params = {
        "scope": scope,
        "signature": signature,
        "claim_id": claim_id,
        "expires_at": expires_at,
        "now": now,
    }
    with translated():
        async with conn.transaction():
            await conn.execute(_FORGET_SIGNATURES, params)
            cur = await conn.execute(_CLAIM_SIGNATURE, params)
            return await cur.fetchone() is not None


async def release_signature(
    conn: psycopg.AsyncConnection, scope: str, signature: str, *, claim_id: UUID
) -> bool:
    """Give ``signature`` back when the request ``claim_id`` fired nothing, so the
    sender's retry of the same delivery is taken; False when it is not that request's."""
    params = {"scope": scope, "signature": signature, "claim_id": claim_id}
    with translated():
        cur = await conn.execute(_RELEASE_SIGNATURE, params)
        return cur.rowcount == 1
