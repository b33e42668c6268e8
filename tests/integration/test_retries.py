"""Retrying a failed run on the real stack: what settled is never paid again."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from rflow import storage
from rflow.codecs import SendRequest, decode
from rflow.engine.keys import retry_run_id
from rflow.storage import runs
from tests.integration import chain
from tests.integration.harness import consumer_lag, produce, topic_messages, wait_until
from tests.integration.test_api import call
from tests.integration.test_operations import rflow
from tests.integration.test_runs import fire, settled_run
from tests.integration.test_sends import token_for, transfers_from, write_project

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PAYOUT = """
      - id: payout
        foreach: "${{ trigger.recipients }}"
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "transfer(address,uint256)"
          args: ["${{ item.address }}", "${{ item.amount }}"]
      - id: report
        command: { name: log, args: { message: "paid ${{ length(steps.payout.output) }}" } }
"""


async def failed_payout(settings, worker_factory, tmp_path, w3):
    """A payout of five 1000-unit transfers by a relayer holding 3000: the fourth fails
    (the token reverts in simulation), after three went out. Then the relayer is topped up."""
    relayer = await chain.funded_account(w3)
    token = await token_for(w3, relayer, amount=3000)
    project = write_project(tmp_path, token, PAYOUT)
    worker = worker_factory(project_path=project, env={"PAYOUT_KEY": relayer.key.hex()})
    await worker.wait_ready()
    recipients = [{"address": chain.Account.create().address, "amount": 1000} for _ in range(5)]
    rid = await fire(settings, project, "pay", "manual:pay:five", {"recipients": recipients})
    run = await settled_run(settings, rid, timeout=90)
    assert run["status"] == "failed", (run, worker.tail())
    step = next(s for s in run["steps"] if s["path"] == "payout[3]")
    assert step["error_kind"] == "simulation_failed", step
    assert len(await transfers_from(w3, token, relayer.address)) == 3
    await chain.transact(w3, "TestToken", token, "mint", relayer.address, 2000, account=relayer)
    return SimpleNamespace(
        rid=rid, recipients=recipients, token=token, relayer=relayer, project=project, worker=worker
    )


async def paid_once(w3, payout) -> None:
    """Every recipient was paid exactly once, on chain."""
    logs = await transfers_from(w3, payout.token, payout.relayer.address)
    paid = [("0x" + log["topics"][2][-40:]).lower() for log in logs]
    assert sorted(paid) == sorted(r["address"].lower() for r in payout.recipients), paid


async def test_a_retried_payout_pays_only_what_was_not_paid(settings, worker_factory, tmp_path, w3):
    payout = await failed_payout(settings, worker_factory, tmp_path, w3)
    rid, worker = payout.rid, payout.worker
    retried = rflow(settings, "runs", "retry", rid, "--json")
    assert retried.returncode == 0, retried.stderr
    answer = json.loads(retried.stdout)
    new = answer["retried_as"]
    assert (new, answer["from_step"]) == (retry_run_id(rid), "payout")
    assert answer["kept"] == ["payout[0]", "payout[1]", "payout[2]"]
    run = await settled_run(settings, new, timeout=90)
    assert run["status"] == "succeeded", (run, worker.tail())
    # Five transfers in all: the three of the failed run were not sent again.
    await paid_once(w3, payout)
    parent = next(s for s in run["steps"] if s["path"] == "payout")
    assert len({o["tx"]["hash"] for o in parent["output"]}) == 5
    kept = [s for s in run["steps"] if s["path"] in ("payout[0]", "payout[1]", "payout[2]")]
    assert [s["status"] for s in kept] == ["succeeded"] * 3
    # Linked both ways, in the CLI and the API.
    shown = rflow(settings, "runs", "show", new)
    assert f"retry of  {rid}" in shown.stdout, shown.stdout
    status, old = await call(worker, "GET", f"/api/runs/{rid}")
    assert (status, old["retried_as"], old["dead"]["retried_as"]) == (200, new, new)
    # Asking again starts nothing new.
    again = rflow(settings, "runs", "retry", rid)
    assert again.returncode == 0 and "already retried" in again.stdout, again
    # Asking for a retry from elsewhere names the run to retry instead, and starts nothing.
    elsewhere = rflow(settings, "runs", "retry", rid, "--from", "nosuch")
    assert elsewhere.returncode != 0 and f"retry {new}" in elsewhere.stderr, elsewhere
    await paid_once(w3, payout)


async def test_a_retry_survives_a_killed_worker_without_paying_twice(
    settings, worker_factory, tmp_path, w3
):
    payout = await failed_payout(settings, worker_factory, tmp_path, w3)
    rid, worker = payout.rid, payout.worker
    new = retry_run_id(rid)

    async def retry_sending() -> bool:
        # The retry's first send is stored: the worker is killed while it is out.
        conn = await storage.connect(settings)
        async with conn:
            cur = await conn.execute("SELECT count(*) FROM sends WHERE run_id = %s", (new,))
            return (await cur.fetchone())[0] > 0

    assert rflow(settings, "runs", "retry", rid).returncode == 0
    await wait_until(retry_sending, timeout=60, what="the retry's first send")
    worker.kill()
    successor = worker_factory(
        project_path=payout.project,
        env={"PAYOUT_KEY": payout.relayer.key.hex()},
        data_dir=settings.data_dir.parent / "successor",
    )
    await successor.wait_ready(timeout=90)
    run = await settled_run(settings, new, timeout=120)
    assert run["status"] == "succeeded", (run, successor.tail())
    await paid_once(w3, payout)


async def test_a_refused_send_delivered_again_is_answered_as_before(
    settings, worker_factory, tmp_path, w3
):
    """The fourth payout was refused (the balance was short). The relayer has been topped
    up since: the same send request delivered again (a crash before its offset was
    committed, say) must get the same answer, never a transfer for a settled step."""
    payout = await failed_payout(settings, worker_factory, tmp_path, w3)
    records = await topic_messages(settings, "rflow.sends")
    [refused] = [m for m in records if decode(m.value, SendRequest).execute.path == "payout[3]"]
    await produce(settings, "rflow.sends", refused.key, refused.value)
    conn = await storage.connect(settings)
    async with conn:

        async def answered_again():
            cur = await conn.execute(
                "SELECT count(*) FROM send_refusals WHERE send_key = %s",
                (decode(refused.value, SendRequest).execute.key,),
            )
            return (await cur.fetchone())[0] == 1

        await wait_until(answered_again, what="the refusal to be kept")
        # The worker takes the delivery (its group commits past it)...
        await wait_until(
            lambda: no_lag(settings), timeout=30, what="the delivery to be taken and committed"
        )
        cur = await conn.execute("SELECT count(*) FROM sends WHERE send_key LIKE '%%payout[3]%%'")
        assert (await cur.fetchone())[0] == 0
    # ...and sends nothing.
    assert len(await transfers_from(w3, payout.token, payout.relayer.address)) == 3


async def no_lag(settings) -> bool:
    return await consumer_lag(settings) == 0


async def test_from_an_earlier_step_needs_confirming_the_sends_it_repeats(
    settings, worker_factory, tmp_path, w3
):
    payout = await failed_payout(settings, worker_factory, tmp_path, w3)
    rid, worker = payout.rid, payout.worker
    refused = rflow(settings, "runs", "retry", rid, "--from", "payout")
    assert refused.returncode != 0
    assert "sends 3 transaction(s) again" in refused.stderr, refused.stderr
    for path in ("payout[0]", "payout[1]", "payout[2]"):
        assert path in refused.stderr
    status, api = await call(worker, "POST", f"/api/runs/{rid}/retry", {"from": "payout"})
    assert status == 409 and [r["path"] for r in api["resends"]] == [
        "payout[0]",
        "payout[1]",
        "payout[2]",
    ]
    late = rflow(settings, "runs", "retry", rid, "--from", "report")
    assert late.returncode != 0 and "comes after 'payout'" in late.stderr
    nope = rflow(settings, "runs", "retry", rid, "--from", "nope")
    assert nope.returncode != 0 and "has no step 'nope'" in nope.stderr
    # Nothing was started by any refusal.
    conn = await storage.connect(settings)
    async with conn:
        assert (await runs.get_run(conn, rid))["retried_as"] is None
        assert await runs.get_run(conn, retry_run_id(rid)) is None
    assert len(await transfers_from(w3, payout.token, payout.relayer.address)) == 3


MATRIX = """
workflows:
  fan:
    trigger: {{ manual: {{}} }}
    strategy: {{ matrix: {{ net: [a, b] }} }}
    steps:
      - id: call
        http_call: {{ url: "{url}/${{{{ matrix.net }}}}", method: POST, body: {{}} }}
      - id: check
        command: {{ name: assert, args: {{ that: "${{{{ matrix.net == 'a' or state.fixed == true }}}}", message: "b is broken" }} }}
"""


async def test_a_matrix_combination_is_retried_on_its_own(settings, worker_factory, tmp_path, sink):
    path = tmp_path / "project.yaml"
    path.write_text(MATRIX.format(url=sink.url))
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    await fire(settings, path, "fan", "manual:fan:1", {})
    from rflow.engine.keys import run_id

    a, b = (run_id("fan", "manual:fan:1", {"net": net}) for net in ("a", "b"))
    assert (await settled_run(settings, a))["status"] == "succeeded"
    assert (await settled_run(settings, b))["status"] == "failed"
    conn = await storage.connect(settings)
    async with conn:
        from rflow.storage import workflow_state

        await workflow_state.apply(
            conn, workflow="fan", op_key="fix", kind="state_set", action={"fixed": True}
        )
    retried = rflow(settings, "runs", "retry", b, "--json")
    assert retried.returncode == 0, retried.stderr
    run = await settled_run(settings, json.loads(retried.stdout)["retried_as"])
    assert run["status"] == "succeeded", run
    assert run["matrix"] == {"net": "b"}
    # The http_call of b had settled: it was not called again; a was never touched.
    assert sink.keys() == {
        "fan:manual:fan:1:matrix:net=a:call": 1,
        "fan:manual:fan:1:matrix:net=b:call": 1,
    }
