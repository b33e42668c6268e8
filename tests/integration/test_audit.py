"""The audit trail in Postgres: rows are only ever added, and are read back by principal,
action (or family), time, outcome and target."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from rflow import storage
from rflow.audit import since_of
from rflow.storage import audit

pytestmark = pytest.mark.usefixtures("schema")


async def test_the_trail_refuses_every_change_but_a_new_row(settings):
    conn = await storage.connect(settings)
    async with conn:
        first = await audit.record(
            conn,
            audit.Entry(
                "alice",
                "runs.retry",
                "refused",
                "api",
                role="approver",
                target_kind="run",
                target_id="r1",
                arguments={"from": "pay\x00"},
                reason="may not",
            ),
        )
        await audit.record(conn, audit.Entry("operator", "runs.retry", "done", "cli", role="operator", target_kind="run", target_id="r1"))  # fmt: skip
        await audit.record(conn, audit.Entry("bob", "workflows.pause", "failed", "console", reason="no workflow"))  # fmt: skip
        for statement in (
            "UPDATE audit_log SET outcome = 'done' WHERE id = %s",
            "DELETE FROM audit_log WHERE id = %s",
            "TRUNCATE audit_log",
        ):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                await conn.execute(statement, (first,) if "%s" in statement else None)
            await conn.rollback()
        rows = await audit.listing(conn)
        assert [(r["principal"], r["outcome"]) for r in rows] == [
            ("bob", "failed"),
            ("operator", "done"),
            ("alice", "refused"),
        ]
        assert rows[2]["arguments"] == {"from": "pay\ufffd"}  # NUL cannot be stored: replaced
        by = {r["principal"] for r in await audit.listing(conn, principal="alice")}
        assert by == {"alice"}
        family = await audit.listing(conn, action="runs")
        assert {r["action"] for r in family} == {"runs.retry"}
        assert await audit.listing(conn, action="run") == []  # a family is a whole name
        assert len(await audit.listing(conn, target="r1")) == 2
        assert len(await audit.listing(conn, outcome="refused")) == 1
        later = datetime.now(UTC) + timedelta(minutes=1)
        assert await audit.listing(conn, since=later) == []
        assert len(await audit.listing(conn, limit=1)) == 1


def test_since_is_a_time_or_a_duration_back_from_now():
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert since_of("24h", now) == now - timedelta(hours=24)
    assert since_of("2026-03-01T10:00:00", now) == datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    assert since_of(None, now) is None and since_of(" ", now) is None
    with pytest.raises(ValueError, match=r"neither a time .* nor a duration"):
        since_of("yesterday", now)
