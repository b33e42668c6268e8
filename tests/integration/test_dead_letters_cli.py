"""`rflow dead-letters ls|show|replay` against a running worker.

A firing of a workflow that is not deployed yet is dead-lettered; replay refuses it
until the workflow is deployed, then produces it back once. Two replays racing produce
it once; a replay whose mark was lost (a crash between its produce and its commit)
produces it again, and the triggers gate still starts one run.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rflow import storage
from rflow.codecs import TriggerRecord, decode
from rflow.engine.keys import run_id
from rflow.settings import Settings
from rflow.storage import dead_letters, runs
from rflow.streams.producer import produce_trigger
from tests.integration.harness import consumer_lag, produce, topic_messages, wait_until
from tests.integration.test_runs import run_status

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

SWEEP = """
channels:
  ops: { type: log }
workflows:
  sweep:
    trigger: { manual: {} }
    steps:
      - id: note
        notify: { channel: ops, message: "sweeping" }
"""
LATE = """
  late:
    trigger: { manual: {} }
    steps:
      - id: note
        notify: { channel: ops, message: "late ${{ trigger.order }}" }
"""


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """``rflow ARGS`` in its own process, with the test's settings."""
    return subprocess.run(
        [sys.executable, "-m", "rflow.cli", *args],
        env={**os.environ, **settings.to_env()},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def letters(settings: Settings) -> list[dict[str, Any]]:
    conn = await storage.connect(settings)
    async with conn:
        return await dead_letters.recent(conn, limit=100)


async def the_letter(settings: Settings, reason: str) -> dict[str, Any]:
    async def found() -> dict[str, Any] | None:
        return next((r for r in await letters(settings) if reason in r["reason"]), None)

    return await wait_until(found, timeout=30, what=f"a dead letter saying {reason!r}")


async def runs_of(settings: Settings, workflow: str) -> list[dict[str, Any]]:
    conn = await storage.connect(settings)
    async with conn:
        return await runs.list_runs(conn, workflow=workflow)


async def firings_on_topic(settings: Settings, trigger_key: str) -> int:
    found = 0
    for message in await topic_messages(settings, "rflow.triggers"):
        record = decode(message.value)
        if isinstance(record, TriggerRecord) and record.trigger_key == trigger_key:
            found += 1
    return found


async def test_a_replayed_firing_starts_one_run_however_often_it_is_produced(
    settings, worker_factory, tmp_path: Path
):
    project = tmp_path / "project"
    project.mkdir()
    (project / "project.yaml").write_text(SWEEP)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()

    firing = TriggerRecord(
        workflow="late",
        trigger_key="order:4711",
        source="manual",
        payload={"order": 4711},
        received_at=datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC),
    )
    await produce_trigger(settings, firing)
    letter = await the_letter(settings, "late")
    ident = str(letter["id"])

    listed = await asyncio.to_thread(cli, settings, "dead-letters", "ls")
    assert listed.returncode == 0, listed.stderr
    full = settings.topic_prefix + "rflow.triggers"
    assert ident in listed.stdout and f" {full} " in listed.stdout
    assert "order:4711" in listed.stdout
    # The topic is named as the workers name it, and taken either way.
    for name in (full, "rflow.triggers"):
        only = await asyncio.to_thread(
            cli, settings, "dead-letters", "ls", "--topic", name, "--json"
        )
        assert only.returncode == 0, only.stderr
        assert [(r["id"], r["topic"]) for r in json.loads(only.stdout)] == [(letter["id"], full)]
    stranger = await asyncio.to_thread(cli, settings, "dead-letters", "ls", "--topic", "x.y")
    assert stranger.returncode == 1
    assert "topic 'x.y' is not one of the workers' topics under RFLOW_TOPIC_PREFIX=" in (
        stranger.stderr
    )

    # Not deployed yet: replaying would only dead-letter it again.
    shown = await asyncio.to_thread(cli, settings, "dead-letters", "show", ident)
    assert shown.returncode == 0, shown.stderr
    assert "workflow 'late' is not in the newest deployment" in shown.stdout
    assert '"trigger_key": "order:4711"' in shown.stdout
    refused = await asyncio.to_thread(cli, settings, "dead-letters", "replay", ident)
    assert refused.returncode == 1
    assert f"dead letter {ident} cannot be replayed: workflow 'late'" in refused.stderr
    assert await firings_on_topic(settings, "order:4711") == 1

    (project / "project.yaml").write_text(SWEEP + LATE)
    deployed = await asyncio.to_thread(cli, settings, "deploy", str(project))
    assert deployed.returncode == 0, deployed.stderr

    async def late_is_deployed() -> bool:
        shown = await asyncio.to_thread(cli, settings, "dead-letters", "show", ident, "--json")
        return json.loads(shown.stdout)["replayable"]

    await wait_until(late_is_deployed, timeout=30, what="late to be deployed")

    # Two replays at once: the row's lock lets one produce; the other is refused.
    first, second = await asyncio.gather(
        asyncio.to_thread(cli, settings, "dead-letters", "replay", ident),
        asyncio.to_thread(cli, settings, "dead-letters", "replay", ident),
    )
    outcomes = sorted([first, second], key=lambda done: done.returncode)
    assert [done.returncode for done in outcomes] == [0, 1], (first.stderr, second.stderr)
    rid = run_id("late", "order:4711")
    assert f"rflow runs show {rid}" in outcomes[0].stdout
    assert "already replayed at" in outcomes[1].stderr
    await run_status(settings, rid, "succeeded")

    # A replay that crashed after its produce, before its commit, left no mark: the
    # next one produces the firing a third time, and the gate admits none of it again.
    conn = await storage.connect(settings)
    async with conn:
        await conn.execute(
            "UPDATE dead_letters SET replayed_at = NULL, replayed_partition = NULL, "
            "replayed_offset = NULL WHERE id = %s",
            (letter["id"],),
        )
    again = await asyncio.to_thread(cli, settings, "dead-letters", "replay", ident)
    assert again.returncode == 0, again.stderr
    assert await firings_on_topic(settings, "order:4711") == 3

    async def caught_up() -> bool:
        return await consumer_lag(settings) == 0

    await wait_until(caught_up, timeout=60, what="the worker to take every record")
    assert [r["run_id"] for r in await runs_of(settings, "late")] == [rid]
    assert [r["id"] for r in await letters(settings)] == [letter["id"]]
    replayed = await asyncio.to_thread(cli, settings, "dead-letters", "ls", "--replayed")
    assert ident in replayed.stdout


async def test_what_cannot_be_replayed_is_refused_with_the_reason(
    settings, worker_factory, tmp_path
):
    project = tmp_path / "project.yaml"
    project.write_text(SWEEP)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    await produce(settings, "rflow.triggers", b"k", b"\xff\x00 not json")
    letter = await the_letter(settings, "not JSON")

    shown = await asyncio.to_thread(cli, settings, "dead-letters", "show", str(letter["id"]))
    assert shown.returncode == 0, shown.stderr
    assert "replay       no: the stored record is not the original bytes" in shown.stdout
    refused = await asyncio.to_thread(cli, settings, "dead-letters", "replay", str(letter["id"]))
    assert refused.returncode == 1
    assert "cannot be replayed: the stored record is not the original bytes" in refused.stderr

    missing = await asyncio.to_thread(cli, settings, "dead-letters", "replay", "999999")
    assert (missing.returncode, missing.stderr.strip()) == (
        1,
        "error: no dead letter 999999 (rflow dead-letters ls)",
    )
    unknown = await asyncio.to_thread(cli, settings, "dead-letters", "ls", "--topic", "nosuch")
    assert unknown.returncode == 1
    assert "topic 'nosuch' is not one of the workers' topics" in unknown.stderr
