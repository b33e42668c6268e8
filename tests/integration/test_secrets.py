"""Secrets stay secret: after runs that send, fail, wait for an approval and answer API
calls, the relayer key, the API token, a principal's token and the webhook secret appear
in no log, topic record, database row, CLI --json output or API answer."""

from __future__ import annotations

import asyncio
import json

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
  reviewer: {{ token_env: REVIEWER_TOKEN }}
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

    places = {
        "worker log": [worker.log_path.read_text(errors="replace")],
        "topics": [r.decode("utf-8", "replace") for r in await topic_records(settings)],
        "database": await database_rows(settings),
        "CLI and API": outputs,
    }
    # The scan sees what these places hold: the recipient's address is in each of them.
    for place in ("topics", "database", "CLI and API"):
        assert any(to.lower() in t.lower() for t in places[place]), place
    for secret in (key, api_token, REVIEWER_TOKEN, HOOK_SECRET):
        for place, texts in places.items():
            leaks = [t[:200] for t in texts if secret.lower() in t.lower()]
            assert not leaks, f"a secret appears in the {place}: {leaks[:3]}"
