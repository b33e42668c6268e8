"""The worker's HTTP API against a real worker: token, runs, actions, workflows, budgets."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rflow import storage
from rflow.engine.keys import retry_run_id
from rflow.storage import workflow_state
from tests.integration.harness import wait_until
from tests.integration.test_operations import parked
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
channels:
  ops: { type: log }
budgets:
  daily:
    window: 24h
    max_native_value: 5 ether
workflows:
  gated:
    trigger: { manual: {} }
    steps:
      - id: ok
        wait_for:
          approval: { prompt: "go?" }
          timeout: 1h
      - id: done
        notify: { channel: ops, message: "approved by ${{ steps.ok.output.by }}" }
  sleepy:
    trigger: { manual: {} }
    steps:
      - id: nap
        delay: { duration: 1h }
  picky:
    trigger: { manual: {} }
    on_failure: dead_letter
    steps:
      - id: check
        command: { name: assert, args: { that: "${{ state.ok == true }}", message: "not ok" } }
"""

ROOT = Path(__file__).resolve().parents[2]


async def call(
    worker, method: str, path: str, body: Any = None, token: str | None = "default"
) -> tuple[int, Any]:
    """One request to the worker's API: (status, JSON answer)."""
    headers = {"Content-Type": "application/json"}
    if token == "default":
        headers.update(worker.auth)
    elif token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = (
        body if isinstance(body, bytes) else (None if body is None else json.dumps(body).encode())
    )

    def send() -> tuple[int, Any]:
        request = urllib.request.Request(worker.url + path, data=data, method=method)
        for name, value in headers.items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    return await asyncio.to_thread(send)


@pytest.fixture
async def worker(worker_factory, tmp_path):
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT)
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    worker.project_path = path
    return worker


async def test_every_route_but_health_and_webhooks_needs_the_token(worker):
    protected = [
        ("GET", "/api/runs"),
        ("GET", "/api/runs/r1"),
        ("POST", "/api/runs/r1/cancel"),
        ("POST", "/api/runs/r1/retry"),
        ("POST", "/api/runs/r1/approve"),
        ("POST", "/api/runs/r1/reject"),
        ("GET", "/api/approvals"),
        ("GET", "/api/workflows"),
        ("GET", "/api/sends"),
        ("POST", "/api/sends/s1/speedup"),
        ("POST", "/api/sends/s1/cancel"),
        ("POST", "/api/workflows/gated/pause"),
        ("POST", "/api/workflows/gated/resume"),
        ("POST", "/api/workflows/gated/runs"),
        ("GET", "/api/workflows/gated/state"),
        ("GET", "/api/budgets"),
        ("GET", "/api/openapi.json"),
        ("GET", "/metrics"),
        ("GET", "/rflow/triggers/x/"),
        ("GET", "/"),
    ]
    for method, path in protected:
        assert await call(worker, method, path, token=None) == (
            401,
            {"error": "missing bearer token (Authorization: Bearer ...)"},
        ), path
        assert await call(worker, method, path, token="nope") == (
            401,
            {"error": "wrong bearer token"},
        ), path
    status, body = await call(worker, "GET", "/healthz", token=None)
    assert (status, body["status"]) == (200, "ok")
    assert (await call(worker, "GET", "/rflow/ready/", token=None))[0] == 200
    # A webhook path answers for itself (no trigger there: 404, not 401).
    assert (await call(worker, "POST", "/hooks/nothing-here", {}, token=None))[0] == 404


async def test_runs_are_listed_shown_approved_and_cancelled(settings, worker):
    gated = await fire(settings, worker.project_path, "gated", "manual:gated:1", {})
    await parked(settings, gated)
    await wait_until(lambda: _status_is(worker, gated, "waiting"), what="gated in the read model")
    status, listed = await call(worker, "GET", "/api/runs?workflow=gated")
    assert status == 200
    assert [r["run_id"] for r in listed["runs"]] == [gated]
    status, shown = await call(worker, "GET", f"/api/runs/{gated}")
    assert status == 200
    assert shown["status"] == "waiting"
    assert shown["waiting_for"].startswith("an approval at step ok")
    assert shown["charges"] == []
    # This worker holds every partition: the run's live state is there too.
    assert (shown["live"]["workflow"], shown["live"]["status"]) == ("gated", "waiting")

    status, refused = await call(
        worker, "POST", f"/api/runs/{gated}/approve", {"by": "alice", "step": "ok"}
    )
    assert (status, refused["error"]) == (
        400,
        "'by' is not accepted: an answer is recorded as the principal whose token made the "
        "request (operator)",
    )
    status, answered = await call(worker, "POST", f"/api/runs/{gated}/approve", {"step": "ok"})
    assert (status, answered["step"]) == (200, "ok")
    run = await settled_run(settings, gated)
    assert run["status"] == "succeeded"
    assert next(s for s in run["steps"] if s["path"] == "ok")["output"]["by"] == "operator"
    # The answer is given once.
    status, again = await call(worker, "POST", f"/api/runs/{gated}/approve", {})
    assert (status, again["error"]) == (404, f"run {gated} has no open wait")

    sleepy = await fire(settings, worker.project_path, "sleepy", "manual:sleepy:1", {})
    await wait_until(lambda: _status_is(worker, sleepy, "waiting"), what="sleepy to start")
    status, cancelled = await call(worker, "POST", f"/api/runs/{sleepy}/cancel", {"reason": "no"})
    assert (status, cancelled) == (
        200,
        {"run_id": sleepy, "cancel_requested": "cancelled by operator: no", "pending_sends": []},
    )
    assert (await settled_run(settings, sleepy))["status"] == "cancelled"
    status, late = await call(worker, "POST", f"/api/runs/{sleepy}/cancel")
    assert (status, late["error"]) == (409, f"run {sleepy} is already cancelled")


async def _status_is(worker, rid: str, status: str) -> bool:
    code, run = await call(worker, "GET", f"/api/runs/{rid}")
    return code == 200 and run.get("status") == status


async def test_a_dead_lettered_run_is_retried_once_as_a_linked_run(settings, worker):
    dead = await fire(settings, worker.project_path, "picky", "manual:picky:1", {})
    assert (await settled_run(settings, dead))["status"] == "failed"
    status, refused = await call(worker, "POST", "/api/runs/nope/retry")
    assert (status, refused["error"]) == (404, "no run nope")

    # What the run needed is put right; the retry then succeeds.
    conn = await storage.connect(settings)
    async with conn:
        await workflow_state.apply(
            conn, workflow="picky", op_key="fix", kind="state_set", action={"ok": True}
        )
    status, retried = await call(worker, "POST", f"/api/runs/{dead}/retry")
    assert status == 200, retried
    new = retried["retried_as"]
    assert (new, retried["from_step"], retried["already"]) == (retry_run_id(dead), "check", False)
    retried_run = await settled_run(settings, new)
    assert retried_run["status"] == "succeeded", retried_run
    assert retried_run["retry_of"] == dead
    # Retrying again names the same run and starts nothing.
    status, again = await call(worker, "POST", f"/api/runs/{dead}/retry")
    assert (status, again["retried_as"], again["already"]) == (200, new, True)
    status, shown = await call(worker, "GET", f"/api/runs/{dead}")
    assert (shown["dead"]["retried_as"], shown["retried_as"]) == (new, new)
    # A run that did not fail is not retried.
    status, refused = await call(worker, "POST", f"/api/runs/{new}/retry")
    assert status == 409 and "only a failed run can be retried" in refused["error"]


async def test_workflows_are_paused_and_resumed(worker):
    status, listed = await call(worker, "GET", "/api/workflows")
    assert status == 200
    assert {w["workflow"]: w["paused"] for w in listed["workflows"]} == {
        "gated": False,
        "sleepy": False,
        "picky": False,
    }
    assert all(w["version"] for w in listed["workflows"])
    assert await call(worker, "POST", "/api/workflows/gated/pause", {"reason": "audit"}) == (
        200,
        {"workflow": "gated", "paused": True},
    )
    _, listed = await call(worker, "GET", "/api/workflows")
    gated = next(w for w in listed["workflows"] if w["workflow"] == "gated")
    assert (gated["paused"], gated["paused_by"], gated["reason"]) == (True, "operator", "audit")
    assert (await call(worker, "POST", "/api/workflows/gated/resume"))[0] == 200
    _, listed = await call(worker, "GET", "/api/workflows")
    assert not next(w for w in listed["workflows"] if w["workflow"] == "gated")["paused"]
    status, missing = await call(worker, "POST", "/api/workflows/nope/pause")
    assert (status, missing["error"]) == (404, "no workflow 'nope' in this project")


async def test_budgets_and_bad_requests_answer_with_reasons(worker):
    status, listed = await call(worker, "GET", "/api/budgets")
    assert status == 200
    assert listed["budgets"] == [
        {
            "budget": "daily",
            "asset": "native",
            "cap": 5 * 10**18,
            "consumed": 0,
            "reserved": 0,
            "remaining": 5 * 10**18,
            "window": "24h",
        }
    ]
    assert await call(worker, "GET", "/api/runs?status=bogus") == (
        400,
        {
            "error": "unknown status 'bogus': one of cancelled, failed, pending, rejected, "
            "running, skipped, succeeded, waiting"
        },
    )
    assert await call(worker, "GET", "/api/runs?limit=x") == (
        400,
        {"error": "limit must be an integer"},
    )
    assert await call(worker, "GET", "/api/runs/nope") == (404, {"error": "no run nope"})
    status, refused = await call(worker, "POST", "/api/runs/nope/cancel", b"{not json")
    assert status == 400 and refused["error"].startswith("the body is not JSON")
    status, refused = await call(worker, "POST", "/api/runs/nope/cancel", [1])
    assert (status, refused["error"]) == (400, "the body must be a JSON object")


async def test_the_served_openapi_document_is_the_committed_one_and_names_every_route(worker):
    status, served = await call(worker, "GET", "/api/openapi.json")
    committed = json.loads((ROOT / "schemas" / "openapi.json").read_text())
    assert (status, served) == (200, committed)


def test_the_openapi_document_describes_every_route_of_the_worker(settings, tmp_path):
    """Every route but the console's pages (HTML for people, tested in test_console)."""
    from rflow import console
    from rflow.lang import load_project
    from rflow.streams.app import create_app

    path = tmp_path / "project.yaml"
    path.write_text(PROJECT)
    app = create_app(settings, load_project(path, {}))
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in app.web.web_app.router.routes()
        if route.method != "HEAD" and not console.owns(route.resource.canonical)
    }
    document = json.loads((ROOT / "schemas" / "openapi.json").read_text())
    described = {(method, path) for path, ops in document["paths"].items() for method in ops}
    assert served == described
    # Every route but the public ones names the action it needs, as the document says.
    from rflow.streams.api import PUBLIC, ROUTES

    named = {(method.lower(), path) for path, ops in ROUTES.items() for method in ops}
    public = {(m, p) for m, p in served if p in PUBLIC or p.startswith("/hooks/")}
    assert named == served - public
    documented = {
        (method, path): op.get("x-rflow-action")
        for path, ops in document["paths"].items()
        for method, op in ops.items()
    }
    assert {key: documented[key] for key in named} == {
        (method.lower(), path): action
        for path, ops in ROUTES.items()
        for method, action in ops.items()
    }
