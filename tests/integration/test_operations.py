"""Approvals, cancellation and the runs CLI against a real worker."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from rflow import storage
from rflow.storage import waits
from tests.integration.harness import wait_until
from tests.integration.test_runs import fire, run_status, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
channels:
  ops: { type: log }
workflows:
  gated:
    trigger: { manual: {} }
    steps:
      - id: ok
        wait_for:
          approval: { prompt: "Pay ${{ trigger.amount }}?" }
          timeout: 1h
      - id: pay
        notify: { channel: ops, message: "approved by ${{ steps.ok.output.by }}" }
  sleepy:
    trigger: { manual: {} }
    steps:
      - id: nap
        delay: { duration: 1h }
      - id: never
        notify: { channel: ops, message: "woke" }
    finally:
      - id: cleanup
        notify: { channel: ops, message: "ended ${{ run.status }}" }
"""


def rflow(settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rflow.cli", *args],
        env={**os.environ, **settings.to_env()},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
async def worker(worker_factory, tmp_path):
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT)
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    worker.project_path = path
    return worker


async def parked(settings, rid: str):
    async def open_wait():
        conn = await storage.connect(settings)
        async with conn:
            return await waits.open_waits(conn, rid)

    return await wait_until(open_wait, timeout=30, what=f"run {rid} to park")


async def test_approve_resumes_the_run_once(settings, worker):
    rid = await fire(settings, worker.project_path, "gated", "manual:gated:1", {"amount": 5})
    [wait] = await parked(settings, rid)
    assert wait["spec"]["approval"]["prompt"] == "Pay 5?"
    result = rflow(settings, "runs", "approve", rid)
    assert result.returncode == 0, result.stderr
    run = await settled_run(settings, rid)
    assert run["status"] == "succeeded"
    # The CLI acts as the principal of its token: RFLOW_API_TOKEN's is operator.
    assert {s["path"]: s["output"] for s in run["steps"]}["ok"]["by"] == "operator"
    again = rflow(settings, "runs", "approve", rid)
    assert again.returncode == 1
    assert "has no open wait" in again.stderr


async def test_reject_ends_the_run_rejected(settings, worker):
    rid = await fire(settings, worker.project_path, "gated", "manual:gated:2", {"amount": 5})
    await parked(settings, rid)
    assert rflow(settings, "runs", "reject", rid).returncode == 0
    run = await settled_run(settings, rid)
    assert run["status"] == "rejected"
    assert run["error_message"] == "rejected by operator"


async def test_cancel_stops_a_parked_run_and_runs_finally(settings, worker):
    rid = await fire(settings, worker.project_path, "sleepy", "manual:sleepy:1", {})

    async def started():
        conn = await storage.connect(settings)
        async with conn:
            run = await storage.runs.get_run(conn, rid)
        return run and any(s["path"] == "nap" for s in run["steps"])

    await wait_until(started, timeout=30, what="the run to start sleeping")
    result = rflow(settings, "runs", "cancel", rid, "--reason", "not needed")
    assert result.returncode == 0, result.stderr
    run = await settled_run(settings, rid)
    assert run["status"] == "cancelled"
    steps = {s["path"]: s for s in run["steps"]}
    assert "never" not in steps
    assert steps["cleanup"]["status"] == "succeeded"


async def test_runs_list_and_show(settings, worker):
    rid = await fire(settings, worker.project_path, "gated", "manual:gated:3", {"amount": 1})
    await parked(settings, rid)
    rflow(settings, "runs", "approve", rid)
    await settled_run(settings, rid)
    listing = rflow(settings, "runs", "list", "--workflow", "gated", "--json")
    assert [r["run_id"] for r in json.loads(listing.stdout)] == [rid]
    columns = rflow(settings, "runs", "list", "--workflow", "gated").stdout.splitlines()
    assert "DURATION" in columns[0] and "SOURCE" in columns[0]
    assert rid in columns[1] and "manual" in columns[1]
    assert re.search(r"  (\d+ ms|\d+\.\d s|\d+ m \d\d s)(  |$)", columns[1]), columns[1]
    shown = rflow(settings, "runs", "show", rid)
    assert shown.returncode == 0
    assert "status    succeeded" in shown.stdout
    assert "ok" in shown.stdout and "pay" in shown.stdout
    assert "duration  " in shown.stdout and "(manual)" in shown.stdout
    missing = rflow(settings, "runs", "show", "r-nope")
    assert missing.returncode == 1 and "no run r-nope" in missing.stderr


async def test_a_webhook_answers_a_parked_wait(settings, worker_factory, tmp_path, monkeypatch):
    import asyncio
    import urllib.parse
    import urllib.request

    from rflow.ingress import sign

    monkeypatch.setenv("CONFIRM_SECRET", "s3cret")
    path = tmp_path / "project.yaml"
    path.write_text(
        """
channels:
  ops: { type: log }
workflows:
  confirm:
    trigger: { manual: {} }
    steps:
      - id: wait
        wait_for:
          webhook:
            path: "/hooks/confirm/${{ run.id }}"
            match: { status: ok }
            auth: { type: hmac, secret_env: CONFIRM_SECRET }
          timeout: 1h
      - id: done
        notify: { channel: ops, message: "confirmed by ${{ steps.wait.output.body.who }}" }
"""
    )
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    rid = await fire(settings, path, "confirm", "manual:confirm:1", {})
    await parked(settings, rid)
    # The wait is answered at its resume URL, which runs show gives; the path alone (what
    # anyone who knows the trigger could compute) is refused.
    [shown] = json.loads(rflow(settings, "runs", "show", rid, "--json").stdout)["webhook_waits"]
    resume = urllib.parse.urlsplit(shown["resume_url"]).path
    assert resume.startswith(f"/hooks/confirm/{rid}/") and shown["auth"] == "hmac"

    def post(body: bytes, signature: str | None, at: str = resume) -> tuple[int, dict]:
        request = urllib.request.Request(f"{worker.url}{at}", data=body, method="POST")
        request.add_header("Content-Type", "application/json")
        if signature:
            request.add_header("X-Hub-Signature-256", signature)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    good = b'{"status": "ok", "who": "carol"}'
    status, body = await asyncio.to_thread(
        post, good, sign("s3cret", good, "sha256"), f"/hooks/confirm/{rid}"
    )
    assert status == 401 and "the path alone is refused" in body["error"]
    status, body = await asyncio.to_thread(post, good, sign("wrong", good, "sha256"))
    assert (status, body["error"]) == (401, "signature does not match")
    other = b'{"status": "nope"}'
    status, body = await asyncio.to_thread(post, other, sign("s3cret", other, "sha256"))
    assert (status, body["accepted"]) == (202, False)
    status, body = await asyncio.to_thread(post, good, sign("s3cret", good, "sha256"))
    assert (status, body) == (202, {"accepted": True, "resumed": [rid]})
    run = await settled_run(settings, rid)
    assert run["status"] == "succeeded"
    assert {s["path"]: s["output"] for s in run["steps"]}["wait"]["body"] == {
        "status": "ok",
        "who": "carol",
    }
    status, body = await asyncio.to_thread(post, good, sign("s3cret", good, "sha256"))
    assert status == 401 and "no open wait has this URL's token" in body["error"]  # answered


async def test_halt_pauses_the_workflow_until_an_operator_resumes_it(
    settings, worker_factory, tmp_path
):
    path = tmp_path / "project.yaml"
    path.write_text(
        """
workflows:
  fragile:
    on_failure: halt
    trigger: { manual: {} }
    steps:
      - id: check
        command: { name: assert, args: { that: "${{ trigger.ok }}", message: "not ok" } }
"""
    )
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    env_settings = settings.model_copy(update={"project_path": path})
    failed = await fire(settings, path, "fragile", "manual:fragile:1", {"ok": False})
    assert (await settled_run(settings, failed))["status"] == "failed"

    listing = rflow(env_settings, "workflow", "ls", "--json")
    assert json.loads(listing.stdout) == [
        {
            "workflow": "fragile",
            "trigger": "manual",
            "state": f"paused on_failure run {failed} failed: not ok",
        }
    ]

    probes = iter(range(1000))

    async def skipped():
        # Workers read pauses every second: probe with fresh keys until one is refused.
        key = f"manual:fragile:probe{next(probes)}"
        await fire(settings, path, "fragile", key, {"ok": True})

        async def entry():
            status, body = await worker.get(f"/rflow/triggers/fragile:{key}/")
            return body if status == 200 else None

        body = await wait_until(entry, timeout=30, what=f"{key} at the gate")
        return body if "held" in body else None

    entry = await wait_until(skipped, timeout=30, what="the paused workflow to hold a firing")
    assert entry["held"].startswith("by on_failure")
    held = entry["runs"][0]
    run = await run_status(settings, held, "pending")
    assert run["pending_reason"] == "paused"

    assert rflow(env_settings, "workflow", "resume", "fragile").returncode == 0
    # What was held starts once the workflow is resumed.
    assert (await settled_run(settings, held))["status"] == "succeeded"

    async def admitted():
        key = f"manual:fragile:probe{next(probes)}"
        await fire(settings, path, "fragile", key, {"ok": True})

        async def entry():
            status, body = await worker.get(f"/rflow/triggers/fragile:{key}/")
            return body if status == 200 else None

        body = await wait_until(entry, timeout=30, what=f"{key} at the gate")
        return body if "held" not in body else None

    entry = await wait_until(admitted, timeout=30, what="a run admitted after the resume")
    assert (await settled_run(settings, entry["runs"][0]))["status"] == "succeeded"


async def test_workflow_pause_resume_and_retry_from_the_cli_with_json(settings, worker, sink):
    listed = rflow(settings, "workflow", "ls", "--project", str(worker.project_path), "--json")
    assert listed.returncode == 0, listed.stderr
    assert {w["workflow"]: w["state"] for w in json.loads(listed.stdout)} == {
        "gated": "active",
        "sleepy": "active",
    }
    paused = rflow(settings, "workflow", "pause", "gated", "--reason", "audit", "--json")
    assert json.loads(paused.stdout) == {
        "workflow": "gated",
        "paused": True,
        "reason": "audit",
        "firings": "held",
        "was_paused_by": None,
    }
    listed = rflow(settings, "workflow", "ls", "--project", str(worker.project_path), "--json")
    gated = next(w for w in json.loads(listed.stdout) if w["workflow"] == "gated")
    assert gated["state"] == "paused operator audit"
    resumed = rflow(settings, "workflow", "resume", "gated", "--json")
    assert json.loads(resumed.stdout) == {"workflow": "gated", "paused": False}

    # A run that did not fail is not retried; an unknown one is named.
    rid = await fire(settings, worker.project_path, "sleepy", "manual:sleepy:r", {})
    result = rflow(settings, "runs", "cancel", rid)
    assert result.returncode == 0, result.stderr
    await settled_run(settings, rid)
    refused = rflow(settings, "runs", "retry", rid)
    assert refused.returncode != 0 and "only a failed run can be retried" in refused.stderr
    missing = rflow(settings, "runs", "retry", "rnope", "--project", str(worker.project_path))
    assert missing.returncode != 0 and "no run rnope" in missing.stderr


def test_migrate_and_topics_apply_answer_in_json(settings):
    migrated = rflow(settings, "migrate", "--json")
    assert migrated.returncode == 0, migrated.stderr
    document = json.loads(migrated.stdout)
    assert document["schema"] == settings.database_schema and document["applied"] == []
    applied = rflow(settings, "topics", "apply", "--dry-run", "--json")
    assert applied.returncode == 0, applied.stderr
    found = json.loads(applied.stdout)
    assert found["dry_run"] and found["created"] == []
    assert settings.topic_prefix + "rflow.triggers" in found["unchanged"]


async def test_runs_show_live_reads_the_run_state_from_the_worker(settings, worker):
    rid = await fire(settings, worker.project_path, "gated", "manual:gated:live", {})
    await parked(settings, rid)
    shown = rflow(worker.settings, "runs", "show", rid, "--live", "--json")
    assert shown.returncode == 0, shown.stderr
    run = json.loads(shown.stdout)
    assert (run["live"]["workflow"], run["live"]["status"]) == ("gated", "waiting")
    assert run["live"]["steps"]["ok"]["status"] == "waiting"
    text = rflow(worker.settings, "runs", "show", rid, "--live")
    assert text.returncode == 0
    # The worker that owns the run's partition answered, and is named.
    owner = f"from worker {socket.gethostname()}:{worker.settings.web_port}, which owns partition"
    assert text.stdout.startswith(f"live state ({owner} "), text.stdout
    assert run["live_from"]["worker"] == f"{socket.gethostname()}:{worker.settings.web_port}"
