"""Secrets stay secret: after runs that send, fail, wait for an approval and answer API
calls, the relayer key, the API token, a principal's token and the webhook secret appear
in no log, topic record, database row, CLI --json output or API answer; nor do the values
a workflow's steps fill in from the environment (``${VAR}``, ``${{ env.NAME }}``), which
reach only the effects' endpoints."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterable

import psycopg
import pytest

from rflow.engine.keys import run_id
from rflow.ingress import sign
from tests.integration import chain
from tests.integration.harness import topic_messages
from tests.integration.test_api import call
from tests.integration.test_operations import parked, rflow
from tests.integration.test_runs import settled_run
from tests.integration.test_sends import chain_resources, token_for
from tests.integration.test_webhooks import post

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

HOOK_SECRET = "hook-secret-4f1c9a77d2"
REVIEWER_TOKEN = "reviewer-token-8b2e61c0"

PROJECT = """
principals:
  reviewer: {{ token_env: REVIEWER_TOKEN, role: approver }}
budgets:
  daily: {{ window: 24h, max_token_value: {{ Token: "1000" }} }}
workflows:
  pay:
    trigger: {{ manual: {{ inputs: [to, amount] }} }}
    permissions: {{ relayers: [payout] }}
    budgets: [daily]
    steps:
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "transfer(address,uint256)"
          args: ["${{{{ inputs.to }}}}", "${{{{ inputs.amount }}}}"]
  hooked:
    trigger:
      webhook:
        path: /hooks/secret
        auth: {{ type: hmac, algorithm: sha256, secret_env: SECRET_HOOK }}
    steps:
      - id: note
        command: {{ name: log, args: {{ message: "${{{{ trigger.body.n }}}}" }} }}
  gated:
    trigger: {{ manual: {{}} }}
    steps:
      - id: ok
        wait_for: {{ approval: {{ prompt: "go?", approvers: [reviewer] }}, timeout: 1h }}
"""


async def topic_records(settings) -> list[bytes]:
    """Every record (key and value) on this test's topics."""
    return [(m.key or b"") + b"|" + (m.value or b"") for m in await topic_messages(settings)]


async def database_rows(settings) -> list[str]:
    """Every row of every table of this test's schema, as JSON text."""
    url = settings.database_url.get_secret_value()
    rows: list[str] = []
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (settings.database_schema,),
        )
        for (table,) in await cur.fetchall():
            query = f'SELECT row_to_json(t)::text FROM "{settings.database_schema}"."{table}" t'
            rows += [row for (row,) in await (await conn.execute(query)).fetchall()]
    return rows


async def test_no_secret_leaves_its_variable(settings, worker_factory, tmp_path, monkeypatch):
    w3 = chain.connect(settings.rpc_url("local"))
    try:
        relayer = await chain.funded_account(w3)
        token = await token_for(w3, relayer)
    finally:
        await w3.provider.disconnect()
    key = relayer.key.hex().removeprefix("0x")
    api_token = settings.api_token.get_secret_value()
    project = tmp_path / "project.yaml"
    project.write_text(chain_resources(token) + PROJECT.format())
    monkeypatch.setenv("SECRET_HOOK", HOOK_SECRET)
    env = {"PAYOUT_KEY": "0x" + key, "REVIEWER_TOKEN": REVIEWER_TOKEN}
    worker = worker_factory(project_path=project, env=env)
    await worker.wait_ready()

    to = chain.Account.create().address
    status, started = await call(
        worker, "POST", "/api/workflows/pay/runs", {"to": to, "amount": 10}
    )
    assert status == 202, started
    # Over the budget: the send fails before broadcast, with an error message.
    status, refused = await call(
        worker, "POST", "/api/workflows/pay/runs", {"to": to, "amount": 5000}
    )
    assert status == 202, refused
    paid = await settled_run(settings, run_id("pay", started["trigger_key"]), timeout=60)
    failed = await settled_run(settings, run_id("pay", refused["trigger_key"]), timeout=60)
    assert (paid["status"], failed["status"]) == ("succeeded", "failed")
    body = b'{"n": 1}'
    answer = await post(
        worker, "/hooks/secret", body, {"X-Hub-Signature-256": sign(HOOK_SECRET, body, "sha256")}
    )
    assert answer[0] == 202, answer
    bad = await post(worker, "/hooks/secret", body, {"X-Hub-Signature-256": "sha256=00"})
    assert bad[0] == 401
    status, gated = await call(worker, "POST", "/api/workflows/gated/runs", {})
    assert status == 202, gated
    gated_id = run_id("gated", gated["trigger_key"])
    await parked(settings, gated_id)
    pending = await asyncio.to_thread(rflow, worker.settings, "approvals", "ls", "--json")
    approved = await call(worker, "POST", f"/api/runs/{gated_id}/approve", {}, token=REVIEWER_TOKEN)
    assert approved[0] == 200, approved
    assert (await settled_run(settings, gated_id))["status"] == "succeeded"

    outputs = [
        json.dumps(await call(worker, "GET", f"/api/runs/{rid}"))
        for rid in (paid["run_id"], failed["run_id"], gated_id)
    ]
    outputs += [pending.stdout, pending.stderr, json.dumps(approved)]
    for path in ("/api/runs", "/api/workflows", "/api/budgets"):
        outputs.append(json.dumps(await call(worker, "GET", path)))
    for args in (
        ("runs", "list", "--json"),
        ("runs", "show", paid["run_id"], "--json"),
        ("runs", "show", failed["run_id"], "--json"),
        ("budgets", "ls", "--project", str(project), "--json"),
        ("spend", "--json"),
        ("doctor", str(project), "--json"),
    ):
        result = await asyncio.to_thread(rflow, worker.settings, *args)
        outputs += [result.stdout, result.stderr]

    places = await places_to_search(settings, worker, outputs)
    # The scan sees what these places hold: the recipient's address is in each of them.
    for place in ("topics", "database", "CLI and API"):
        assert any(to.lower() in t.lower() for t in places[place]), place
    assert_nowhere((key, api_token, REVIEWER_TOKEN, HOOK_SECRET), places)


async def places_to_search(settings, worker, outputs: list[str]) -> dict[str, list[str]]:
    """The texts a secret must not appear in: the worker's log, every record of this test's
    topics (the changelogs included), every row of its schema, and ``outputs``."""
    return {
        "worker log": [worker.log_path.read_text(errors="replace")],
        "topics": [r.decode("utf-8", "replace") for r in await topic_records(settings)],
        "database": await database_rows(settings),
        "CLI and API": outputs,
    }


def assert_nowhere(secrets: Iterable[str], places: dict[str, list[str]]) -> None:
    for secret in secrets:
        for place, texts in places.items():
            leaks = [t[:200] for t in texts if secret.lower() in t.lower()]
            assert not leaks, f"a secret appears in the {place}: {leaks[:3]}"


SECRET_HEADER = "hdr-5ecr3t-9b2e41"
SECRET_ENV = "env-5ecr3t-c07d13"
SECRET_CHANNEL = "chn-5ecr3t-55aa0f"
SECRET_X = "cmd-5ecr3t-e1f0a2"

STEPS = """
channels:
  alert: {{ type: webhook, url: "{sink}/alert/${{SECRET_CHANNEL}}?k=${{SECRET_CHANNEL}}" }}
commands:
  reveal:
    path: {python}
    args: ["{script}"]
    env: [SECRET_X]
workflows:
  leaky:
    env: [SECRET_ENV]
    trigger: {{ manual: {{ inputs: [note] }} }}
    steps:
      - id: call
        http_call:
          url: "{sink}/call"
          method: POST
          headers: {{ Authorization: "Bearer ${{SECRET_HEADER}}", X-Env: "${{{{ env.SECRET_ENV }}}}" }}
          body: {{ note: "${{{{ inputs.note }}}}", env: "${{{{ env.SECRET_ENV }}}}" }}
      - id: refused
        continue_on_error: true
        http_call: {{ url: "{sink}/refused/${{SECRET_HEADER}}", expect_status: 201 }}
      - id: tell
        notify: {{ channel: alert, message: "note ${{{{ inputs.note }}}}" }}
      - id: reveal
        command: {{ name: reveal, args: {{ note: "${{{{ inputs.note }}}}" }} }}
"""

REVEAL = """\
import json, os, sys
note = json.load(sys.stdin)["note"]
print(json.dumps({"seen": os.environ["SECRET_X"], "literal": note == "${" + "SECRET_X}"}))
"""


async def test_values_filled_in_by_steps_reach_only_their_endpoints(
    settings, worker_factory, tmp_path, sink, monkeypatch
):
    sink.echo_headers = True  # an endpoint that echoes the header it was sent
    script = tmp_path / "reveal.py"
    script.write_text(REVEAL)
    project = tmp_path / "project.yaml"
    project.write_text(STEPS.format(sink=sink.url, python=sys.executable, script=script))
    secrets = {
        "SECRET_HEADER": SECRET_HEADER,
        "SECRET_ENV": SECRET_ENV,
        "SECRET_CHANNEL": SECRET_CHANNEL,
        "SECRET_X": SECRET_X,
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)  # for the worker, and for the CLI's doctor below
    worker = worker_factory(project_path=project)
    await worker.wait_ready()

    # The input names a variable: as run data it must reach the endpoints as written.
    status, started = await call(
        worker, "POST", "/api/workflows/leaky/runs", {"note": "${SECRET_X}"}
    )
    assert status == 202, started
    run = await settled_run(settings, run_id("leaky", started["trigger_key"]), timeout=60)
    assert run["status"] == "succeeded", run

    # The endpoints got the values, and the run data literally.
    [called] = [r for r in sink.requests if r.path == "/call"]
    assert called.headers["Authorization"] == f"Bearer {SECRET_HEADER}"
    assert called.headers["X-Env"] == SECRET_ENV
    assert called.body == {"note": "${SECRET_X}", "env": SECRET_ENV}
    [alert] = [r for r in sink.requests if r.path.startswith("/alert/")]
    assert (alert.path, alert.query) == (f"/alert/{SECRET_CHANNEL}", f"k={SECRET_CHANNEL}")
    assert alert.body["message"] == "note ${SECRET_X}"

    # The journal shows placeholders where the values went, and scrubbed echoes.
    status, shown = await call(worker, "GET", f"/api/runs/{run['run_id']}")
    assert status == 200, shown
    steps = {s["path"]: s for s in shown["steps"]}
    assert steps["call"]["input"]["headers"] == {
        "Authorization": "Bearer ${SECRET_HEADER}",
        "X-Env": "${SECRET_ENV}",
    }
    assert steps["call"]["input"]["body"] == {"note": "$${SECRET_X}", "env": "${SECRET_ENV}"}
    echoed = steps["call"]["output"]["json"]
    assert echoed["headers"]["Authorization"] == "Bearer ${SECRET_HEADER}"
    assert echoed["echo"] == {"note": "${SECRET_X}", "env": "${SECRET_ENV}"}
    assert steps["refused"]["status"] == "failed"
    assert "/refused/${SECRET_HEADER}" in steps["refused"]["error_message"]
    assert steps["reveal"]["output"] == {"seen": "${SECRET_X}", "literal": True}

    outputs = [json.dumps(shown)]
    for args in (
        ("runs", "list", "--json"),
        ("runs", "show", run["run_id"], "--json"),
        ("doctor", str(project), "--json"),
    ):
        result = await asyncio.to_thread(rflow, worker.settings, *args)
        outputs += [result.stdout, result.stderr]
    places = await places_to_search(settings, worker, outputs)
    # The scan sees what these places hold: the placeholder is in each of them.
    for place in ("topics", "database", "CLI and API"):
        assert any("${SECRET_HEADER}" in t for t in places[place]), place
    assert_nowhere(secrets.values(), places)
