"""Postgres migrations on the real database."""

from __future__ import annotations

import pytest
from psycopg import sql
from pydantic import SecretStr

from rflow import storage
from rflow.settings import Settings


@pytest.fixture
async def conn(settings: Settings):
    conn = await storage.connect(settings)
    async with conn:
        yield conn
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(settings.database_schema)
            )
        )


async def test_migrations_apply_to_an_empty_schema_and_are_idempotent(settings, conn):
    schema = settings.database_schema
    assert await storage.pending(conn, schema) == [
        f"{m.version:04d}_{m.name}.sql" for m in storage.available()
    ]

    applied = await storage.migrate(conn, schema)
    assert applied == [f"{m.version:04d}_{m.name}.sql" for m in storage.available()]
    assert applied[0] == "0001_init.sql"
    assert await storage.pending(conn, schema) == []
    cur = await conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
        (schema,),
    )
    tables = {row[0] for row in await cur.fetchall()}
    assert {"dead_letters", "schema_migrations", "runs", "step_logs", "timers", "waits"} <= tables

    assert await storage.migrate(conn, schema) == []


async def test_a_migration_changed_after_it_was_applied_is_refused(settings, conn):
    schema = settings.database_schema
    await storage.migrate(conn, schema)
    await conn.execute(
        sql.SQL("UPDATE {}.schema_migrations SET checksum = 'x' WHERE version = 1").format(
            sql.Identifier(schema)
        )
    )
    with pytest.raises(
        storage.MigrationError, match=r"migration 0001_init\.sql was changed after it was applied"
    ):
        await storage.migrate(conn, schema)


async def test_unreachable_database_is_a_storage_error_not_a_driver_error(settings):
    bad = settings.model_copy(
        update={"database_url": SecretStr("postgresql://rflow@127.0.0.1:1/rflow")}
    )
    with pytest.raises(
        storage.Unavailable, match=r"cannot reach Postgres at postgresql://127.0.0.1:1/…"
    ):
        await storage.connect(bad)


async def test_retention_purges_only_old_settled_runs_of_the_workflow(settings, conn):
    from datetime import UTC, datetime, timedelta

    from rflow.engine.effects import Journal
    from rflow.storage import runs

    await storage.migrate(conn, settings.database_schema)
    await conn.execute(
        sql.SQL("SET search_path TO {}").format(sql.Identifier(settings.database_schema))
    )
    now = datetime.now(UTC)
    entries = []
    for rid, workflow, age, settled in [
        ("old", "w", 40, True),
        ("old-running", "w", 40, False),
        ("new", "w", 1, True),
        ("other", "x", 40, True),
    ]:
        at = now - timedelta(days=age)
        entries.append(
            Journal(
                run_id=rid, workflow=workflow, event="run_started", status="running", at=at, data={}
            )
        )
        if settled:
            entries.append(
                Journal(
                    run_id=rid, workflow=workflow, event="run_settled", status="succeeded", at=at
                )
            )
    await runs.project(conn, entries)
    assert await runs.purge(conn, "w", now - timedelta(days=30)) == 1
    remaining = {r["run_id"] for r in await runs.list_runs(conn, limit=10)}
    assert remaining == {"old-running", "new", "other"}


async def test_a_step_entry_before_its_run_entry_does_not_stall_the_projection(settings, conn):
    from datetime import UTC, datetime

    from rflow.engine.effects import Journal
    from rflow.storage import runs

    await storage.migrate(conn, settings.database_schema)
    await conn.execute(
        sql.SQL("SET search_path TO {}").format(sql.Identifier(settings.database_schema))
    )
    now = datetime.now(UTC)
    step = Journal(
        run_id="r1",
        workflow="w",
        event="step_settled",
        path="a",
        status="succeeded",
        at=now,
        data={"output": 1},
    )
    assert await runs.project(conn, [step]) == 1
    started = Journal(
        run_id="r1", workflow="w", event="run_started", status="running", at=now, data={}
    )
    await runs.project(conn, [started])
    run = await runs.get_run(conn, "r1")
    assert [s["output"] for s in run["steps"]] == [1]


async def test_sends_stored_before_0016_get_the_same_short_id_as_new_ones(settings, conn):
    from rflow.storage import sends

    schema = settings.database_schema
    keys = ["pay:manual:1:pay", "wf:caf\u00e9 \u2603:step[3]", "fill:local:0xab:7"]
    async with conn.transaction():
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        for migration in storage.available():
            if migration.version == 16:
                for nonce, key in enumerate(keys):
                    await conn.execute(
                        "INSERT INTO sends (send_key, network, relayer, address, nonce, "
                        "to_address, value, data, gas_limit, fee_cap, tx_hash) "
                        "VALUES (%s, 'local', 'r', '0xab', %s, '0xcd', 0, '', 21000, 1, %s)",
                        (key, nonce, f"0x{nonce:064x}"),
                    )
            await conn.execute(migration.sql)
        cur = await conn.execute("SELECT send_key, send_id FROM sends")
        assert dict(await cur.fetchall()) == {key: sends.send_id(key) for key in keys}
