"""Composition on the real stack, each scenario run from its example under examples/:
parallel (best-quote), race (approve-or-expire), sagas (bridge-payment), child runs
(invoice-run calling settle-invoice) and signals (release-gate)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from rflow import storage
from rflow.engine.children import trigger_key
from rflow.engine.keys import run_id
from rflow.storage import budgets, sends, waits
from tests.conftest import REPO
from tests.integration import chain
from tests.integration.browser import chromium, screenshot, sign_in
from tests.integration.harness import wait_until
from tests.integration.services import Service
from tests.integration.test_api import call
from tests.integration.test_operations import rflow
from tests.integration.test_runs import fire, run_status, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

EXAMPLES = REPO / "examples"

HEADER = """
networks:
  local: {{ chain_id: 31337, confirmations: 0 }}
relayers:
  dev: {{ key_env: DEV_KEY, networks: [local] }}
channels:
  audit-log: {{ type: webhook, url: "{url}/notify" }}
principals:
  treasury-ops: {{ token_env: TREASURY_OPS_TOKEN, role: approver }}
  treasury-lead: {{ token_env: TREASURY_LEAD_TOKEN, role: approver }}
budgets:
  demo-payouts:
    window: 1h
    max_native_value: 1 ether
    scope: {{ relayers: [dev], networks: [local] }}
"""


def project_of(tmp_path: Path, service: Service, *examples: str, **changes: str) -> Path:
    """A project folder: the test's declarations (the local chain, relayer ``dev``, the
    ``audit-log`` channel posting to ``service``) and the example files named, each
    with the text changes given (``"for: 1h": "for: 2s"``)."""
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    (folder / "project.yaml").write_text(HEADER.format(url=service.url))
    for name in examples:
        text = (EXAMPLES / name).read_text()
        for old, new in changes.items():
            assert old in text, f"{old!r} is not in {name}"
            text = text.replace(old, new)
        (folder / name).write_text(text)
    return folder


def steps_of(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {step["path"]: step for step in run["steps"]}


async def with_db(settings, work):
    conn = await storage.connect(settings)
    async with conn:
        return await work(conn)


# --- parallel ---------------------------------------------------------------------------


async def test_a_parallel_join_waits_for_a_branch_that_retried(settings, worker_factory, tmp_path):
    async with Service(
        scripts={"/a/quote": [(503, {"busy": True})]},
        answers={"/a/quote": (200, {"price": 101}), "/b/quote": (200, {"price": 99})},
    ) as venues:
        project = project_of(tmp_path, venues, "best-quote.yaml")
        worker = worker_factory(
            project_path=project,
            env={"QUOTE_A_URL": f"{venues.url}/a", "QUOTE_B_URL": f"{venues.url}/b"},
        )
        await worker.wait_ready()
        # Both venues are held until each has been asked: the branches start together
        # (one after the other, the second would never be asked).
        venues.hold("/a/quote")
        venues.hold("/b/quote")
        rid = await fire(settings, project, "best-quote", "manual:q1", {"amount": 1000})
        await venues.seen("/a/quote")
        await venues.seen("/b/quote")
        venues.release("/b/quote")
        venues.release("/a/quote")
        run = await settled_run(settings, rid, timeout=60)
        assert run["status"] == "succeeded", (run, worker.tail())
        steps = steps_of(run)
        assert (steps["venue_a"]["status"], steps["venue_a"]["attempt"]) == ("succeeded", 2)
        assert (steps["venue_b"]["status"], steps["venue_b"]["attempt"]) == ("succeeded", 1)
        assert len(venues.to("/a/quote")) == 2 and len(venues.to("/b/quote")) == 1
        # The join ended after the retried branch, with every branch's output.
        assert steps["quotes"]["settled_at"] >= steps["venue_a"]["settled_at"]
        assert steps["quotes"]["output"]["venue_a"]["json"] == {"price": 101}
        assert steps["pick"]["output"] == {"message": "a: 101, b: 99"}
        assert {steps[b]["parent"] for b in ("venue_a", "venue_b")} == {"quotes"}
        assert {steps[b]["role"] for b in ("venue_a", "venue_b")} == {"branch"}
        # runs show: the branches side by side, on one line.
        shown = rflow(settings, "runs", "show", rid).stdout
        assert "quotes (parallel): succeeded" in shown, shown
        assert any("venue_a" in line and "venue_b" in line for line in shown.splitlines())
        assert any("2 attempts" in line and "1 attempt" in line for line in shown.splitlines())


# --- race -------------------------------------------------------------------------------


async def race_run(settings, worker_factory, tmp_path, w3, service, deadline: str):
    relayer = await chain.funded_account(w3)
    project = project_of(
        tmp_path, service, "approve-or-expire.yaml", **{"for: 1h": f"for: {deadline}"}
    )
    worker = worker_factory(
        project_path=project,
        env={"DEV_KEY": relayer.key.hex(), "TREASURY_OPS_TOKEN": "ops-token"},
    )
    await worker.wait_ready()
    payee = chain.Account.create().address
    rid = await fire(
        settings,
        project,
        "approve-or-expire",
        f"manual:{payee}",
        {"to": payee, "value": "0.01 ether"},
    )
    await run_status(settings, rid, "waiting")
    return worker, rid, payee


async def open_timers(settings, rid: str) -> list[str]:
    async def work(conn):
        cur = await conn.execute("SELECT path FROM timers WHERE run_id = %s", (rid,))
        return [path for (path,) in await cur.fetchall()]

    return await with_db(settings, work)


async def test_a_race_won_by_the_approval_cancels_the_deadline(
    settings, worker_factory, tmp_path, w3
):
    async with Service() as service:
        worker, rid, payee = await race_run(settings, worker_factory, tmp_path, w3, service, "1h")
        # The deadline's delay and the approval's own default timeout.
        assert sorted(await open_timers(settings, rid)) == ["deadline", "human"]
        status, answer = await call(
            worker, "POST", f"/api/runs/{rid}/approve", {"step": "human"}, token="ops-token"
        )
        assert status == 200, answer
        run = await settled_run(settings, rid, timeout=60)
        assert run["status"] == "succeeded", (run, worker.tail())
        steps = steps_of(run)
        assert steps["answer"]["detail"] == {"winner": "human", "cancelled": ["deadline"]}
        assert steps["deadline"]["status"] == "cancelled"
        assert steps["deadline"]["error_message"] == "the race was won by human"
        assert steps["pay"]["status"] == "succeeded" and steps["expired"]["status"] == "skipped"
        assert await w3.eth.get_balance(payee) == 10**16
        assert await open_timers(settings, rid) == []
        shown = rflow(settings, "runs", "show", rid).stdout
        assert "answer (race): won by human" in shown, shown
        assert any("human (winner)" in line and "deadline" in line for line in shown.splitlines())


async def test_a_race_won_by_the_deadline_releases_the_approval(
    settings, worker_factory, tmp_path, w3
):
    async with Service() as service:
        worker, rid, payee = await race_run(settings, worker_factory, tmp_path, w3, service, "2s")
        run = await settled_run(settings, rid, timeout=60)
        assert run["status"] == "succeeded", (run, worker.tail())
        steps = steps_of(run)
        assert steps["answer"]["detail"] == {"winner": "deadline", "cancelled": ["human"]}
        assert steps["human"]["status"] == "cancelled"
        assert steps["pay"]["status"] == "skipped"
        [message] = [c.body for c in service.to("/notify")]
        assert "expired unanswered" in json.dumps(message)
        assert await w3.eth.get_balance(payee) == 0
        # The approval is gone from the inbox: an answer now is refused.
        assert await with_db(settings, lambda conn: waits.open_waits(conn, rid)) == []
        status, answer = await call(
            worker, "POST", f"/api/runs/{rid}/approve", {"step": "human"}, token="ops-token"
        )
        assert status in (404, 409), answer


# --- sagas --------------------------------------------------------------------------------

AMOUNT = 2 * 10**16  # 0.02 ether
FEE = 10**15  # 0.001 ether


async def saga_run(settings, worker_factory, tmp_path, w3, service: Service):
    """bridge-payment with a bridge that always answers 500: two sends (pay, fee), then
    the bridge fails for good."""
    service.answers["/bridge/transfer"] = (500, {"error": "bridge down"})
    relayer = await chain.funded_account(w3)
    project = project_of(tmp_path, service, "bridge-payment.yaml")
    env = {
        "DEV_KEY": relayer.key.hex(),
        "BRIDGE_URL": f"{service.url}/bridge",
        "FEES_URL": f"{service.url}/fees",
    }
    worker = worker_factory(project_path=project, env=env)
    await worker.wait_ready()
    people = {name: chain.Account.create().address for name in ("merchant", "customer", "fees")}
    payload = {
        "merchant": people["merchant"],
        "customer": people["customer"],
        "fee_collector": people["fees"],
        "amount": "0.02 ether",
    }
    rid = await fire(settings, project, "bridge-payment", f"manual:{people['customer']}", payload)
    return worker, rid, people, project, env


async def refunded_once(settings, w3, rid: str, people: dict[str, str]) -> None:
    """The customer got the refund exactly once, on chain and in the sends."""
    assert await w3.eth.get_balance(people["customer"]) == AMOUNT
    assert await w3.eth.get_balance(people["merchant"]) == AMOUNT
    assert await w3.eth.get_balance(people["fees"]) == FEE

    async def work(conn):
        cur = await conn.execute(
            "SELECT send_key, status FROM sends WHERE run_id = %s ORDER BY send_key", (rid,)
        )
        return await cur.fetchall()

    keys = {key.rsplit(":", 1)[1]: status for key, status in await with_db(settings, work)}
    assert keys == {"fee": "succeeded", "pay": "succeeded", "refund": "succeeded"}


async def test_a_saga_whose_third_step_fails_refunds_once_and_catches_the_failure(
    settings, worker_factory, tmp_path, w3
):
    async with Service() as service:
        worker, rid, people, _, _ = await saga_run(settings, worker_factory, tmp_path, w3, service)
        run = await settled_run(settings, rid, timeout=120)
        assert run["status"] == "succeeded", (run, worker.tail())  # caught
        steps = steps_of(run)
        assert steps["bridge"]["status"] == "failed" and steps["bridge"]["attempt"] == 2
        flow = steps["bridge_flow"]
        assert flow["status"] == "succeeded"
        assert flow["detail"]["compensated"] == ["fee", "pay"]  # newest first
        assert flow["detail"]["caught"] is True
        assert flow["error_kind"] == "data_unavailable"  # the failure it caught, as data
        assert (steps["reclaim_fee"]["role"], steps["reclaim_fee"]["parent"]) == (
            "compensate",
            "fee",
        )
        assert (steps["refund"]["role"], steps["refund"]["parent"]) == ("compensate", "pay")
        # Compensations ran in reverse order of completion: the fee's, then the payment's.
        assert steps["reclaim_fee"]["seq"] < steps["refund"]["seq"]
        [reclaim] = service.to("/fees/reclaim")
        assert reclaim.body["why"].startswith("HTTP 500 from ${BRIDGE_URL}")  # error, as data
        [told] = service.to("/notify")
        assert "customer refunded" in json.dumps(told.body)
        await refunded_once(settings, w3, rid, people)
        # The budget shows what went out: the payment and the fee, and the refund.
        charges = await with_db(settings, lambda conn: budgets.run_charges(conn, rid))
        by_step = {c["send_key"].rsplit(":", 1)[1]: (c["amount"], c["status"]) for c in charges}
        assert by_step == {
            "pay": (AMOUNT, "spent"),
            "fee": (FEE, "spent"),
            "refund": (AMOUNT, "spent"),
        }


async def test_a_worker_killed_in_a_compensation_finishes_it_once(
    settings, worker_factory, tmp_path, w3
):
    async with Service() as service:
        service.hold("/fees/reclaim")
        worker, rid, people, project, env = await saga_run(
            settings, worker_factory, tmp_path, w3, service
        )
        # The compensations are under way (the fee's is out): the worker dies.
        await service.seen("/fees/reclaim")
        worker.kill()
        successor = worker_factory(
            project_path=project, env=env, data_dir=settings.data_dir.parent / "successor"
        )
        await successor.wait_ready(timeout=90)
        await service.seen("/fees/reclaim", 2, timeout=90)  # asked again, same key
        service.release("/fees/reclaim")
        run = await settled_run(settings, rid, timeout=120)
        assert run["status"] == "succeeded", (run, successor.tail())
        keys = {call.key for call in service.to("/fees/reclaim")}
        assert len(keys) == 1 and None not in keys  # one compensation, one idempotency key
        await refunded_once(settings, w3, rid, people)
        steps = steps_of(run)
        assert steps["bridge_flow"]["detail"]["compensated"] == ["fee", "pay"]


# --- child runs ---------------------------------------------------------------------------


async def invoice_worker(settings, worker_factory, tmp_path, service: Service):
    project = project_of(tmp_path, service, "invoice-run.yaml", "settle-invoice.yaml")
    worker = worker_factory(project_path=project, env={"BILLING_URL": f"{service.url}/billing"})
    await worker.wait_ready()
    return worker, project


async def test_a_child_that_fails_is_caught_by_its_parent(settings, worker_factory, tmp_path):
    async with Service(
        answers={"/billing/settle/inv-1": (422, {"error": "no such invoice"})}
    ) as svc:
        worker, project = await invoice_worker(settings, worker_factory, tmp_path, svc)
        rid = await fire(
            settings, project, "invoice-run", "manual:inv-1", {"invoice": "inv-1", "amount": 100}
        )
        parent = await settled_run(settings, rid, timeout=90)
        assert parent["status"] == "succeeded", (parent, worker.tail())
        key = trigger_key(rid, "settle")
        child_id = run_id("settle-invoice", key)
        assert key == f"{rid}/settle"
        child = await settled_run(settings, child_id, timeout=30)
        # The child: its own run, its own pinned version, linked to its parent's step.
        assert (child["status"], child["trigger_key"], child["source"]) == (
            "failed",
            key,
            "workflow",
        )
        assert (child["parent_run_id"], child["parent_step"]) == (rid, "settle")
        assert child["version"] != parent["version"]
        # The parent: its step failed with the child's failure, which catch handled.
        steps = steps_of(parent)
        assert steps["settle"]["status"] == "failed"
        assert steps["settle"]["error_kind"] == "assert_failed"
        assert child_id in steps["settle"]["error_message"]
        assert steps["settle"]["detail"]["child_run"] == child_id
        assert parent["children"][0]["run_id"] == child_id
        assert steps["attempt"]["detail"]["caught"] is True
        assert steps["receipt"]["output"] == {"message": "receipt none"}
        [told] = svc.to("/notify")
        assert "invoice inv-1 not settled" in json.dumps(told.body)
        # runs show draws the link both ways.
        shown = rflow(settings, "runs", "show", rid)
        assert f"child run {child_id}" in shown.stdout, shown.stdout
        shown = rflow(settings, "runs", "show", child_id)
        assert f"called by {rid} at step settle" in shown.stdout, shown.stdout


async def test_a_child_that_succeeds_gives_its_outputs_and_cancelling_the_parent_cancels_it(
    settings, worker_factory, tmp_path
):
    async with Service(answers={"/billing/settle/inv-2": (200, {"receipt": "R-2"})}) as svc:
        worker, project = await invoice_worker(settings, worker_factory, tmp_path, svc)
        rid = await fire(
            settings, project, "invoice-run", "manual:inv-2", {"invoice": "inv-2", "amount": 5}
        )
        parent = await settled_run(settings, rid, timeout=90)
        assert parent["status"] == "succeeded", (parent, worker.tail())
        assert steps_of(parent)["settle"]["output"] == {"receipt": "R-2"}
        assert steps_of(parent)["receipt"]["output"] == {"message": "receipt R-2"}
        # A parent cancelled while its child runs: the child is cancelled too.
        svc.hold("/billing/settle/inv-3")
        rid = await fire(
            settings, project, "invoice-run", "manual:inv-3", {"invoice": "inv-3", "amount": 5}
        )
        await svc.seen("/billing/settle/inv-3")
        await run_status(settings, rid, "waiting")
        status, answer = await call(worker, "POST", f"/api/runs/{rid}/cancel", {"reason": "wrong"})
        assert status == 200, answer
        parent = await settled_run(settings, rid, timeout=60)
        assert parent["status"] == "cancelled", parent
        child_id = run_id("settle-invoice", trigger_key(rid, "settle"))
        svc.release("/billing/settle/inv-3")
        child = await settled_run(settings, child_id, timeout=60)
        assert child["status"] == "cancelled", child
        assert f"parent run {rid}" in child["error_message"]


# --- signals ------------------------------------------------------------------------------


async def test_a_signal_before_during_and_after_its_wait(settings, worker_factory, tmp_path):
    async with Service() as svc:
        project = project_of(tmp_path, svc, "release-gate.yaml")
        worker = worker_factory(project_path=project, env={"RELEASE_URL": f"{svc.url}/release"})
        await worker.wait_ready()
        svc.hold("/release/prepare/1.2")
        rid = await fire(settings, project, "release-gate", "manual:1.2", {"version": "1.2"})
        await svc.seen("/release/prepare/1.2")
        await run_status(settings, rid, "running")
        # Before its wait: confirm is refused (nothing waits, nothing keeps it); go is kept.
        status, answer = await call(worker, "POST", f"/api/runs/{rid}/signals/confirm", {})
        assert status == 409, answer
        assert "no step waiting for signal 'confirm'" in answer["error"]
        early = rflow(settings, "runs", "signal", rid, "go", "--data", '{"by": "ana"}', "--json")
        assert early.returncode == 0, early.stderr
        assert json.loads(early.stdout) == {
            "run_id": rid,
            "signal": "go",
            "step": None,
            "kept": True,
        }
        svc.release("/release/prepare/1.2")
        # The wait for go took the kept signal at once; now confirm's wait is open.
        run = await run_status(settings, rid, "waiting")
        assert steps_of(run)["go"]["output"]["data"] == {"by": "ana"}
        assert steps_of(run)["go"]["output"]["by"] == "operator"
        # During: delivered to the waiting step (held at the announcement after it).
        svc.hold("/notify")
        status, answer = await call(
            worker, "POST", f"/api/runs/{rid}/signals/confirm", {"data": {"ok": True}}
        )
        assert (status, answer["step"], answer["kept"]) == (200, "confirm", False), answer
        await svc.seen("/notify")
        # After: the run goes on (it announces), no step waits: refused again.
        refused = rflow(settings, "runs", "signal", rid, "confirm")
        assert refused.returncode == 1 and "no step waiting" in refused.stderr, refused
        svc.release("/notify")
        run = await settled_run(settings, rid, timeout=60)
        assert run["status"] == "succeeded", (run, worker.tail())
        steps = steps_of(run)
        assert steps["confirm"]["output"]["data"] == {"ok": True}
        [told] = svc.to("/notify")
        assert "go from operator, confirmed" in json.dumps(told.body)  # who sent it
        # A run that is over takes no signal.
        status, answer = await call(worker, "POST", f"/api/runs/{rid}/signals/go", {})
        assert status == 409 and "already succeeded" in answer["error"], answer


# --- the console, in a real browser -------------------------------------------------------


@pytest.fixture
async def browser(tmp_path):
    async with chromium(tmp_path / "chromium") as context:
        yield context


async def test_the_console_draws_branches_winners_compensations_and_child_links(
    settings, worker_factory, tmp_path, w3, browser
):
    async with Service(
        answers={
            "/a/quote": (200, {"price": 101}),
            "/b/quote": (200, {"price": 99}),
            "/bridge/transfer": (500, {"error": "bridge down"}),
            "/billing/settle/inv-9": (422, {"error": "no such invoice"}),
        }
    ) as svc:
        relayer = await chain.funded_account(w3)
        project = project_of(
            tmp_path,
            svc,
            "best-quote.yaml",
            "approve-or-expire.yaml",
            "bridge-payment.yaml",
            "invoice-run.yaml",
            "settle-invoice.yaml",
        )
        text = (project / "approve-or-expire.yaml").read_text().replace("for: 1h", "for: 1s")
        (project / "approve-or-expire.yaml").write_text(text)
        env = {
            "DEV_KEY": relayer.key.hex(),
            "QUOTE_A_URL": f"{svc.url}/a",
            "QUOTE_B_URL": f"{svc.url}/b",
            "BRIDGE_URL": f"{svc.url}/bridge",
            "FEES_URL": f"{svc.url}/fees",
            "BILLING_URL": f"{svc.url}/billing",
        }
        worker = worker_factory(project_path=project, env=env)
        await worker.wait_ready()
        someone = chain.Account.create().address
        quote = await fire(settings, project, "best-quote", "manual:c1", {"amount": 1})
        race = await fire(
            settings, project, "approve-or-expire", "manual:c2", {"to": someone, "value": "1 wei"}
        )
        saga = await fire(
            settings,
            project,
            "bridge-payment",
            "manual:c3",
            {"merchant": someone, "customer": someone, "fee_collector": someone, "amount": "1 wei"},
        )
        parent = await fire(
            settings, project, "invoice-run", "manual:c4", {"invoice": "inv-9", "amount": 1}
        )
        child = run_id("settle-invoice", trigger_key(parent, "settle"))
        for rid in (quote, race, saga, parent, child):
            settled = await settled_run(settings, rid, timeout=120)
            assert settled["status"] in ("succeeded", "failed"), (settled, worker.tail())

        page = await browser.new_page()
        await sign_in(page, worker.url, settings.api_token.get_secret_value())
        # A parallel: its branches side by side, on one row.
        await page.goto(f"{worker.url}/console/runs/{quote}")
        branches = page.locator("#branches-quotes .branch")
        await expect(branches).to_have_count(2)
        first, second = await branches.nth(0).bounding_box(), await branches.nth(1).bounding_box()
        assert abs(first["y"] - second["y"]) < 1 and first["x"] + first["width"] <= second["x"]
        await expect(branches.nth(0)).to_contain_text("venue_a")
        await expect(branches.nth(1)).to_contain_text("venue_b")
        await screenshot(page, "30-run-parallel")
        # A race: the winner marked, the other cancelled and why.
        await page.goto(f"{worker.url}/console/runs/{race}")
        won = page.locator("#branches-answer .branch.won")
        await expect(won).to_contain_text("deadline")
        await expect(won.locator(".tag.winner")).to_have_text("winner")
        lost = page.locator("#branches-answer .branch", has_text="human")
        await expect(lost.locator(".status")).to_have_text("cancelled")
        await expect(lost).to_contain_text("the race was won by deadline")
        await screenshot(page, "31-run-race")
        # A saga: the compensations under the steps they undid, the failure caught.
        await page.goto(f"{worker.url}/console/runs/{saga}")
        refund = page.locator("#step-refund-1")
        await expect(refund.locator(".tag.compensation")).to_contain_text("compensates pay")
        await expect(refund.locator(".status").first).to_have_text("succeeded")
        await expect(page.locator("#step-reclaim_fee-1 .tag.compensation")).to_contain_text(
            "compensates fee"
        )
        await expect(page.locator("#step-bridge_flow-1 .step-caught")).to_contain_text(
            "compensated: fee, pay"
        )
        await screenshot(page, "32-run-saga")
        # A child run, linked both ways.
        await page.goto(f"{worker.url}/console/runs/{parent}")
        await expect(page.locator("#children")).to_contain_text(child)
        await page.locator("#step-settle-1 .child-link a").click()
        await expect(page.locator("h1")).to_contain_text(child)
        await expect(page.locator("#called-by")).to_contain_text(parent)
        await screenshot(page, "33-run-child")
        await page.locator("#called-by a").click()
        await expect(page.locator("h1")).to_contain_text(parent)


# --- withdrawn sends ----------------------------------------------------------------------


async def test_a_withdrawn_send_is_never_signed_nor_charged(settings, worker_factory, tmp_path, w3):
    """What a stopped branch's send meets at the relayer: withdrawn before the relayer
    took it, it is refused (cancelled) with nothing reserved, signed or broadcast."""
    async with Service() as service:
        relayer = await chain.funded_account(w3)
        project = project_of(tmp_path, service, "approve-or-expire.yaml")
        worker = worker_factory(
            project_path=project,
            env={"DEV_KEY": relayer.key.hex(), "TREASURY_OPS_TOKEN": "ops-token"},
        )
        await worker.wait_ready()
        payee = chain.Account.create().address
        key = f"manual:{payee}"
        withdrawn = await with_db(
            settings,
            lambda conn: sends.withdraw(
                conn,
                f"approve-or-expire:{key}:pay",
                1,
                {"kind": "cancelled", "message": "withdrawn before it was signed (test)"},
            ),
        )
        assert withdrawn is True
        rid = await fire(
            settings, project, "approve-or-expire", key, {"to": payee, "value": "1 wei"}
        )
        await run_status(settings, rid, "waiting")
        status, answer = await call(
            worker, "POST", f"/api/runs/{rid}/approve", {"step": "human"}, token="ops-token"
        )
        assert status == 200, answer
        run = await settled_run(settings, rid, timeout=60)
        pay = steps_of(run)["pay"]
        assert (pay["status"], pay["error_kind"]) == ("failed", "cancelled"), (run, worker.tail())
        assert "withdrawn before it was signed" in pay["error_message"]
        assert await with_db(settings, lambda conn: budgets.run_charges(conn, rid)) == []
        assert await with_db(settings, lambda conn: sends.open_of_run(conn, rid)) == []
        assert await w3.eth.get_transaction_count(relayer.address) == 0
        assert await w3.eth.get_balance(payee) == 0


async def test_a_withdrawal_waits_for_a_store_under_way_and_then_lets_the_send_go(settings):
    """The relayer stores a send under its key's lock: a withdrawal arriving meanwhile
    waits for the commit, then finds the send stored and withdraws nothing."""
    key = "w:k:pay"
    stored = sends.NewSend(
        send_key=key,
        purpose="step",
        run_id="r1",
        workflow="w",
        reply=None,
        network="local",
        relayer="dev",
        address="0x" + "11" * 20,
        nonce=0,
        to_address="0x" + "22" * 20,
        value=1,
        data=b"",
        gas_limit=21000,
        fee_cap=1,
        attempt=sends.Attempt("0x" + "33" * 32, 0, 1, 1, b"raw"),
    )
    relayer = await storage.connect(settings)
    other = await storage.connect(settings)
    async with relayer, other:
        async with relayer.transaction():
            await sends.lock_keys(relayer, [key])
            error = {"kind": "cancelled", "message": "lost the race"}
            withdrawal = asyncio.create_task(sends.withdraw(other, key, 1, error))

            async def waiting() -> bool:
                cur = await relayer.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                )
                return (await cur.fetchone())[0] >= 1

            await wait_until(waiting, what="the withdrawal to wait for the send's lock")
            assert not withdrawal.done()
            await sends.insert_many(relayer, [stored])
        assert await withdrawal is False  # it went out: the withdrawal changed nothing
        assert await sends.refusals(relayer, [(key, 1)]) == {}
        # Withdrawn first, the other way round: the relayer's store finds it refused.
        later = "w:k2:pay"
        assert await sends.withdraw(other, later, 1, error) is True
        assert await sends.refusals(relayer, [(later, 1)]) == {(later, 1): error}
