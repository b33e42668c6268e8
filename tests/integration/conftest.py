"""Integration fixtures: the real Kafka, Postgres and anvil that ``scripts/stack up`` runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from psycopg import sql

from rflow import storage
from rflow.settings import Settings
from rflow.streams import kafka, topics
from tests.integration.harness import WorkerProcess

pytestmark = pytest.mark.integration


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath) or "tests\\integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session", autouse=True)
def stack_is_up() -> None:
    """Fail fast, with the fix, when the local stack is not running."""
    settings = Settings.from_env()

    async def check() -> None:
        await topics.describe(settings, [])
        conn = await storage.connect(settings)
        await conn.close()

    try:
        asyncio.run(asyncio.wait_for(check(), 20))
    except Exception as exc:  # any failure means the same fix
        pytest.fail(f"the local stack is not reachable ({exc}); start it with: scripts/stack up")


@pytest.fixture
async def schema(settings: Settings) -> AsyncIterator[str]:
    """A fresh, migrated schema for this test, dropped afterwards."""
    conn = await storage.connect(settings)
    async with conn:
        await storage.migrate(conn, settings.database_schema)
    yield settings.database_schema
    # A new connection: the test may have restarted Postgres under the first one.
    conn = await storage.connect(settings)
    async with conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(settings.database_schema)
            )
        )


@pytest.fixture
async def applied_topics(settings: Settings) -> AsyncIterator[topics.ApplyResult]:
    """The topics of topics.yaml created under this test's prefix; deleted afterwards."""
    yield await topics.apply(settings)
    await delete_test_topics(settings)


async def delete_test_topics(settings: Settings) -> None:
    """Delete the topics of this test: its prefix, and Faust's own under its app id."""
    admin = kafka.admin(settings)
    await admin.start()
    try:
        mine = [
            name
            for name in await admin.list_topics()
            if name.startswith(settings.topic_prefix) or name.startswith(settings.app_id + "-")
        ]
        if mine:
            await admin.delete_topics(mine)
    finally:
        await admin.close()


@pytest.fixture
def worker_factory(settings: Settings, tmp_path: Path) -> Iterator:
    """Start ``rflow worker`` processes for this test; all are stopped at teardown."""
    started: list[WorkerProcess] = []

    def start(
        command: tuple[str, ...] = WorkerProcess.RFLOW,
        env: dict[str, str] | None = None,
        **overrides,
    ) -> WorkerProcess:
        if started and "data_dir" not in overrides:
            # A data directory of its own, as every worker on one host has: a later worker
            # is a new host unless the test gives it an earlier one's directory.
            overrides["data_dir"] = tmp_path / f"data-{len(started)}"
        worker = WorkerProcess(
            settings.model_copy(update=overrides),
            tmp_path / f"worker-{len(started)}.log",
            command,
            env,
        ).start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
async def sink():
    """An HTTP sink on 127.0.0.1 that records every request."""
    from tests.integration.sink import Sink

    started = await Sink().start()
    yield started
    await started.stop()


@pytest.fixture
async def w3(settings: Settings):
    """A web3 on the stack's anvil."""
    from tests.integration import chain

    w3 = chain.connect(settings.rpc_url("local"))
    yield w3
    await w3.provider.disconnect()
