"""The Faust worker end to end: trigger records in, table state out, across restarts.

The ``triggers`` table remembers a firing once its runs began by what de-duplication
needs (its runs, when it was admitted, the digest of its record); the record as
received is in the read model (and on the triggers topic)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from rflow import storage
from rflow.codecs import TriggerRecord
from rflow.engine import memory
from rflow.engine.keys import run_id
from rflow.settings import Settings
from rflow.storage import dead_letters
from rflow.streams.producer import produce_trigger
from tests.integration.harness import WorkerProcess, produce, wait_until

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
channels:
  ops: { type: log }
workflows:
  sweep:
    trigger: { manual: {} }
    steps:
      - id: note
        notify: { channel: ops, message: "sweeping" }
"""


@pytest.fixture
def worker_factory(worker_factory, tmp_path):
    """Workers of this module run the `sweep` workflow."""
    project = tmp_path / "project.yaml"
    project.write_text(PROJECT)

    def start(**overrides):
        return worker_factory(**{"project_path": project, **overrides})

    return start


def trigger(key: str, **payload) -> TriggerRecord:
    return TriggerRecord(
        workflow="sweep",
        trigger_key=key,
        source="manual",
        payload=payload,
        received_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )


async def send_trigger(settings: Settings, record: TriggerRecord) -> None:
    await produce_trigger(settings, record)


async def table_entry(worker, key: str):
    async def present():
        status, body = await worker.get(f"/rflow/triggers/sweep:{key}/")
        return body if status == 200 else None

    return await wait_until(present, timeout=30, what=f"trigger {key} in the table")


async def remembered(worker, record: TriggerRecord) -> dict:
    """The gate entry of ``record`` once its run began: what de-duplication needs."""

    async def compact():
        entry = await table_entry(worker, record.trigger_key)
        return entry if memory.is_remembered(entry) else None

    entry = await wait_until(compact, timeout=30, what=f"{record.trigger_key} remembered")
    assert entry["runs"] == [run_id("sweep", record.trigger_key)]
    assert set(entry) == {"runs", "at", "digest"}
    return entry


def digest_of(record: TriggerRecord) -> str:
    """The digest of ``record`` as the worker reads it off the topic."""
    from rflow.codecs import decode, encode

    return memory.digest(decode(encode(record)).model_dump(mode="json"))


async def accepted_trigger(settings: Settings, record: TriggerRecord) -> dict:
    """The trigger of ``record``'s run, as the read model keeps it."""
    from rflow.storage import runs

    async def projected():
        conn = await storage.connect(settings)
        async with conn:
            return await runs.get_run(conn, run_id("sweep", record.trigger_key))

    return (await wait_until(projected, timeout=30, what="the run in the read model"))["trigger"]


async def test_trigger_is_recorded_and_survives_a_restart(settings, worker_factory):
    worker = worker_factory()
    await worker.wait_ready()
    record = trigger("manual:sweep:1", amount=2**200, to="0xabc")
    await send_trigger(settings, record)

    stored = await remembered(worker, record)
    assert stored["digest"] == digest_of(record)
    # The record as received is in the read model, exact beyond 64 bits.
    assert int((await accepted_trigger(settings, record))["amount"]) == 2**200

    worker.stop()
    # A new process with a new data dir: the table can only come from its changelog.
    restarted = worker_factory(data_dir=settings.data_dir.parent / "fresh")
    await restarted.wait_ready()
    status, body = await restarted.get(f"/rflow/triggers/sweep:{record.trigger_key}/")
    assert status == 200
    assert body == stored


async def test_duplicate_delivery_keeps_the_first_record(settings, worker_factory):
    worker = worker_factory()
    await worker.wait_ready()
    first = trigger("manual:sweep:dup", n=1)
    await send_trigger(settings, first)
    assert (await remembered(worker, first))["digest"] == digest_of(first)

    await send_trigger(settings, trigger("manual:sweep:dup", n=2))
    marker = trigger("manual:sweep:after-dup")
    await send_trigger(settings, marker)
    await remembered(worker, marker)
    _, body = await worker.get(f"/rflow/triggers/sweep:{first.trigger_key}/")
    assert body["digest"] == digest_of(first)
    assert await accepted_trigger(settings, first) == {"n": 1}


async def test_killed_worker_loses_no_accepted_trigger(settings, worker_factory):
    worker = worker_factory()
    await worker.wait_ready()
    records = [trigger(f"manual:sweep:k{i}", i=i) for i in range(20)]
    for record in records:
        await send_trigger(settings, record)
    await table_entry(worker, records[-1].trigger_key)
    worker.kill()

    restarted = worker_factory(data_dir=settings.data_dir.parent / "after-kill")
    await restarted.wait_ready()
    for record in records:
        assert (await remembered(restarted, record))["digest"] == digest_of(record)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff not json", "not JSON"),
        (b"[1, 2]", "not a JSON object: the record is a list"),
        (
            b'{"kind": "trigger"}',
            'no "v" (record version): a \'trigger\' record carries one of "v": 1, "v": 2',
        ),
        (
            b'{"kind": "trigger", "v": 9}',
            "\"v\" (record version) is 9: this worker reads 'trigger'",
        ),
        (
            b'{"kind": "trigger", "v": 1, "workflow": "w"}',
            "invalid 'trigger' record: no \"trigger_key\" (a required field)",
        ),
    ],
)
async def test_bad_record_is_dead_lettered_and_the_worker_carries_on(
    settings, worker_factory, raw, reason
):
    worker = worker_factory()
    await worker.wait_ready()
    await produce(settings, "rflow.triggers", b"some-key", raw)

    async def stored_letter():
        conn = await storage.connect(settings)
        async with conn:
            rows = await dead_letters.recent(conn)
        return rows

    rows = await wait_until(stored_letter, timeout=30, what="the dead letter in Postgres")
    assert len(rows) == 1
    assert rows[0]["topic"] == settings.topic_prefix + "rflow.triggers"
    assert rows[0]["record_key"] == "some-key"
    assert reason in rows[0]["reason"]

    good = trigger("manual:sweep:after-bad")
    await send_trigger(settings, good)
    await table_entry(worker, good.trigger_key)


async def test_the_faust_cli_runs_the_same_app(settings, worker_factory):
    worker = worker_factory(command=WorkerProcess.FAUST)
    await worker.wait_ready()
    record = trigger("manual:sweep:via-faust")
    await send_trigger(settings, record)
    assert (await remembered(worker, record))["digest"] == digest_of(record)

    listing = subprocess.run(
        [sys.executable, "-m", "faust", "-A", "rflow.streams.app", "tables"],
        env={**os.environ, **settings.to_env()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    assert "triggers" in listing.stdout
    assert "keyed by <workflow>:<trigger key>" in listing.stdout


async def test_an_entry_the_read_model_refuses_is_dead_lettered_and_the_rest_projected(
    settings, worker_factory
):
    from rflow.codecs import RunJournal, encode
    from rflow.engine.effects import Journal
    from rflow.storage import runs

    worker = worker_factory()
    await worker.wait_ready()
    at = datetime(2026, 1, 2, tzinfo=UTC)
    good = Journal(run_id="r-good", workflow="sweep", event="run_started", status="running", at=at)
    bad = Journal(
        run_id="r-bad",
        workflow="sweep",
        event="step_started",
        path="a",
        status="running",
        at=at,
        data={"visit": 2**40},
    )
    for entry in (bad, good):
        await produce(
            settings, "rflow.events", entry.run_id.encode(), encode(RunJournal(entries=[entry]))
        )

    async def projected():
        conn = await storage.connect(settings)
        async with conn:
            return await runs.get_run(conn, "r-good")

    assert (await wait_until(projected, timeout=30, what="the good entry in the read model"))[
        "status"
    ] == "running"

    async def refused():
        conn = await storage.connect(settings)
        async with conn:
            return [r for r in await dead_letters.recent(conn) if r["record_key"] == "r-bad"]

    [letter] = await wait_until(refused, timeout=30, what="the refused entry in the dead letters")
    assert "the read model refused this entry" in letter["reason"]
