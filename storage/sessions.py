"""The console's server-side sessions: found by the sha256 of the cookie's random id.

A session holds who signed in, when it ends (``expires_at``), when it was last used (for
the idle timeout) and, once ended early, when and why (signed out, token rotated). The
raw id is never stored; nor is the token the principal signed in with (``token_check``
is an HMAC of its digest keyed by the raw id, which only the browser holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from rflow.storage.errors import translated


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One session as stored."""

    principal: str
    token_check: bytes
    created_at: datetime
    expires_at: datetime
    last_seen_at: datetime
    revoked_at: datetime | None
    revoked_why: str | None


_CREATE = """
INSERT INTO console_sessions (id_hash, principal, token_check, created_at, expires_at,
                              last_seen_at)
VALUES (%s, %s, %s, %s, %s, %s)
"""
_GET = """
SELECT principal, token_check, created_at, expires_at, last_seen_at, revoked_at, revoked_why
FROM console_sessions WHERE id_hash = %s
"""
# Touching a session that ended changes nothing: a revoked one stays revoked.
_TOUCH = """
UPDATE console_sessions SET last_seen_at = %s
WHERE id_hash = %s AND revoked_at IS NULL AND last_seen_at < %s
"""
_REVOKE = """
UPDATE console_sessions SET revoked_at = %s, revoked_why = %s
WHERE id_hash = %s AND revoked_at IS NULL
"""
_PURGE = "DELETE FROM console_sessions WHERE expires_at < %s"


async def create(
    conn: psycopg.AsyncConnection,
    id_hash: bytes,
    principal: str,
    token_check: bytes,
    *,
    now: datetime,
    expires_at: datetime,
) -> None:
    """Store a new session."""
    with translated():
        await conn.execute(_CREATE, (id_hash, principal, token_check, now, expires_at, now))


async def get(conn: psycopg.AsyncConnection, id_hash: bytes) -> SessionRow | None:
    """The session whose id hashes to ``id_hash``, ended or not."""
    with translated():
        cur = await conn.execute(_GET, (id_hash,))
        row = await cur.fetchone()
    return SessionRow(*row) if row else None


async def touch(
    conn: psycopg.AsyncConnection, id_hash: bytes, *, now: datetime, older_than: datetime
) -> None:
    """Mark the session used ``now`` (only when it was last used before ``older_than``:
    a busy page does not write on every request)."""
    with translated():
        await conn.execute(_TOUCH, (now, id_hash, older_than))


async def revoke(conn: psycopg.AsyncConnection, id_hash: bytes, why: str, *, now: datetime) -> bool:
    """End the session now, saying why; False when it had ended already."""
    with translated():
        cur = await conn.execute(_REVOKE, (now, why, id_hash))
    return cur.rowcount == 1


async def purge(conn: psycopg.AsyncConnection, before: datetime) -> int:
    """Forget sessions that expired before ``before``; how many."""
    with translated():
        cur = await conn.execute(_PURGE, (before,))
    return cur.rowcount
