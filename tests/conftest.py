"""Shared fixtures: per-test settings with a fresh topic prefix, app id and schema."""

from __future__ import annotations

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
    )
