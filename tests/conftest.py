"""Shared fixtures: per-test settings with a fresh topic prefix, app id and schema."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest

from rflow.settings import Settings

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def unique() -> str:
    """A short id unique to this test, for topic prefixes, app ids and schemas."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def settings(unique: str, tmp_path: Path) -> Settings:
    """Settings isolated to this test: own topics, consumer group, schema and data dir."""
    return Settings.from_env(
        topic_prefix=f"t{unique}.",
        app_id=f"rflow-t{unique}",
        database_schema=f"t_{unique}",
        data_dir=tmp_path / "data",
        broker_session_timeout=6.0,
        broker_heartbeat_interval=0.5,
        api_token=f"token-{unique}",
        # The keys rflow's ingresses vouch for their firings with (RFLOW_INGRESS_KEYS).
        ingress_keys=f"t{unique}:{unique * 4}",
        # Not the stack's: Prometheus there would scrape this test's workers.
        metrics_targets_dir=tmp_path / "prometheus-targets",
    )


@pytest.fixture(autouse=True)
async def _stacks_of_a_hanging_test(request: pytest.FixtureRequest):
    """Shortly before pytest-timeout fails a test, print every asyncio task's stack.

    The timeout alone shows only the event loop waiting in ``select``; the tasks show
    what the test was actually waiting for.
    """
    marker = request.node.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker and marker.args else request.config.getini("timeout")
    if not limit:
        yield
        return
    loop = asyncio.get_running_loop()

    def dump() -> None:
        print(f"\n--- asyncio tasks of {request.node.nodeid} near its timeout ---", file=sys.stderr)
        for task in asyncio.all_tasks(loop):
            task.print_stack(limit=20, file=sys.stderr)

    handle = loop.call_later(max(float(limit) - 10.0, 1.0), dump)
    yield
    handle.cancel()
