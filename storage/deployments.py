"""Deployments: each published project source under an increasing id, and which one
every worker runs.

Deployments move forward. A source that is an older deployment's (its digest names a
deployment before the newest) is published again only as a rollback (action
``deploy.rollback``, with the newest it replaces and who asked); otherwise
:func:`publish` raises :class:`Older`, storing nothing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from rflow.storage import versions
from rflow.storage.errors import translated

# Publishers take turns, so ids are given in commit order: a worker that saw id n never
# finds a smaller one committed later. Readers are not blocked.
_LOCK = "LOCK TABLE deployments IN SHARE ROW EXCLUSIVE MODE"
_LATEST = "SELECT id, digest, versions FROM deployments ORDER BY id DESC LIMIT 1"
_INSERT = """
INSERT INTO deployments (digest, source, versions, action, replaced, actor)
VALUES (%s, %s, %s, %s, %s, %s) RETURNING id
"""
_SAME = "SELECT max(id) FROM deployments WHERE digest = %s"
_AT = "SELECT deployed_at FROM deployments WHERE id = %s"
_LATEST_ID = "SELECT max(id) FROM deployments"
_GET = """
SELECT id, digest, source, versions, deployed_at, action, replaced, actor
FROM deployments WHERE id = %s
"""
_RECENT = """
SELECT id, digest, versions, deployed_at, action, replaced, actor
FROM deployments ORDER BY id DESC LIMIT %s
"""

ROLLBACK = "deploy.rollback"
"""The action a rollback is recorded as (and authorized as)."""
_REPORT = """
INSERT INTO deployment_workers AS w
    (worker, app_id, deployment, failed, error, started_at, seen_at, client_id, assignment)
VALUES (%(worker)s, %(app_id)s, %(deployment)s, %(failed)s, %(error)s, %(started_at)s, now(),
    %(client_id)s, %(assignment)s)
ON CONFLICT (worker) DO UPDATE SET app_id = EXCLUDED.app_id, deployment = EXCLUDED.deployment,
    failed = EXCLUDED.failed, error = EXCLUDED.error, started_at = EXCLUDED.started_at,
    seen_at = now(), client_id = EXCLUDED.client_id, assignment = EXCLUDED.assignment
"""
_WORKERS = """
SELECT worker, app_id, deployment, failed, error, started_at, seen_at,
    extract(epoch FROM now() - seen_at)::float8 AS seen_ago, client_id, assignment
FROM deployment_workers ORDER BY worker
"""


@dataclass(frozen=True)
class Published:
    """What :func:`publish` did."""

    id: int
    """The deployment that is the latest now."""
    created: bool
    """False when the source was the latest deployment's already (nothing new stored)."""
    before: dict[str, str]
    """The workflow versions deployed before: ``{workflow: version}``."""
    action: str = "deploy"
    """``deploy``, or ``deploy.rollback`` when it went back to an older source."""


class Older(Exception):
    """The source is an older deployment's: publishing it would roll every worker back."""

    def __init__(self, project: int, newest: int, newest_at: datetime) -> None:
        super().__init__(f"the project is deployment {project}, older than deployment {newest}")
        self.project = project
        """The newest deployment whose source this is."""
        self.newest = newest
        self.newest_at = newest_at


@dataclass(frozen=True)
class StoredDeployment:
    """One row of ``deployments``."""

    id: int
    digest: str
    source: dict[str, Any]
    versions: dict[str, str]
    deployed_at: datetime
    action: str = "deploy"
    replaced: int | None = None
    actor: str | None = None


@dataclass(frozen=True)
class Summary:
    """A deployment without its source."""

    id: int
    digest: str
    versions: dict[str, str]
    deployed_at: datetime
    action: str = "deploy"
    """``deploy``, or ``deploy.rollback`` (an operator went back to an older source)."""
    replaced: int | None = None
    """A rollback's: the newest deployment it went back from."""
    actor: str | None = None
    """Who published it (``rflow deploy`` and its user, or a worker)."""


@dataclass(frozen=True)
class WorkerRow:
    """One row of ``deployment_workers``: what a worker runs."""

    worker: str
    app_id: str
    deployment: int | None
    failed: int | None
    error: str | None
    started_at: datetime
    seen_at: datetime
    seen_ago: float
    """Seconds since the worker last reported (by the database's clock)."""
    client_id: str | None
    """The worker's Kafka client id (as the consumer group lists its members)."""
    assignment: dict[str, Any]
    """``{"actives": {topic: [partition, ...]}, "standbys": {...}}``: the partitions the
    worker owns and the standby copies of tables it keeps, per topic (full names)."""


async def publish(
    conn: psycopg.AsyncConnection,
    *,
    digest: str,
    source: dict[str, Any],
    definitions: Mapping[str, tuple[str, dict[str, Any]]],
    rollback: bool = False,
    actor: str | None = None,
) -> Published:
    """Make ``source`` (with the ``{workflow: (version, definition)}`` it loads to) the
    latest deployment: its versions become the ones new runs start with, and workflows
    it no longer has are undeployed. A source equal to the latest one's stores no new
    deployment; one equal to an older deployment's raises :class:`Older` (nothing is
    changed) unless ``rollback``: then it is stored as the newest, recorded as a rollback
    from the deployment it replaces. Order is the deployments' ids, never a clock."""
    with translated():
        async with conn.transaction():
            await conn.execute(_LOCK)
            cur = await conn.execute(_LATEST)
            latest = await cur.fetchone()
            before = dict(latest[2]) if latest is not None else await versions.current(conn)
            same = None
            if latest is not None and latest[1] != digest:
                cur = await conn.execute(_SAME, (digest,))
                same = (await cur.fetchone())[0]
                if same is not None and not rollback:
                    cur = await conn.execute(_AT, (latest[0],))
                    raise Older(same, latest[0], (await cur.fetchone())[0])
            await versions.deploy(conn, definitions)
            await versions.retire(conn, sorted(definitions))
            if latest is not None and latest[1] == digest:
                return Published(latest[0], False, before)
            deployed = {name: version for name, (version, _) in definitions.items()}
            action, replaced = (ROLLBACK, latest[0]) if same is not None else ("deploy", None)
            cur = await conn.execute(
                _INSERT, (digest, Jsonb(source), Jsonb(deployed), action, replaced, actor)
            )
            row = await cur.fetchone()
            assert row is not None
            return Published(row[0], True, before, action)


async def latest_id(conn: psycopg.AsyncConnection) -> int | None:
    """The newest deployment's id, or ``None`` before the first."""
    with translated():
        cur = await conn.execute(_LATEST_ID)
        row = await cur.fetchone()
        return row[0] if row else None


async def get(conn: psycopg.AsyncConnection, id: int) -> StoredDeployment | None:
    """Deployment ``id``, source included."""
    with translated():
        async with conn.cursor(row_factory=class_row(StoredDeployment)) as cur:
            await cur.execute(_GET, (id,))
            return await cur.fetchone()


async def recent(conn: psycopg.AsyncConnection, limit: int = 10) -> list[Summary]:
    """The newest ``limit`` deployments, newest first, without their sources."""
    with translated():
        async with conn.cursor(row_factory=class_row(Summary)) as cur:
            await cur.execute(_RECENT, (limit,))
            return list(await cur.fetchall())


async def report(
    conn: psycopg.AsyncConnection,
    *,
    worker: str,
    app_id: str,
    deployment: int | None,
    failed: int | None,
    error: str | None,
    started_at: datetime,
    client_id: str | None = None,
    assignment: Mapping[str, Any] | None = None,
) -> None:
    """Record which deployment ``worker`` runs, and the newest it could not load; its
    Kafka client id and the partitions it holds (``WorkerRow.assignment``)."""
    with translated():
        await conn.execute(
            _REPORT,
            {
                "worker": worker,
                "app_id": app_id,
                "deployment": deployment,
                "failed": failed,
                "error": error,
                "started_at": started_at,
                "client_id": client_id,
                "assignment": Jsonb(dict(assignment or {})),
            },
        )


async def workers(conn: psycopg.AsyncConnection) -> list[WorkerRow]:
    """Every worker that reported, by name."""
    with translated():
        async with conn.cursor(row_factory=class_row(WorkerRow)) as cur:
            await cur.execute(_WORKERS)
            return list(await cur.fetchall())
