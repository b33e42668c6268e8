"""Chain-event ingress state: recorded blocks, emission cursors, emitted trigger keys.

Per network, the follower keeps the recent chain as it saw it (``chain_blocks``; the
highest row is the last processed block), how far each confirmation depth has emitted
(``chain_cursors``), and the trigger keys emitted from each block (``chain_emissions``),
so that after a restart it can still see a reorg and retract what the replaced blocks
fired. The policy lives in :mod:`rflow.ingress.chain`; here are the statements, and the
session advisory lock that makes one follower per network across all workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from rflow.storage.errors import translated


@dataclass(frozen=True)
class StoredBlock:
    """One row of ``chain_blocks``."""

    number: int
    hash: str
    parent_hash: str
    timestamp: int


@dataclass(frozen=True)
class Emission:
    """A trigger firing emitted from a block (one row of ``chain_emissions``)."""

    workflow: str
    trigger_key: str
    group: str | None
    block_number: int
    block_hash: str
    retracted_at: datetime | None = None


@dataclass(frozen=True)
class ChainState:
    """Everything stored for one network."""

    origins: frozenset[tuple[int, str]] = frozenset()
    """The (chain id, genesis hash) the cursors were saved for: one, or none when nothing
    is stored."""
    blocks: list[StoredBlock] = field(default_factory=list)
    cursors: dict[int, int] = field(default_factory=dict)
    """Confirmation depth -> highest block number emitted at that depth."""


_BLOCKS = """
SELECT number, hash, parent_hash, "timestamp" FROM chain_blocks
WHERE network = %(network)s ORDER BY number
"""

_CURSORS = """
SELECT confirmations, chain_id, genesis_hash, block_number FROM chain_cursors
WHERE network = %(network)s
"""

_UPSERT_BLOCK = """
INSERT INTO chain_blocks (network, number, hash, parent_hash, "timestamp")
VALUES (%(network)s, %(number)s, %(hash)s, %(parent_hash)s, %(timestamp)s)
ON CONFLICT (network, number) DO UPDATE
SET hash = EXCLUDED.hash, parent_hash = EXCLUDED.parent_hash, "timestamp" = EXCLUDED."timestamp"
"""

_TRIM_BLOCKS = """
DELETE FROM chain_blocks
WHERE network = %(network)s AND (number > %(tip)s OR number < %(floor)s)
"""

_UPSERT_CURSOR = """
INSERT INTO chain_cursors (network, confirmations, chain_id, genesis_hash, block_number)
VALUES (%(network)s, %(confirmations)s, %(chain_id)s, %(genesis_hash)s, %(block_number)s)
ON CONFLICT (network, confirmations) DO UPDATE
SET chain_id = EXCLUDED.chain_id, genesis_hash = EXCLUDED.genesis_hash,
    block_number = EXCLUDED.block_number, updated_at = now()
"""

_EMIT = """
INSERT INTO chain_emissions (network, workflow, trigger_key, "group", block_number, block_hash)
VALUES (%(network)s, %(workflow)s, %(trigger_key)s, %(group)s, %(block_number)s, %(block_hash)s)
ON CONFLICT (network, workflow, trigger_key) DO UPDATE
SET retracted_at = NULL, "group" = EXCLUDED."group"
"""

_EMITTED_FROM = """
SELECT workflow, trigger_key, "group", block_number, block_hash, retracted_at
FROM chain_emissions
WHERE network = %(network)s AND block_hash = ANY(%(hashes)s) AND retracted_at IS NULL
ORDER BY block_number, trigger_key, workflow
"""

_RETRACT = """
UPDATE chain_emissions SET retracted_at = now()
WHERE network = %(network)s AND block_hash = ANY(%(hashes)s) AND retracted_at IS NULL
"""

_TRIM_EMISSIONS = """
DELETE FROM chain_emissions WHERE network = %(network)s AND block_number < %(floor)s
"""

_RESET = [
    "DELETE FROM chain_blocks WHERE network = %(network)s",
    "DELETE FROM chain_cursors WHERE network = %(network)s",
    "DELETE FROM chain_emissions WHERE network = %(network)s",
]

_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%(key)s, 0))"


def _lock_key(schema: str, network: str) -> str:
    # The schema is part of the key, so that deployments (and tests) sharing one
    # database in separate schemas do not contend for each other's networks.
    return f"rflow.chain:{schema}:{network}"


async def load(conn: psycopg.AsyncConnection, network: str) -> ChainState:
    """The stored state of ``network`` (empty when it was never followed)."""
    with translated():
        cur = await conn.execute(_CURSORS, {"network": network})
        rows = await cur.fetchall()
        cur = await conn.execute(_BLOCKS, {"network": network})
        blocks = [StoredBlock(*row) for row in await cur.fetchall()]
    return ChainState(
        origins=frozenset((chain_id, genesis) for _, chain_id, genesis, _ in rows),
        blocks=blocks,
        cursors={confirmations: number for confirmations, _, _, number in rows},
    )


async def reset(conn: psycopg.AsyncConnection, network: str) -> None:
    """Forget everything stored for ``network`` (it is followed afresh)."""
    with translated():
        async with conn.transaction():
            for statement in _RESET:
                await conn.execute(statement, {"network": network})


async def save(
    conn: psycopg.AsyncConnection,
    network: str,
    origin: tuple[int, str],
    *,
    blocks: Iterable[StoredBlock],
    tip: int,
    floor: int,
    cursors: Mapping[int, int],
    retracted: Sequence[str] = (),
) -> None:
    """Record progress in one transaction.

    ``origin`` is the chain id and genesis hash of the chain followed. Upserts
    ``blocks``, drops recorded blocks above ``tip`` (replaced by a shorter
    chain) and below ``floor`` (out of the window, with their emissions), sets the
    ``cursors``, and marks the emissions of the ``retracted`` block hashes retracted.
    """
    params = {"network": network, "tip": tip, "floor": floor}
    with translated():
        async with conn.transaction(), conn.cursor() as cur:
            await cur.executemany(
                _UPSERT_BLOCK,
                [
                    {
                        "network": network,
                        "number": b.number,
                        "hash": b.hash,
                        "parent_hash": b.parent_hash,
                        "timestamp": b.timestamp,
                    }
                    for b in blocks
                ],
            )
            await cur.execute(_TRIM_BLOCKS, params)
            await cur.executemany(
                _UPSERT_CURSOR,
                [
                    {
                        "network": network,
                        "confirmations": level,
                        "chain_id": origin[0],
                        "genesis_hash": origin[1],
                        "block_number": number,
                    }
                    for level, number in cursors.items()
                ],
            )
            if retracted:
                await cur.execute(_RETRACT, {"network": network, "hashes": list(retracted)})
            await cur.execute(_TRIM_EMISSIONS, params)


async def record_emissions(
    conn: psycopg.AsyncConnection, network: str, emissions: Sequence[Emission]
) -> None:
    """Note firings about to be produced (a repeat of a known key is no change)."""
    if not emissions:
        return
    with translated():
        async with conn.transaction(), conn.cursor() as cur:
            await cur.executemany(
                _EMIT,
                [
                    {
                        "network": network,
                        "workflow": e.workflow,
                        "trigger_key": e.trigger_key,
                        "group": e.group,
                        "block_number": e.block_number,
                        "block_hash": e.block_hash,
                    }
                    for e in emissions
                ],
            )


async def emitted_from(
    conn: psycopg.AsyncConnection, network: str, block_hashes: Sequence[str]
) -> list[Emission]:
    """The firings emitted from these blocks and not yet retracted."""
    if not block_hashes:
        return []
    with translated():
        cur = await conn.execute(_EMITTED_FROM, {"network": network, "hashes": list(block_hashes)})
        return [Emission(*row) for row in await cur.fetchall()]


async def try_lock(conn: psycopg.AsyncConnection, schema: str, network: str) -> bool:
    """Take the follower lock of ``network`` in ``schema`` for this session, if no one
    holds it.

    A session lock: it lasts until the connection ends, so a worker that dies releases
    it with its connection.
    """
    with translated():
        cur = await conn.execute(_TRY_LOCK, {"key": _lock_key(schema, network)})
        row = await cur.fetchone()
        return bool(row and row[0])


async def alive(conn: psycopg.AsyncConnection) -> None:
    """A round trip on the lock's connection; raises if it (and so the lock) is gone."""
    with translated():
        await conn.execute("SELECT 1")
