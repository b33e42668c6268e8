"""Several triggers on one workflow, on the real stack: a webhook, a second webhook, a
schedule and manual runs each start runs of their own, recorded with their source."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from rflow.engine.keys import run_id
from rflow.lang import load_project
from tests.integration.test_runs import settled_run
from tests.integration.test_schedules import scheduler
from tests.integration.test_webhooks import post

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
workflows:
  multi:
    triggers:
      - webhook: { path: /hooks/multi, idempotency_header: X-Delivery }
      - id: backup
        webhook: { path: /hooks/multi-backup, idempotency_header: X-Delivery }
      - schedule: { cron: "0 0 1 1 *" }
      - manual: { inputs: [note] }
    steps:
      - id: say
        command: { name: log, args: { message: "fired ${{ run.trigger_key }}" } }
"""


async def test_a_webhook_a_schedule_and_a_manual_run_each_recorded_with_its_source(
    settings, worker_factory, tmp_path
):
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT)
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    body = json.dumps({"order": 7}).encode()

    status, reply, _ = await post(worker, "/hooks/multi", body, {"X-Delivery": "d-1"})
    assert (status, reply["trigger_key"]) == (202, "webhook:multi:d-1:1"), reply
    # The same delivery id on the other webhook is a delivery of that one: its own keys.
    status, reply, _ = await post(worker, "/hooks/multi-backup", body, {"X-Delivery": "d-1"})
    assert (status, reply["trigger_key"]) == (202, "webhook@backup:multi:d-1:1"), reply
    status, reply, _ = await post(worker, "/hooks/multi", body, {"X-Delivery": "d-1"})
    assert (status, reply["duplicate"]) == (200, True)

    status, reply, _ = await post(
        worker, "/api/workflows/multi/runs", b'{"note": "by hand"}', {"Idempotency-Key": "m-1"}
    )
    assert (status, reply["trigger_key"]) == (202, "manual:multi:m-1"), reply

    # The schedule, fired by a scheduler whose clock crosses the new year of 2030 (the
    # worker's own, on the wall clock, is a year or more from its fire).
    async with scheduler(settings, load_project(path, {})) as clock_driven:
        produced = await clock_driven.tick(datetime(2029, 12, 31, 23, 59, 30, tzinfo=UTC))
        produced += await clock_driven.tick(datetime(2030, 1, 1, 0, 0, 5, tzinfo=UTC))
    scheduled = [record.trigger_key for record in produced]
    assert scheduled[-1] == "schedule:2030-01-01T00:00:00Z", scheduled

    expected = {
        "webhook:multi:d-1:1": "webhook",
        "webhook@backup:multi:d-1:1": "webhook",
        "manual:multi:m-1": "manual",
        **dict.fromkeys(scheduled, "schedule"),
    }
    for trigger_key, source in expected.items():
        run = await settled_run(settings, run_id("multi", trigger_key))
        assert (run["status"], run["source"], run["trigger_key"]) == (
            "succeeded",
            source,
            trigger_key,
        ), (run, worker.tail())
    manual = await settled_run(settings, run_id("multi", "manual:multi:m-1"))
    assert manual["trigger"] == {"note": "by hand"}

    # The API names every trigger, and the CLI's listing filters by source.
    from tests.integration.test_api import call

    status, listed = await call(worker, "GET", "/api/workflows")
    [multi] = listed["workflows"]
    assert multi["trigger"] == "webhook, schedule, manual"
    assert multi["triggers"] == [
        {"id": "webhook", "kind": "webhook"},
        {"id": "backup", "kind": "webhook"},
        {"id": "schedule", "kind": "schedule"},
        {"id": "manual", "kind": "manual"},
    ]
    status, webhook_runs = await call(worker, "GET", "/api/runs?workflow=multi&source=webhook")
    assert sorted(r["trigger_key"] for r in webhook_runs["runs"]) == [
        "webhook:multi:d-1:1",
        "webhook@backup:multi:d-1:1",
    ]
