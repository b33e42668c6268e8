"""The operator's console in a real browser (Debian's chromium, headless, via Playwright)
against a real worker, Kafka, Postgres and anvil: the sign-in in front of every page,
CSRF-protected forms, a run going from pending to succeeded, a failed run and why, an
approved payout moving its budget, a sped-up send. Every page is saved as a screenshot
under ``tests/artifacts/screenshots/``."""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest
from playwright.async_api import expect

from rflow import storage
from rflow.console import auth
from rflow.engine.keys import firing_runs, retry_run_id
from rflow.storage import controls, dead_letters, runs, sends
from tests.integration import chain
from tests.integration.browser import chromium, screenshot, sign_in
from tests.integration.harness import produce, wait_until
from tests.integration.test_runs import fire, run_row, settled_run
from tests.integration.test_sends import (
    BUDGET,
    budget_usage,
    chain_resources,
    pending_sends,
    private_node,
    token_for,
)

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

OFF_CHAIN = """
channels:
  ops: { type: log }
workflows:
  hello:
    trigger: { manual: {} }
    steps:
      - id: greet
        command: { name: log, args: { message: "hello ${{ trigger.name }}" } }
  checks:
    trigger: { manual: {} }
    steps:
      - id: check
        command:
          name: assert
          args: { that: "${{ trigger.amount < 100 }}", message: "the amount is over 100" }
"""

PAYOUTS = """
channels:
  ops: { type: log }
workflows:
  hello:
    trigger: { manual: {} }
    steps:
      - id: greet
        command: { name: log, args: { message: "hello ${{ trigger.name }}" } }
  checks:
    trigger: { manual: {} }
    on_failure: dead_letter
    steps:
      - id: check
        command:
          name: assert
          args: { that: "${{ trigger.amount < 100 }}", message: "the amount is over 100" }
  payout:
    trigger: { manual: {} }
    permissions: { relayers: [payout] }
    budgets: [daily]
    steps:
      - id: review
        wait_for:
          approval:
            prompt: "Pay ${{ trigger.amount }} Token to ${{ trigger.to }}?"
            context_fields: { amount: "${{ trigger.amount }}", to: "${{ trigger.to }}" }
            priority: high
          timeout: 1h
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "transfer(address,uint256)"
          args: ["${{ trigger.to }}", "${{ trigger.amount }}"]
"""

PAGES = [
    "/console/",
    "/console/runs",
    "/console/runs?status=failed",
    "/console/runs/r0000",
    "/console/approvals",
    "/console/workflows",
    "/console/workflows/hello",
    "/console/budgets",
    "/console/sends",
    "/console/dead-letters",
    "/console/backtests",
    "/console/backtests/1",
]
FORMS = [
    "/console/runs/r0000/retry",
    "/console/runs/r0000/cancel",
    "/console/runs/r0000/approve",
    "/console/runs/r0000/reject",
    "/console/workflows/hello/pause",
    "/console/workflows/hello/resume",
    "/console/sends/s0000/speedup",
    "/console/sends/s0000/cancel",
    "/console/dead-letters/1/replay",
]


def post(url: str, fields: dict[str, str], cookie: str | None = None) -> tuple[int, str]:
    """A form POST without a browser (no redirects followed): (status, body)."""
    request = urllib.request.Request(
        url, data=urllib.parse.urlencode(fields).encode(), method="POST"
    )
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    if cookie:
        request.add_header("Cookie", cookie)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def paused(settings, workflow: str) -> bool:
    conn = await storage.connect(settings)
    async with conn:
        return workflow in await controls.paused(conn)


@pytest.fixture
async def browser(tmp_path):
    async with chromium(tmp_path / "chromium") as context:
        yield context


async def test_every_page_is_behind_the_sign_in_and_a_form_needs_its_csrf_token(
    settings, worker_factory, tmp_path, browser
):
    project = tmp_path / "project.yaml"
    project.write_text(OFF_CHAIN)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    token = settings.api_token.get_secret_value()
    page = await browser.new_page()

    for path in PAGES:
        await page.goto(worker.url + path)
        await expect(page).to_have_url(re.compile(r"/console/sign-in\?next="), timeout=10_000)
        await expect(page.locator("h1")).to_have_text("Sign in to the rflow console")
    await screenshot(page, "01-sign-in")
    # A form without a session does nothing, whatever it carries.
    for path in FORMS:
        status, body = await asyncio.to_thread(post, worker.url + path, {"csrf": "x"})
        assert status == 401, (path, status)
        assert "not signed in" in body
    # The API's bearer check does not let a cookie in, nor the console a bearer header.
    status, _ = await asyncio.to_thread(post, worker.url + "/api/workflows/hello/pause", {})
    assert status == 401

    await page.fill("#token", "not-a-token")
    await page.click("button:has-text('Sign in')")
    await expect(page.locator(".flash.error")).to_contain_text("not the token of any principal")
    await sign_in(page, worker.url, token)
    [cookie] = [c for c in await browser.cookies() if c["name"] == auth.SESSION_COOKIE]
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/console/")
    assert "expires" not in cookie or cookie["expires"] == -1  # a session cookie

    # The pause form with its CSRF token removed, then with a forged one: refused, and
    # the workflow is not paused.
    for forged in (None, "0" * 64):
        await page.goto(f"{worker.url}/console/workflows")
        form = page.locator("form[action='/console/workflows/hello/pause']")
        if forged is None:
            await form.locator("input[name=csrf]").evaluate("input => input.remove()")
        else:
            await form.locator("input[name=csrf]").evaluate(f"i => i.value = '{forged}'")
        await form.locator("button").click()
        await expect(page.locator("h1")).to_have_text("403: not done")
        await expect(page.locator(".flash.error")).to_contain_text("CSRF")
        assert not await paused(settings, "hello")
    await screenshot(page, "02-csrf-refused")
    # The same form as served pauses it.
    await page.goto(f"{worker.url}/console/workflows")
    await page.locator("form[action='/console/workflows/hello/pause'] button").click()
    await expect(page.locator(".flash")).to_contain_text("Paused hello")
    assert await paused(settings, "hello")

    # Signed out, the pages are behind the sign-in again.
    await page.click("button:has-text('Sign out')")
    await expect(page).to_have_url(re.compile(r"/console/sign-in"))
    await page.goto(f"{worker.url}/console/runs")
    await expect(page).to_have_url(re.compile(r"/console/sign-in"))


async def test_an_operator_watches_runs_approves_a_payout_and_speeds_up_its_send(
    settings, worker_factory, tmp_path, browser
):
    async with contextlib.AsyncExitStack() as stack:
        url, w3 = await private_node(stack)
        relayer = await chain.funded_account(w3)
        token_address = await token_for(w3, relayer)
        project = tmp_path / "project.yaml"
        project.write_text(chain_resources(token_address) + BUDGET + PAYOUTS)
        worker = worker_factory(
            project_path=project,
            env={"PAYOUT_KEY": relayer.key.hex()},
            rpc_urls={"local": url},
            send_bump_after=600.0,  # no bump of its own: the operator speeds it up
        )
        await worker.wait_ready()
        base = worker.url
        page = await browser.new_page()
        await sign_in(page, base, settings.api_token.get_secret_value())

        # A failed run, and why it failed, found from the runs list.
        failed = await fire(settings, project, "checks", "manual:checks:1", {"amount": 150})
        await settled_run(settings, failed)
        await page.goto(f"{base}/console/runs")
        await page.select_option("select[name=status]", "failed")
        await page.click("button:has-text('Filter')")
        row = page.locator(f"tr[data-run='{failed}']")
        await expect(row).to_contain_text("assert_failed: the amount is over 100")
        await screenshot(page, "03-runs-failed")
        await row.locator("a").click()
        why = page.locator("#why")
        await expect(why).to_contain_text("assert_failed at step check")
        await expect(why).to_contain_text("the amount is over 100")
        await expect(why).to_contain_text("a check in the workflow was false")
        await screenshot(page, "04-run-failed")

        # A run held by a pause goes from pending to succeeded on a page left open.
        await page.goto(f"{base}/console/workflows")
        await page.locator("form[action='/console/workflows/hello/pause'] input[name=reason]").fill(
            "audit"
        )
        await page.locator("form[action='/console/workflows/hello/pause'] button").click()
        await expect(page.locator(".flash")).to_contain_text("Paused hello")
        held = await fire(settings, project, "hello", "manual:hello:1", {"name": "ada"})
        await page.goto(f"{base}/console/runs?workflow=hello")
        row = page.locator(f"tr[data-run='{held}']")
        await expect(row.locator(".status")).to_have_text("pending")
        await expect(row).to_contain_text("paused")
        await screenshot(page, "05-runs-pending")
        other = await browser.new_page()
        await other.goto(f"{base}/console/workflows")
        await screenshot(other, "06-workflows-paused")
        await other.locator("form[action='/console/workflows/hello/resume'] button").click()
        await expect(other.locator(".flash")).to_contain_text("Resumed hello")
        await other.close()
        await expect(row.locator(".status")).to_have_text("succeeded")  # no reload: live
        assert (await run_row(settings, held))["status"] == "succeeded"

        # The waiting payout, approved from the inbox; its transfer stays in the pool.
        await chain.rpc(w3, "evm_setAutomine", False)
        to = chain.Account.create().address
        payout = await fire(settings, project, "payout", "manual:payout:1", {"to": to, "amount": 7})
        await page.goto(f"{base}/console/budgets")
        token_cap = page.locator(".cap[data-budget=daily][data-asset=Token]")
        await expect(token_cap.locator(".consumed")).to_have_text("0 Token")
        await screenshot(page, "07-budgets-before")
        await page.goto(f"{base}/console/approvals")
        entry = page.locator(".approval", has_text=payout)
        await expect(entry.locator(".prompt")).to_have_text(f"Pay 7 Token to {to}?")
        await expect(entry).to_contain_text("amount")
        await screenshot(page, "08-approvals")
        await entry.locator("button:has-text('Approve')").click()
        await expect(page.locator(".flash")).to_contain_text(
            f"Approved step review of run {payout} as operator"
        )
        [send] = await wait_until(lambda: pending_sends(settings, 1), what="the payout's send")

        # The budget moved: 7 Token spent once the node took the transfer.
        async def spent() -> bool:
            row = (await budget_usage(settings, project))[("daily", "Token")]
            return row.consumed == 7

        await wait_until(spent, what="the payout to be charged")
        await page.goto(f"{base}/console/budgets")
        await expect(token_cap.locator(".consumed")).to_have_text("7 Token")
        await expect(token_cap.locator(".remaining")).to_have_text("999,993 Token")
        await expect(page.locator(".chart .u-wrap").first).to_be_visible()  # uPlot drew it
        await screenshot(page, "09-budgets-after")

        # Speed up the pending send from the sends page.
        await page.goto(f"{base}/console/sends")
        card = page.locator(f"article[data-send='{send.send_id}']")
        await expect(card).to_contain_text(f"nonce {send.nonce}")
        await expect(card).to_contain_text("1 transaction(s) signed")
        await screenshot(page, "10-sends")
        await card.locator("button:has-text('Speed up')").click()
        await expect(page.locator(".flash")).to_contain_text(f"Send {send.send_id} sped up")
        await expect(card).to_contain_text("2 transaction(s) signed")
        conn = await storage.connect(settings)
        async with conn:
            bumped = await sends.find(conn, send.send_key)
        assert bumped.latest.max_fee_per_gas > send.latest.max_fee_per_gas
        await screenshot(page, "11-sends-sped-up")

        # Mined: the payout succeeds with the sped-up transaction, charged once.
        await chain.rpc(w3, "evm_setAutomine", True)
        await chain.rpc(w3, "evm_mine")
        run = await settled_run(settings, payout)
        assert run["status"] == "succeeded"
        await page.goto(f"{base}/console/runs/{payout}")
        await expect(page.locator("h1 .status")).to_have_text("succeeded")
        mined = page.locator(f"#transactions tr:has(code[title='{bumped.tx_hash}'])")
        await expect(mined.locator("td").last).to_have_text("2")  # attempts: sped up once
        await expect(page.locator("#charges")).to_contain_text("7 Token")
        await screenshot(page, "12-run-payout")
        assert (await budget_usage(settings, project))[("daily", "Token")].consumed == 7

        # A second version of hello, and the difference between the two.
        project.write_text(project.read_text().replace("hello ${{", "hi there ${{"))
        deployed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "rflow.cli", "deploy", str(project)],
            env={**settings.to_env(), "PAYOUT_KEY": relayer.key.hex(), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert deployed.returncode == 0, deployed.stderr
        await page.goto(f"{base}/console/workflows/hello")
        changed = page.locator("table.diff tr.changed")
        await expect(changed.locator("td").nth(1)).to_contain_text("message: hello ${{")
        await expect(changed.locator("td").nth(3)).to_contain_text("message: hi there ${{")
        await screenshot(page, "13-workflow-diff")

        await page.goto(f"{base}/console/dead-letters")
        await expect(page.locator("#dead-runs")).to_contain_text(failed)
        await screenshot(page, "14-dead-letters")


GATED = """
  gated:
    trigger: { manual: {} }
    steps:
      - id: ok
        wait_for:
          approval: { prompt: "Go on with ${{ trigger.what }}?" }
          timeout: 1h
      - id: done
        command: { name: log, args: { message: "went on" } }
"""
LATER = """
  later:
    trigger: { manual: {} }
    steps:
      - id: said
        command: { name: log, args: { message: "late but here" } }
"""


async def dead_letter_of(settings, key: str) -> dict | None:
    conn = await storage.connect(settings)
    async with conn:
        rows = await dead_letters.recent(conn, limit=100)
    return next((row for row in rows if row["record_key"] == key), None)


async def test_an_operator_retries_rejects_cancels_and_replays_a_dead_letter(
    settings, worker_factory, tmp_path, browser
):
    project = tmp_path / "project.yaml"
    project.write_text(
        OFF_CHAIN.replace("  checks:", "  checks:\n    on_failure: dead_letter") + GATED
    )
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    base = worker.url
    page = await browser.new_page()
    await sign_in(page, base, settings.api_token.get_secret_value())

    # A dead-lettered run retried from the dead letters page, the two linked both ways.
    failed = await fire(settings, project, "checks", "manual:checks:1", {"amount": 150})
    await settled_run(settings, failed)
    await page.goto(f"{base}/console/dead-letters")
    await page.locator(f"#dead-runs tr:has-text('{failed}') button:has-text('Retry')").click()
    retry = retry_run_id(failed)
    await expect(page.locator(".flash")).to_contain_text(f"Retrying run {failed} as {retry}")
    await settled_run(settings, retry)
    await page.goto(f"{base}/console/runs/{failed}")
    await page.click(f"a:has-text('{retry}')")
    await expect(page.locator("h1")).to_contain_text(retry)
    await expect(page.locator("dl.facts")).to_contain_text(re.compile(rf"Retry of\s*{failed}"))
    await screenshot(page, "15-run-retry")

    # One approval rejected from the inbox with a reason, another run cancelled.
    rejected = await fire(settings, project, "gated", "manual:gated:1", {"what": "the audit"})
    cancelled = await fire(settings, project, "gated", "manual:gated:2", {"what": "the sweep"})
    for rid in (rejected, cancelled):
        await wait_until(
            lambda rid=rid: _has_status(settings, rid, "waiting"), what=f"{rid} to wait"
        )
    await page.goto(f"{base}/console/approvals")
    entry = page.locator(".approval", has_text=rejected)
    await expect(entry.locator(".prompt")).to_have_text("Go on with the audit?")
    await entry.locator("input[name=text]").fill("not this week")
    await entry.locator("button:has-text('Reject')").click()
    await expect(page.locator(".flash")).to_contain_text(f"Rejected step ok of run {rejected}")
    assert (await settled_run(settings, rejected))["status"] == "rejected"
    await page.goto(f"{base}/console/runs/{cancelled}")
    await page.fill("input[name=reason]", "not needed")
    await page.click("button:has-text('Cancel this run')")
    await expect(page.locator(".flash")).to_contain_text(f"Asked run {cancelled} to stop")
    assert (await settled_run(settings, cancelled))["status"] == "cancelled"
    await page.goto(f"{base}/console/runs/{cancelled}")
    await expect(page.locator("h1 .status")).to_have_text("cancelled")

    # Records: an unreadable one is not replayed (and says why); a firing of a workflow
    # the worker did not have yet is replayed once it is deployed, and runs.
    await produce(settings, "rflow.triggers", b"garbage", b"not json")
    later_project = tmp_path / "later.yaml"
    later_project.write_text(project.read_text() + LATER)
    late = await fire(settings, later_project, "later", "manual:later:1", {})
    garbage = await wait_until(lambda: dead_letter_of(settings, "garbage"), what="a dead letter")
    await page.goto(f"{base}/console/dead-letters")
    await page.locator(f"#dead-records tr[data-letter='{garbage['id']}'] button").click()
    await expect(page.locator(".flash.error")).to_contain_text(
        f"dead letter {garbage['id']} cannot be replayed: it does not decode"
    )
    letter = await wait_until(lambda: _letter_of_workflow(settings, "later"), what="its letter")
    assert "unknown workflow 'later'" in letter["reason"]
    await screenshot(page, "16-dead-letters-records")
    project.write_text(later_project.read_text())
    deployed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "rflow.cli", "deploy", str(project)],
        env={**settings.to_env(), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert deployed.returncode == 0, deployed.stderr
    await wait_until(lambda: _worker_knows(worker, "later"), what="the worker to take `later`")
    # Two operators open the page; the second to press Replay is refused, with why.
    other = await browser.new_page()
    await other.goto(f"{base}/console/dead-letters")
    await page.goto(f"{base}/console/dead-letters")
    await page.locator(f"#dead-records tr[data-letter='{letter['id']}'] button").click()
    await expect(page.locator(".flash")).to_contain_text(f"Dead letter {letter['id']} replayed")
    assert (await settled_run(settings, late))["status"] == "succeeded"
    row = page.locator(f"#dead-records tr[data-letter='{letter['id']}']")
    await expect(row).to_contain_text("replayed")
    await expect(row.locator("button")).to_have_count(0)
    await other.locator(f"#dead-records tr[data-letter='{letter['id']}'] button").click()
    await expect(other.locator(".flash.error")).to_contain_text(
        f"dead letter {letter['id']}: already replayed at"
    )
    replayed = await dead_letter_of(settings, letter["record_key"])
    assert replayed["replayed_at"] is not None


SWEEP = """
  sweep:
    trigger: { manual: {} }
    strategy:
      matrix: { chain: [base, optimism, arbitrum] }
    steps:
      - id: check
        command:
          name: assert
          args: { that: "${{ matrix.chain != 'optimism' }}", message: "optimism is down" }
"""


async def test_a_matrix_run_shows_its_firings_other_combinations(
    settings, worker_factory, tmp_path, browser
):
    project = tmp_path / "project.yaml"
    project.write_text(OFF_CHAIN + SWEEP)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    page = await browser.new_page()
    await sign_in(page, worker.url, settings.api_token.get_secret_value())

    await fire(settings, project, "sweep", "manual:sweep:1", {})
    combos = firing_runs("sweep", "manual:sweep:1", {"chain": ["base", "optimism", "arbitrum"]})
    runs_by_chain = {combo["chain"]: rid for combo, rid in combos}
    for rid in runs_by_chain.values():
        await settled_run(settings, rid)
    await page.goto(f"{worker.url}/console/runs/{runs_by_chain['base']}")
    table = page.locator("#combinations")
    await expect(table.locator("tbody tr")).to_have_count(3)
    await expect(table.locator("tr.current")).to_contain_text("chain=base")
    await expect(table.locator("tr.current")).to_contain_text("this run")
    failed = table.locator("tr", has_text="chain=optimism")
    await expect(failed.locator(".status")).to_have_text("failed")
    await screenshot(page, "17-run-matrix")
    await failed.locator("a").click()
    await expect(page.locator("h1")).to_contain_text(runs_by_chain["optimism"])
    await expect(page.locator("#why")).to_contain_text("optimism is down")
    await expect(page.locator("#combinations tr.current")).to_contain_text("chain=optimism")

    # A firing with more combinations than the page lists still shows the run itself.
    conn = await storage.connect(settings)
    async with conn:
        every, total = await runs.matrix_runs(conn, await runs.get_run(conn, combos[0][1]))
        assert total == 3
        assert {row["run_id"] for row in every} == set(runs_by_chain.values())
        last = await runs.get_run(conn, every[-1]["run_id"])
        listed, total = await runs.matrix_runs(conn, last, limit=1)
    assert total == 3
    assert [row["run_id"] for row in listed] == [every[0]["run_id"], last["run_id"]]


async def _has_status(settings, rid: str, status: str) -> bool:
    row = await run_row(settings, rid)
    return row is not None and row["status"] == status


async def _letter_of_workflow(settings, workflow: str) -> dict | None:
    conn = await storage.connect(settings)
    async with conn:
        rows = await dead_letters.recent(conn, limit=100)
    return next((row for row in rows if f"'{workflow}'" in row["reason"]), None)


async def _worker_knows(worker, workflow: str) -> bool:
    status, body = await worker.get("/api/workflows")
    return status == 200 and any(w["workflow"] == workflow for w in body["workflows"])
