"""Durable rate limits: one fixed window per workflow, claimed atomically in Postgres."""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg

from rflow.storage.errors import translated

# One statement: a free window (or an expired one, re-anchored now) grants the claim, a
# full one changes nothing. The row lock of ON CONFLICT DO UPDATE serializes racing
# claimers, and each sees the claims of the ones before it, so a window never grants
# more than `max`. The second SELECT reports when a full window releases.
_CLAIM = """
WITH claimed AS (
    INSERT INTO rate_limit_buckets AS b (workflow, window_start, claims)
    VALUES (%(workflow)s, %(now)s, 1)
    ON CONFLICT (workflow) DO UPDATE SET
        window_start = CASE WHEN b.window_start + %(per)s <= %(now)s
                            THEN %(now)s ELSE b.window_start END,
        claims = CASE WHEN b.window_start + %(per)s <= %(now)s THEN 1 ELSE b.claims + 1 END
    WHERE b.window_start + %(per)s <= %(now)s OR b.claims < %(max)s
    RETURNING window_start
)
SELECT EXISTS (SELECT 1 FROM claimed),
       (SELECT window_start FROM rate_limit_buckets WHERE workflow = %(workflow)s)
"""
_WINDOW = "SELECT window_start FROM rate_limit_buckets WHERE workflow = %s"


async def claim(
    conn: psycopg.AsyncConnection, workflow: str, *, max: int, per: timedelta, now: datetime
) -> datetime | None:
    """Claim one run start in ``workflow``'s window: ``None`` if granted, else when the
    window releases (try again then)."""
    params = {"workflow": workflow, "now": now, "per": per, "max": max}
    with translated():
        cur = await conn.execute(_CLAIM, params)
        granted, window_start = await cur.fetchone()
        if not granted and window_start is None:
            # The bucket was created by a racing claim after this statement's snapshot
            # was taken (the conflict saw its row, the SELECT cannot): read it anew.
            cur = await conn.execute(_WINDOW, (workflow,))
            (window_start,) = await cur.fetchone()
    if granted:
        return None
    return window_start + per
