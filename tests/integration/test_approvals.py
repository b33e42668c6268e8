"""Approvals on a real worker: principals and approvers, choices, the inbox, escalation,
and a rejection that ends a run without counting as a fault."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

import pytest

from rflow import storage
from rflow.storage import circuits, controls, waits
from tests.integration.harness import wait_until
from tests.integration.test_api import call
from tests.integration.test_operations import parked
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

TOKENS = {"ALICE_TOKEN": "alice-token-1", "BOB_TOKEN": "bob-token-2"}

PROJECT = """
principals:
  alice: {{ token_env: ALICE_TOKEN, role: approver }}
  bob: {{ token_env: BOB_TOKEN, role: approver }}
channels:
  ops: {{ type: log }}
  oncall: {{ type: webhook, url: "{url}/oncall" }}
workflows:
  payout:
    trigger: {{ manual: {{}} }}
    steps:
      - id: ok
        wait_for:
          approval:
            prompt: "Pay ${{{{ trigger.amount }}}} to ${{{{ trigger.to }}}}?"
            approvers: [alice]
            context_fields: {{ amount: "${{{{ trigger.amount }}}}", to: "${{{{ trigger.to }}}}" }}
          timeout: 1h
      - id: pay
        notify: {{ channel: ops, message: "approved by ${{{{ steps.ok.output.by }}}}" }}
  route:
    trigger: {{ manual: {{}} }}
    steps:
      - id: pick
        wait_for:
          approval:
            type: multi_choice
            prompt: "Which route?"
            choices: [{{ label: Fast, value: fast, color: red }}, {{ label: Cheap, value: cheap }}]
            context_fields: [trigger.amount]
            priority: high
          timeout: 2h
  urgent-soon:
    trigger: {{ manual: {{}} }}
    steps:
      - id: ok
        wait_for: {{ approval: {{ prompt: "soon", priority: urgent, approvers: [bob] }}, timeout: 30m }}
  urgent-later:
    trigger: {{ manual: {{}} }}
    steps:
      - id: ok
        wait_for: {{ approval: {{ prompt: "later", priority: urgent }}, timeout: 3h }}
  whenever:
    trigger: {{ manual: {{}} }}
    steps:
      - id: ok
        wait_for: {{ approval: {{ prompt: "whenever", priority: low }}, timeout: 1m }}
  escalating:
    trigger: {{ manual: {{}} }}
    steps:
      - id: ok
        wait_for:
          approval: {{ prompt: "Sweep ${{{{ trigger.amount }}}}?", priority: urgent }}
          timeout: 2s
          on_timeout: {{ escalate: {{ channel: oncall, extend: 3s, then: reject }} }}
  guarded:
    trigger: {{ manual: {{}} }}
    circuit_breaker: {{ max_failures: 2, window: 1h, on_trip: [pause] }}
    steps:
      - id: check
        command: {{ name: assert, args: {{ that: "${{{{ trigger.ok }}}}", message: "not ok" }} }}
      - id: ok
        wait_for: {{ approval: {{ prompt: "go?" }}, timeout: 1h }}
    finally:
      - id: audit
        notify: {{ channel: ops, message: "ended ${{{{ run.status }}}}" }}
"""


@pytest.fixture
async def worker(worker_factory, tmp_path, sink):
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT.format(url=sink.url))
    worker = worker_factory(project_path=path, env=TOKENS)
    await worker.wait_ready()
    worker.project_path = path
    return worker


def rflow(settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rflow.cli", *args],
        env={**os.environ, **settings.to_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def open_wait(settings, rid: str) -> dict:
    conn = await storage.connect(settings)
    async with conn:
        [wait] = await waits.open_waits(conn, rid)
    return wait


def output_of(run: dict, path: str):
    return next(s for s in run["steps"] if s["path"] == path)["output"]


async def test_only_a_listed_approver_answers_and_is_recorded_as_its_principal(settings, worker):
    rid = await fire(settings, worker.project_path, "payout", "manual:payout:1", {"amount": 5})
    await parked(settings, rid)

    status, refused = await call(
        worker, "POST", f"/api/runs/{rid}/approve", {}, token="bob-token-2"
    )
    assert status == 403
    assert refused["error"].startswith("forbidden: principal 'bob' (approver) may not ")
    assert refused["error"].endswith("it is not one of its approvers (alice)")
    assert (refused["action"], refused["principal"]) == ("approvals.answer", "bob")
    # Naming the approver in the body is refused, whoever the token is.
    status, refused = await call(
        worker, "POST", f"/api/runs/{rid}/approve", {"by": "alice"}, token="bob-token-2"
    )
    assert (status, refused["error"]) == (
        400,
        "'by' is not accepted: an answer is recorded as the principal whose token made the "
        "request (bob)",
    )
    assert (await call(worker, "POST", f"/api/runs/{rid}/reject", {}))[0] == 403  # operator
    wait = await open_wait(settings, rid)
    assert (wait["resolved_at"], wait["resolution"]) == (None, None)  # nothing recorded

    status, answered = await call(
        worker, "POST", f"/api/runs/{rid}/approve", {"text": "fine"}, token="alice-token-1"
    )
    assert status == 200, answered
    assert answered["answer"] == {"decision": "approve", "by": "alice", "text": "fine"}
    run = await settled_run(settings, rid)
    assert run["status"] == "succeeded"
    assert output_of(run, "ok")["by"] == "alice"
    assert output_of(run, "pay") == {"channel": "ops", "delivered": True}


async def test_the_cli_acts_as_the_principal_of_its_token(settings, worker):
    rid = await fire(settings, worker.project_path, "payout", "manual:payout:cli", {"amount": 7})
    await parked(settings, rid)
    project = str(worker.project_path)

    as_bob = rflow(
        settings,
        "approvals",
        "approve",
        rid,
        "--project",
        project,
        RFLOW_CLI_TOKEN="bob-token-2",
        **TOKENS,
    )
    assert as_bob.returncode == 1
    assert "it is not one of its approvers (alice)" in as_bob.stderr
    assert (await open_wait(settings, rid))["resolved_at"] is None

    unknown = rflow(
        settings,
        "approvals",
        "approve",
        rid,
        "--project",
        project,
        RFLOW_CLI_TOKEN="not-a-token",
        **TOKENS,
    )
    assert unknown.returncode == 1 and "is not RFLOW_API_TOKEN" in unknown.stderr

    as_alice = rflow(
        settings,
        "runs",
        "approve",
        rid,
        RFLOW_PROJECT=project,
        RFLOW_CLI_TOKEN="alice-token-1",
        **TOKENS,
    )
    assert as_alice.returncode == 0, as_alice.stderr
    assert as_alice.stdout.strip() == f"approved as alice: run {rid} step ok"
    run = await settled_run(settings, rid)
    assert (run["status"], output_of(run, "ok")["by"]) == ("succeeded", "alice")


async def test_a_choice_outside_the_choices_is_refused(settings, worker):
    rid = await fire(settings, worker.project_path, "route", "manual:route:1", {"amount": 3})
    await parked(settings, rid)
    status, refused = await call(worker, "POST", f"/api/runs/{rid}/approve", {"choice": "Fast"})
    assert (status, refused["error"]) == (400, "'Fast' is not one of the choices: 'fast', 'cheap'")
    cli = rflow(settings, "approvals", "approve", rid, "--choice", "slow")
    assert cli.returncode == 1
    assert "'slow' is not one of the choices: 'fast', 'cheap'" in cli.stderr
    missing = rflow(settings, "approvals", "approve", rid)
    assert missing.returncode == 1 and "takes a choice" in missing.stderr
    assert (await open_wait(settings, rid))["resolved_at"] is None

    chosen = rflow(settings, "approvals", "approve", rid, "--choice", "cheap", "--json")
    assert chosen.returncode == 0, chosen.stderr
    assert json.loads(chosen.stdout)["answer"] == {
        "decision": "approve",
        "by": "operator",
        "choice": "cheap",
    }
    run = await settled_run(settings, rid)
    assert (run["status"], output_of(run, "pick")["choice"]) == ("succeeded", "cheap")


async def test_the_inbox_lists_pending_approvals_by_priority_then_deadline(settings, worker):
    path = worker.project_path
    fired = {
        "whenever": await fire(settings, path, "whenever", "manual:inbox:1", {}),
        "payout": await fire(
            settings, path, "payout", "manual:inbox:2", {"amount": 9, "to": "0xab"}
        ),
        "urgent-later": await fire(settings, path, "urgent-later", "manual:inbox:3", {}),
        "route": await fire(settings, path, "route", "manual:inbox:4", {"amount": 4}),
        "urgent-soon": await fire(settings, path, "urgent-soon", "manual:inbox:5", {}),
    }
    for rid in fired.values():
        await parked(settings, rid)

    status, inbox = await call(worker, "GET", "/api/approvals")
    assert status == 200
    found = inbox["approvals"]
    # urgent (nearest deadline first), high, normal, low.
    assert [a["workflow"] for a in found] == [
        "urgent-soon",
        "urgent-later",
        "route",
        "payout",
        "whenever",
    ]
    assert [a["run_id"] for a in found] == [fired[a["workflow"]] for a in found]
    payout = found[3]
    assert payout["prompt"] == "Pay 9 to 0xab?"
    assert payout["context"] == {"amount": 9, "to": "0xab"}
    assert list(payout["context"]) == ["amount", "to"]  # as declared
    assert (payout["approvers"], payout["priority"], payout["type"]) == (
        ["alice"],
        "normal",
        "approve_reject",
    )
    route = found[2]
    assert route["type"] == "choice"
    assert route["choices"] == [
        {"label": "Fast", "value": "fast", "color": "red"},
        {"label": "Cheap", "value": "cheap"},
    ]
    assert route["context"] == {"trigger.amount": 4}
    deadline = datetime.fromisoformat(route["deadline"])
    waiting = datetime.fromisoformat(route["waiting_since"])
    assert 7190 < (deadline - waiting).total_seconds() < 7210
    assert all(a["escalated_at"] is None for a in found)

    # Only those the principal may answer: bob is no approver of payout.
    _, mine = await call(worker, "GET", "/api/approvals?mine=true", token="bob-token-2")
    assert [a["workflow"] for a in mine["approvals"]] == [
        "urgent-soon",
        "urgent-later",
        "route",
        "whenever",
    ]
    _, one = await call(worker, "GET", "/api/approvals?workflow=route")
    assert [a["run_id"] for a in one["approvals"]] == [fired["route"]]

    listed = rflow(settings, "approvals", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == found
    text = rflow(settings, "approvals", "ls")
    lines = text.stdout.splitlines()
    assert lines[0].split() == [
        "PRIORITY",
        "DEADLINE",
        "RUN",
        "WORKFLOW",
        "STEP",
        "APPROVERS",
        "PROMPT",
    ]
    assert [line.split()[0] for line in lines[1:]] == ["urgent", "urgent", "high", "normal", "low"]
    shown = rflow(settings, "approvals", "show", fired["payout"])
    assert shown.returncode == 0, shown.stderr
    assert "prompt    Pay 9 to 0xab?" in shown.stdout
    assert 'context\n  amount: 9\n  to: "0xab"' in shown.stdout
    assert "approvers alice" in shown.stdout
    missing = rflow(settings, "approvals", "show", "rnope")
    assert missing.returncode == 1 and "run rnope has no pending approval" in missing.stderr

    async def gauged():
        text = await _metrics(worker)
        return all(
            f'rflow_approvals_pending{{priority="{priority}",workflow="{name}"}} 1.0' in text
            for name, priority in [("payout", "normal"), ("route", "high"), ("whenever", "low")]
        )

    await wait_until(gauged, what="the pending approvals in the metrics")


async def test_escalation_notifies_the_channel_and_extends_the_deadline_once(
    settings, worker, sink
):
    rid = await fire(settings, worker.project_path, "escalating", "manual:esc:1", {"amount": 12})
    [wait] = await parked(settings, rid)
    first_deadline = wait["timeout_at"]

    async def noticed():
        return [r for r in sink.requests if r.path == "/oncall"]

    [notice] = await wait_until(noticed, timeout=30, what="the escalation notice")
    assert notice.key.endswith(":ok:escalation")
    assert notice.body["severity"] == "critical"
    assert notice.body["run_id"] == rid and notice.body["workflow"] == "escalating"
    assert "Sweep 12?" in notice.body["message"]

    async def escalated():
        _, inbox = await call(worker, "GET", f"/api/approvals?run={rid}")
        found = inbox["approvals"]
        return found[0] if found and found[0]["escalated_at"] else None

    entry = await wait_until(escalated, what="the inbox to show the escalation")
    extended = datetime.fromisoformat(entry["deadline"])
    assert 2.9 < (extended - first_deadline).total_seconds() < 3.1

    # The second deadline applies escalate.then (reject): no second notice.
    run = await settled_run(settings, rid)
    assert run["status"] == "rejected"
    assert run["error_message"] == "rejected: no decision before the timeout"
    output = output_of(run, "ok")
    assert output["decision"] == "reject" and output["escalation"]["delivered"] is True
    assert len(await noticed()) == 1
    assert next(s for s in run["steps"] if s["path"] == "ok")["attempt"] == 2
    _, inbox = await call(worker, "GET", f"/api/approvals?run={rid}")
    assert inbox["approvals"] == []


async def test_a_rejection_ends_the_run_rejected_without_counting_as_a_failure(settings, worker):
    path = worker.project_path
    rejected = []
    for n in range(2):  # max_failures: 2 would trip on two failures
        rid = await fire(settings, path, "guarded", f"manual:guarded:{n}", {"ok": True})
        await parked(settings, rid)
        assert rflow(settings, "approvals", "reject", rid, "--text", "no").returncode == 0
        rejected.append(rid)
    for rid in rejected:
        run = await settled_run(settings, rid)
        assert run["status"] == "rejected"
        assert (run["error_kind"], run["error_message"]) == ("rejected", "rejected by operator")
        assert run["dead"] is None  # not dead-lettered
        steps = {s["path"]: s for s in run["steps"]}
        assert steps["ok"]["status"] == "rejected"
        assert steps["ok"]["output"] == {"decision": "reject", "by": "operator", "text": "no"}
        assert steps["audit"]["output"] == {"channel": "ops", "delivered": True}
        assert steps["audit"]["input"]["message"] == "ended rejected"

    async def circuit_of(counted: bool):
        conn = await storage.connect(settings)
        async with conn:
            found = (await circuits.circuits(conn)).get("guarded")
        return found if found is not None and (found.failures or not counted) else None

    # The breaker has seen a rejected run settle, and counted nothing.
    seen = await wait_until(lambda: circuit_of(False), what="the breaker to see the runs")
    assert (seen.state, seen.failures) == ("closed", ())

    # One real failure: it is dead-lettered and counted, alone.
    failed = await fire(settings, path, "guarded", "manual:guarded:fail", {"ok": False})
    assert (await settled_run(settings, failed))["dead"] is not None
    circuit = await wait_until(lambda: circuit_of(True), what="the failure to be counted")
    assert (circuit.state, len(circuit.failures)) == ("closed", 1)
    conn = await storage.connect(settings)
    async with conn:
        assert "guarded" not in await controls.paused(conn)

    listed = rflow(settings, "runs", "list", "-s", "rejected", "--json")
    assert sorted(r["run_id"] for r in json.loads(listed.stdout)) == sorted(rejected)
    status, body = await call(worker, "GET", "/api/runs?status=rejected&workflow=guarded")
    assert status == 200 and sorted(r["run_id"] for r in body["runs"]) == sorted(rejected)

    async def settled_metric():
        line = 'rflow_runs_settled_total{status="rejected",workflow="guarded"} 2.0'
        return line in await _metrics(worker)

    await wait_until(settled_metric, what="the rejected runs in the metrics")


async def _metrics(worker) -> str:
    import asyncio
    import urllib.request

    def fetch() -> str:
        request = urllib.request.Request(worker.url + "/metrics", headers=worker.auth)
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.read().decode()

    return await asyncio.to_thread(fetch)
