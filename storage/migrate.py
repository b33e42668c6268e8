"""Schema migrations: numbered SQL files applied once each, in order, under a lock.

``migrations/NNNN_name.sql`` files are applied inside one transaction per run, holding
an advisory lock so that racing workers migrate once. Each applied file is recorded
with its checksum; a file changed after it was applied is refused.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from rflow.storage.db import check_schema
from rflow.storage.errors import MigrationError, translated

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


@dataclass(frozen=True)
class Migration:
    """One numbered SQL file."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migrations shipped with the code, in order."""
    found = []
    for path in sorted(directory.glob("*.sql")):
        number, _, name = path.stem.partition("_")
        if not number.isdigit():
            raise MigrationError(f"{path.name}: migration files are named NNNN_name.sql")
        found.append(Migration(int(number), name, path.read_text()))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migration files share a number in {directory}")
    return found


_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


async def migrate(conn: psycopg.AsyncConnection, schema: str) -> list[str]:
    """Bring ``schema`` up to date; returns the names of the files applied now."""
    check_schema(schema)
    applied_now: list[str] = []
    with translated():
        async with conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"rflow.migrate.{schema}",)
            )
            await conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
            )
            await conn.execute(
                sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema))
            )
            await conn.execute(_LEDGER)
            cur = await conn.execute("SELECT version, name, checksum FROM schema_migrations")
            done = {version: (name, checksum) for version, name, checksum in await cur.fetchall()}
            for migration in available():
                label = f"{migration.version:04d}_{migration.name}.sql"
                if migration.version in done:
                    if done[migration.version][1] != migration.checksum:
                        raise MigrationError(
                            f"migration {label} was changed after it was applied to schema "
                            f"{schema!r}; add a new migration instead"
                        )
                    continue
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
                applied_now.append(label)
    return applied_now


async def pending(conn: psycopg.AsyncConnection, schema: str) -> list[str]:
    """The migrations not yet applied to ``schema`` (all of them if it does not exist)."""
    check_schema(schema)
    with translated():
        cur = await conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.schema_migrations",)
        )
        row = await cur.fetchone()
        done: set[int] = set()
        if row and row[0]:
            cur = await conn.execute(
                sql.SQL("SELECT version FROM {}.schema_migrations").format(sql.Identifier(schema))
            )
            done = {version for (version,) in await cur.fetchall()}
    return [f"{m.version:04d}_{m.name}.sql" for m in available() if m.version not in done]
