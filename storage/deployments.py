"""Deployments: each published project source under an increasing id, and which one
every worker runs."""

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
_INSERT = "INSERT INTO deployments (digest, source, versions) VALUES (%s, %s, %s) RETURNING id"
_LATEST_ID = "SELECT max(id) FROM deployments"
_GET = "SELECT id, digest, source, versions, deployed_at FROM deployments WHERE id = %s"
_RECENT = """
SELECT id, digest, versions, deployed_at FROM deployments ORDER BY id DESC LIMIT %s
"""
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


@dataclass(frozen=True)
class StoredDeployment:
    """One row of ``deployments``."""

    id: int
    digest: str
    source: dict[str, Any]
    versions: dict[str, str]
    deployed_at: datetime


@dataclass(frozen=True)
class Summary:
    """A deployment without its source."""

    id: int
    digest: str
    versions: dict[str, str]
    deployed_at: datetime


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
) -> Published:
    """Make ``source`` (with the ``{workflow: (version, definition)}`` it loads to) the
    latest deployment: its versions become the ones new runs start with, and workflows
    it no longer has are undeployed. A source equal to the latest one's stores no new
    deployment."""
    with translated():
        async with conn.transaction():
            await conn.execute(_LOCK)
            cur = await conn.execute(_LATEST)
            latest = await cur.fetchone()
            before = dict(latest[2]) if latest is not None else await versions.current(conn)
            await versions.deploy(conn, definitions)
            await versions.retire(conn, sorted(definitions))
            if latest is not None and latest[1] == digest:
                return Published(latest[0], False, before)
            deployed = {name: version for name, (version, _) in definitions.items()}
            cur = await conn.execute(_INSERT, (digest, Jsonb(source), Jsonb(deployed)))
            row = await cur.fetchone()
            assert row is not None
            return Published(row[0], True, before)


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
