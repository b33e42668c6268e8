"""The audit trail: one append-only row per operator action and per refused attempt.

Rows are only ever inserted (the table refuses UPDATE, DELETE and TRUNCATE). Each says
when, who (the principal and its role then), what (the action and its target), with
which arguments, and how it ended: ``done``, ``failed`` (the action's own checks refused
it) or ``refused`` (the principal may not), with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from rflow.storage.errors import storable, translated

Outcome = Literal["done", "failed", "refused"]
Via = Literal["api", "console", "cli"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One row of the trail, as written."""

    principal: str
    action: str
    outcome: Outcome
    via: Via
    role: str | None = None
    target_kind: str | None = None
    target_id: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None


_INSERT = """
INSERT INTO audit_log (principal, role, action, target_kind, target_id, arguments, outcome,
                       reason, via)
VALUES (%(principal)s, %(role)s, %(action)s, %(target_kind)s, %(target_id)s, %(arguments)s,
        %(outcome)s, %(reason)s, %(via)s)
RETURNING id
"""

# `action` matches one action, or every action of a family: 'runs' is runs.read,
# runs.retry...
_LIST = """
SELECT id, at, principal, role, action, target_kind, target_id, arguments, outcome, reason, via
FROM audit_log
WHERE (%(principal)s::text IS NULL OR principal = %(principal)s)
  AND (%(action)s::text IS NULL OR action = %(action)s OR starts_with(action, %(family)s))
  AND (%(since)s::timestamptz IS NULL OR at >= %(since)s)
  AND (%(outcome)s::text IS NULL OR outcome = %(outcome)s)
  AND (%(target)s::text IS NULL OR target_id = %(target)s)
ORDER BY id DESC
LIMIT %(limit)s
"""


async def record(conn: psycopg.AsyncConnection, entry: Entry) -> int:
    """Append ``entry``; its id."""
    params = {
        "principal": entry.principal,
        "role": entry.role,
        "action": entry.action,
        "target_kind": entry.target_kind,
        "target_id": entry.target_id,
        "arguments": Jsonb(storable(entry.arguments)),
        "outcome": entry.outcome,
        "reason": storable(entry.reason),
        "via": entry.via,
    }
    with translated():
        cur = await conn.execute(_INSERT, params)
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def listing(
    conn: psycopg.AsyncConnection,
    *,
    principal: str | None = None,
    action: str | None = None,
    since: datetime | None = None,
    outcome: str | None = None,
    target: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """The newest rows first, of one principal, one action (or family: ``runs``), since a
    time, of one outcome or one target, when given."""
    params = {
        "principal": principal,
        "action": action,
        "family": f"{action}." if action else None,
        "since": since,
        "outcome": outcome,
        "target": target,
        "limit": limit,
    }
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_LIST, params)
            return list(await cur.fetchall())
