"""The read model's projection of run journals, one batch at a time, on the real Postgres."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rflow import storage
from rflow.engine.effects import Journal, Settle
from rflow.engine.state import RunStatus
from rflow.failures import FailureKind, StepError
from rflow.storage import runs

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def entry(rid: str, event: str, status: str, when: int, path: str | None = None, **data) -> Journal:
    return Journal(
        run_id=rid, workflow="w", event=event, path=path, status=status, at=at(when), data=data
    )


def journal() -> list[Journal | Settle]:
    """Two runs, each entry kind, and repeats with other values inside one batch."""
    failed = {"kind": "data_unavailable", "message": "HTTP 503"}
    return [
        entry("r1", "run_started", "running", 0, version="v1", trigger_key="k1", trigger={"a": 1}),
        entry("r2", "run_started", "running", 0, version="v1", trigger_key="k2", group="g"),
        entry("r1", "run_started", "running", 5, version="v1", trigger_key="k1"),  # repeat
        entry("r1", "step_started", "running", 1, "a", kind="http_call", seq=1),
        entry("r1", "step_retrying", "retrying", 2, "a", attempt=2, error=failed),
        entry("r1", "step_retrying", "retrying", 3, "a", attempt=3, error=failed),
        entry("r1", "step_settled", "failed", 4, "a", attempt=3, output=1, error=failed, seq=1),
        entry("r1", "step_settled", "succeeded", 5, "a", attempt=3, output="x\x00y", seq=1),
        entry("r2", "step_started", "running", 1, "b[0]", kind="notify", seq=1),
        entry("r2", "step_started", "waiting", 1, "nap", kind="delay", seq=2),
        entry("r2", "step_retrying", "retrying", 2, "b[0]", attempt=2, error=failed),
        entry("r1", "run_settled", "failed", 6, error=failed),
        entry("r1", "run_settled", "succeeded", 7),
        Settle(
            run_id="r2",
            workflow="w",
            status=RunStatus.FAILED,
            on_failure="dead_letter",
            error=StepError(kind=FailureKind.DATA_UNAVAILABLE, message="HTTP 503"),
            journal={"updated_at": at(8).isoformat(), "steps": {}},
        ),
        Settle(
            run_id="r2",
            workflow="w",
            status=RunStatus.FAILED,
            on_failure="dead_letter",
            journal={"updated_at": at(9).isoformat()},
        ),
    ]


async def test_a_batch_is_applied_as_its_entries_one_by_one_would_be(settings, schema):
    conn = await storage.connect(settings)
    async with conn:
        entries = journal()
        assert await runs.project(conn, entries) == len(entries)
        one = await runs.get_run(conn, "r1")
        two = await runs.get_run(conn, "r2")

    assert (one["status"], one["error_kind"], one["settled_at"]) == ("succeeded", None, at(7))
    assert (one["created_at"], one["trigger"], one["version"]) == (at(0), {"a": 1}, "v1")
    [step] = one["steps"]
    assert (step["status"], step["attempt"], step["error_kind"]) == ("succeeded", 3, None)
    assert (step["output"], step["kind"], step["started_at"]) == ("x\ufffdy", "http_call", at(1))
    assert step["settled_at"] == at(5)

    assert (two["status"], two["group_key"], two["settled_at"]) == ("running", "g", None)
    retried, nap = two["steps"]
    assert (retried["path"], retried["status"], retried["attempt"]) == ("b[0]", "retrying", 2)
    assert (nap["path"], nap["status"], nap["kind"]) == ("nap", "waiting", "delay")
    assert (retried["error_kind"], retried["error_message"]) == ("data_unavailable", "HTTP 503")
    dead = two["dead"]
    assert (dead["error_kind"], dead["dead_at"]) == ("data_unavailable", at(8))
    assert dead["journal"]["steps"] == {}


async def test_a_batch_replayed_changes_nothing(settings, schema):
    conn = await storage.connect(settings)
    async with conn:
        await runs.project(conn, journal())
        first = await runs.get_run(conn, "r1"), await runs.get_run(conn, "r2")
        await runs.project(conn, journal())
        assert (await runs.get_run(conn, "r1"), await runs.get_run(conn, "r2")) == first
