"""Durable per-workflow state: state_set, list_add and list_remove, applied once per key."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from rflow.storage.errors import translated

_CLAIM = (
    "INSERT INTO state_ops (op_key, result) VALUES (%s, 'null') ON CONFLICT (op_key) DO NOTHING"
)
_RESULT = "SELECT result FROM state_ops WHERE op_key = %s"
_SET_RESULT = "UPDATE state_ops SET result = %s WHERE op_key = %s"
# A state_set in one statement: the claim of its key, with the result it is known to have,
# and the keys written only if the claim was taken. The closing SELECT sees the table as
# it was before the statement, so it finds a result only for a key applied already.
_SET_ONCE = """
WITH claimed AS (
    INSERT INTO state_ops (op_key, result) VALUES (%(op_key)s, %(result)s)
    ON CONFLICT (op_key) DO NOTHING
    RETURNING op_key
), written AS (
    INSERT INTO workflow_state (workflow, key, value, updated_at)
    SELECT %(workflow)s, changed.key, changed.value, now()
    FROM claimed, jsonb_each(%(changed)s::jsonb) AS changed
    ON CONFLICT (workflow, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()
)
SELECT result FROM state_ops WHERE op_key = %(op_key)s
"""
_READ = "SELECT key, value FROM workflow_state WHERE workflow = %s"
_ENTRIES = "SELECT key, value, updated_at FROM workflow_state WHERE workflow = %s ORDER BY key"
# Lists change in one statement each, under the row's own lock: racing runs of the
# workflow never lose an element, and no workflow-wide lock serializes them.
_ADD = """
INSERT INTO workflow_state (workflow, key, value, updated_at) VALUES (%s, %s, jsonb_build_array(%s::jsonb), now())
ON CONFLICT (workflow, key) DO UPDATE SET
    value = CASE jsonb_typeof(workflow_state.value)
                WHEN 'array' THEN workflow_state.value || jsonb_build_array(%s::jsonb)
                ELSE jsonb_build_array(%s::jsonb) END,
    updated_at = now()
RETURNING value
"""
_REMOVE = """
INSERT INTO workflow_state (workflow, key, value, updated_at) VALUES (%s, %s, '[]'::jsonb, now())
ON CONFLICT (workflow, key) DO UPDATE SET
    value = coalesce(
        (SELECT jsonb_agg(element) FROM jsonb_array_elements(
            CASE jsonb_typeof(workflow_state.value) WHEN 'array' THEN workflow_state.value ELSE '[]'::jsonb END
         ) AS element WHERE element <> %s::jsonb),
        '[]'::jsonb),
    updated_at = now()
RETURNING value
"""


@dataclass(frozen=True)
class StateEntry:
    """One key of a workflow's durable state, and when a step last wrote it."""

    key: str
    value: Any
    updated_at: datetime


async def entries(conn: psycopg.AsyncConnection, workflow: str) -> list[StateEntry]:
    """Every key of ``workflow``'s state with when it was last written, by name."""
    with translated():
        cur = await conn.execute(_ENTRIES, (workflow,))
        return [StateEntry(*row) for row in await cur.fetchall()]


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
    if kind == "state_set":
        changed = dict(action)
        result = {"state": changed}
        with translated():
            cur = await conn.execute(
                _SET_ONCE,
                {
                    "op_key": op_key,
                    "result": Jsonb(result),
                    "workflow": workflow,
                    "changed": Jsonb(changed),
                },
            )
            earlier = await cur.fetchone()
        return earlier[0] if earlier is not None else result
    with translated():
        async with conn.transaction():
            cur = await conn.execute(_CLAIM, (op_key,))
            if cur.rowcount == 0:
                cur = await conn.execute(_RESULT, (op_key,))
                (result,) = await cur.fetchone()
                return result
            name, value = action["list"], Jsonb(action["value"])
            if kind == "list_add":
                cur = await conn.execute(_ADD, (workflow, name, value, value, value))
            else:
                cur = await conn.execute(_REMOVE, (workflow, name, value))
            (current,) = await cur.fetchone()
            changed = {name: current}
            result = {"state": changed}
            await conn.execute(_SET_RESULT, (Jsonb(result), op_key))
            return result
