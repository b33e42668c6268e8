"""Workflow versions and deployments: immutable definitions, and which one new runs use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from rflow.storage.errors import translated

_VERSION = """
INSERT INTO workflow_versions (version, workflow, definition) VALUES (%s, %s, %s)
ON CONFLICT (version) DO NOTHING
"""
_DEPLOY = """
INSERT INTO workflow_deployments AS d (workflow, version) VALUES (%s, %s)
ON CONFLICT (workflow) DO UPDATE SET version = EXCLUDED.version, deployed_at = now()
WHERE d.version <> EXCLUDED.version
RETURNING (SELECT version FROM workflow_deployments WHERE workflow = %s)
"""
_RETIRE = "DELETE FROM workflow_deployments WHERE workflow <> ALL(%s) RETURNING workflow, version"
_CURRENT = "SELECT workflow, version FROM workflow_deployments"
_DEFINITION = "SELECT workflow, definition FROM workflow_versions WHERE version = %s"


async def deploy(
    conn: psycopg.AsyncConnection, definitions: Mapping[str, tuple[str, dict[str, Any]]]
) -> dict[str, tuple[str | None, str]]:
    """Publish ``{workflow: (version, definition)}`` and make each the one new runs use.

    Returns ``{workflow: (previous version or None, version)}`` for the workflows whose
    deployed version changed; publishing what is deployed already changes nothing.
    """
    changed = {}
    with translated():
        async with conn.transaction():
            for workflow, (version, definition) in sorted(definitions.items()):
                await conn.execute(_VERSION, (version, workflow, Jsonb(definition)))
                cur = await conn.execute(_DEPLOY, (workflow, version, workflow))
                row = await cur.fetchone()
                if row is not None:
                    changed[workflow] = (row[0], version)
    return changed


async def retire(conn: psycopg.AsyncConnection, keep: list[str]) -> dict[str, str]:
    """Undeploy every workflow not in ``keep``; returns ``{workflow: its last version}``."""
    with translated():
        cur = await conn.execute(_RETIRE, (keep,))
        return dict(await cur.fetchall())


async def current(conn: psycopg.AsyncConnection) -> dict[str, str]:
    """The deployed version of every workflow: the one its new runs start with."""
    with translated():
        cur = await conn.execute(_CURRENT)
        return dict(await cur.fetchall())


async def definition(conn: psycopg.AsyncConnection, version: str) -> tuple[str, dict] | None:
    """(workflow, definition) of ``version``, or ``None`` if never deployed."""
    with translated():
        cur = await conn.execute(_DEFINITION, (version,))
        row = await cur.fetchone()
        return (row[0], row[1]) if row else None


_KNOWN = """
SELECT EXISTS (SELECT 1 FROM workflow_deployments WHERE workflow = %(name)s)
    OR EXISTS (SELECT 1 FROM runs WHERE workflow = %(name)s)
"""


async def known(conn: psycopg.AsyncConnection, name: str) -> bool:
    """Whether ``name`` is a deployed workflow or has runs: a name a filter may use."""
    with translated():
        cur = await conn.execute(_KNOWN, {"name": name})
        row = await cur.fetchone()
        return bool(row and row[0])


_HISTORY = """
SELECT v.version, v.created_at, d.version IS NOT NULL AS deployed
FROM workflow_versions v
LEFT JOIN workflow_deployments d ON d.workflow = v.workflow AND d.version = v.version
WHERE v.workflow = %s
ORDER BY v.created_at DESC, v.version
LIMIT %s
"""


async def history(
    conn: psycopg.AsyncConnection, workflow: str, limit: int = 50
) -> list[dict[str, Any]]:
    """The versions of ``workflow`` ever deployed, newest first: ``version``,
    ``created_at`` (when first deployed) and whether it is the ``deployed`` one now."""
    with translated():
        cur = await conn.execute(_HISTORY, (workflow, limit))
        return [
            {"version": version, "created_at": created, "deployed": deployed}
            for version, created, deployed in await cur.fetchall()
        ]
