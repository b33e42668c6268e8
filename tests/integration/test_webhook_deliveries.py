"""Webhook idempotency claims on the real Postgres: the rules that lose nothing."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest

from rflow import storage
from rflow.storage import webhooks
from rflow.storage.webhooks import ClaimOutcome

pytestmark = pytest.mark.usefixtures("schema")

TTL = timedelta(hours=1)


@pytest.fixture
async def conn(settings):
    conn = await storage.connect(settings)
    async with conn:
        yield conn


async def claim(conn, key="d-1", claim_id=None):
    return await webhooks.claim(conn, "hooks", key, claim_id=claim_id or uuid.uuid4(), ttl=TTL)


async def test_claim_accept_duplicate_then_expiry_starts_a_new_generation(conn):
    first = await claim(conn)
    assert (first.outcome, first.generation) == (ClaimOutcome.CLAIMED, 1)
    assert (await claim(conn)).outcome is ClaimOutcome.BUSY
    assert await webhooks.accept(conn, "hooks", "d-1", generation=1, ttl=TTL)
    duplicate = await claim(conn)
    assert (duplicate.outcome, duplicate.generation) == (ClaimOutcome.DUPLICATE, 1)

    await conn.execute("UPDATE webhook_deliveries SET expires_at = now() - interval '1 second'")
    renewed = await claim(conn)
    assert (renewed.outcome, renewed.generation) == (ClaimOutcome.CLAIMED, 2)


async def test_a_stale_pending_claim_is_taken_over_under_the_same_generation(conn):
    await claim(conn)
    await conn.execute(
        "UPDATE webhook_deliveries SET claimed_at = now() - %s",
        (webhooks.STALE_AFTER + timedelta(seconds=1),),
    )
    taken = await claim(conn)
    assert (taken.outcome, taken.generation) == (ClaimOutcome.CLAIMED, 1)


async def test_a_stale_claim_past_its_ttl_still_keeps_its_generation(conn):
    await claim(conn)
    assert await webhooks.accept(conn, "hooks", "d-1", generation=1, ttl=TTL)
    await conn.execute("UPDATE webhook_deliveries SET expires_at = now() - interval '1 second'")
    assert (await claim(conn)).generation == 2
    # Generation 2 was never answered; after its TTL too, a retry must not skip to 3.
    await conn.execute(
        "UPDATE webhook_deliveries SET expires_at = now() - interval '1 second', "
        "claimed_at = now() - interval '1 hour'"
    )
    assert (await claim(conn)).generation == 2


async def test_release_lets_a_retry_claim_at_once_with_the_same_generation(conn):
    mine = uuid.uuid4()
    await claim(conn, claim_id=mine)
    assert not await webhooks.release(conn, "hooks", "d-1", claim_id=uuid.uuid4())
    assert (await claim(conn)).outcome is ClaimOutcome.BUSY
    assert await webhooks.release(conn, "hooks", "d-1", claim_id=mine)
    retry = await claim(conn)
    assert (retry.outcome, retry.generation) == (ClaimOutcome.CLAIMED, 1)


async def test_accept_after_a_takeover_is_harmless(conn):
    await claim(conn)
    await conn.execute("UPDATE webhook_deliveries SET claimed_at = NULL")
    await claim(conn)
    assert await webhooks.accept(conn, "hooks", "d-1", generation=1, ttl=TTL)
    assert not await webhooks.accept(conn, "hooks", "d-1", generation=1, ttl=TTL)
    assert (await claim(conn)).outcome is ClaimOutcome.DUPLICATE


async def test_keys_are_per_workflow(conn):
    await claim(conn)
    other = await webhooks.claim(conn, "other", "d-1", claim_id=uuid.uuid4(), ttl=TTL)
    assert other.outcome is ClaimOutcome.CLAIMED


async def test_racing_claims_give_the_key_to_exactly_one(settings):
    conns = [await storage.connect(settings) for _ in range(12)]
    try:
        outcomes = await asyncio.gather(*(claim(c, key="race") for c in conns))
    finally:
        for c in conns:
            await c.close()
    assert sorted(o.outcome for o in outcomes) == [ClaimOutcome.BUSY] * 11 + [ClaimOutcome.CLAIMED]
