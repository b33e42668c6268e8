"""Random keys made once per schema, by purpose (``signing_keys``): the first to ask makes
one, every later ask (on any worker or CLI) reads the same."""

from __future__ import annotations

import secrets

import psycopg

from rflow.storage.errors import translated

_MAKE = """
INSERT INTO signing_keys (purpose, key) VALUES (%s, %s)
ON CONFLICT (purpose) DO NOTHING
"""
_GET = "SELECT key FROM signing_keys WHERE purpose = %s"


async def signing_key(conn: psycopg.AsyncConnection, purpose: str) -> bytes:
    """The key for ``purpose`` (32 random bytes), made now if there is none yet; two
    racing callers agree on the first stored."""
    with translated():
        cur = await conn.execute(_GET, (purpose,))
        row = await cur.fetchone()
        if row is None:
            await conn.execute(_MAKE, (purpose, secrets.token_bytes(32)))
            cur = await conn.execute(_GET, (purpose,))
            row = await cur.fetchone()
        assert row is not None
        return bytes(row[0])
