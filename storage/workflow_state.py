"""Durable per-workflow state: state_set, list_add and list_remove, applied once per key."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from rflow.storage.errors import translated

_CLAIM = (
    "INSERT INTO state_ops (op_key, result) VALUES (%s, 'null') ON CONFLICT (op_key) DO NOTHING"
)
_RESULT = "SELECT result FROM state_ops WHERE op_key = %s"
_SET_RESULT = "UPDATE state_ops SET result = %s WHERE op_key = %s"
_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%s))"
_READ = "SELECT key, value FROM workflow_state WHERE workflow = %s"
_READ_KEY = "SELECT value FROM workflow_state WHERE workflow = %s AND key = %s"
_UPSERT = """
INSERT INTO workflow_state (workflow, key, value, updated_at) VALUES (%s, %s, %s, now())
ON CONFLICT (workflow, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()
"""


async def load(conn: psycopg.AsyncConnection, workflow: str) -> dict[str, Any]:
    """Every key of ``workflow``'s state."""
    with translated():
        cur = await conn.execute(_READ, (workflow,))
        return {key: value for key, value in await cur.fetchall()}


async def apply(
    conn: psycopg.AsyncConnection, *, workflow: str, op_key: str, kind: str, action: dict[str, Any]
) -> dict[str, Any]:
    """Apply one state step once; a repeat of ``op_key`` returns the first result.

    ``kind`` is ``state_set`` (``action`` maps keys to values), ``list_add`` or
    ``list_remove`` (``action`` has ``list`` and ``value``). Returns ``{"state": {...}}``,
    the keys the step changed with their new values.
    """
    with translated():
        async with conn.transaction():
            cur = await conn.execute(_CLAIM, (op_key,))
            if cur.rowcount == 0:
                cur = await conn.execute(_RESULT, (op_key,))
                (result,) = await cur.fetchone()
                return result
            await conn.execute(_LOCK, (f"rflow.state.{workflow}",))
            if kind == "state_set":
                changed = dict(action)
            else:
                name = action["list"]
                cur = await conn.execute(_READ_KEY, (workflow, name))
                row = await cur.fetchone()
                current = row[0] if row and isinstance(row[0], list) else []
                value = action["value"]
                if kind == "list_add":
                    current = [*current, value]
                else:
                    current = [item for item in current if item != value]
                changed = {name: current}
            for key, value in changed.items():
                await conn.execute(_UPSERT, (workflow, key, Jsonb(value)))
            result = {"state": changed}
            await conn.execute(_SET_RESULT, (Jsonb(result), op_key))
            return result
