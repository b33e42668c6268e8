"""The console's roles in a real browser (Debian's chromium, headless, via Playwright): a
viewer and an approver see only what they may use, and a form they may not use, posted
anyway with the page's own CSRF token, is refused 403 naming the action and the principal
with nothing done; the operator's clicks do each action."""

from __future__ import annotations

import contextlib
import re

import pytest
from playwright.async_api import Page, expect

from tests.integration.browser import chromium, screenshot, sign_in
from tests.integration.roles_world import (
    REFUSED,
    attempts,
    build,
    controls_of,
    forbidden,
    letter_of,
    open_wait,
    paused,
    refusals_recorded,
    run_of,
    trail,
)
from tests.integration.test_runs import settled_run

pytestmark = [pytest.mark.usefixtures("applied_topics", "schema"), pytest.mark.timeout(900)]

OPERATOR_FORMS = [
    "button:has-text('Retry')",
    "button:has-text('Cancel this run')",
    "button:has-text('Pause')",
    "button:has-text('Resume')",
    "button:has-text('Speed up')",
    "button:has-text('Cancel send')",
    "button:has-text('Replay')",
]


@pytest.fixture
async def world(settings, worker_factory, tmp_path):
    async with contextlib.AsyncExitStack() as stack:
        yield await build(settings, worker_factory, tmp_path, stack)


@pytest.fixture
async def browser(tmp_path):
    async with chromium(tmp_path / "chromium") as context:
        yield context


async def forge(page: Page, path: str, fields: dict[str, str] | None = None) -> tuple[int, str]:
    """POST a form to ``path`` from the console's own page, with the session's CSRF token
    (as a person editing the page, or a script of theirs, could): (status, body)."""
    return await page.evaluate(
        """async ([path, fields]) => {
            const csrf = document.querySelector("form.who input[name=csrf]").value;
            const body = new URLSearchParams({csrf, ...fields});
            const answer = await fetch(path, {method: "POST", body, redirect: "manual"});
            const page = new DOMParser().parseFromString(await answer.text(), "text/html");
            return [answer.status, page.body.innerText];
        }""",
        [path, fields or {}],
    )


async def test_each_role_sees_only_what_it_may_use_and_is_refused_the_rest(world, browser):
    s, base = world.settings, world.worker.url
    failed, waiting, answerable = world.checks[2], world.gated[0], world.gated[1]
    send = world.sends[0]
    forms = {
        "runs.retry": f"/console/runs/{failed}/retry",
        "runs.cancel": f"/console/runs/{waiting}/cancel",
        "workflows.pause": "/console/workflows/hello/pause",
        "sends.speedup": f"/console/sends/{send.send_id}/speedup",
        "sends.cancel": f"/console/sends/{send.send_id}/cancel",
        "dead_letters.replay": f"/console/dead-letters/{world.letter}/replay",
    }
    for who in REFUSED:
        page = await browser.new_page()
        await sign_in(page, base, world.token(who))
        await expect(page.locator("header .who")).to_contain_text(f"{who} ({who})")
        # The navigation offers every page they may read, the audit trail included.
        nav = page.locator("header nav a")
        pages = (
            "Runs",
            "Approvals",
            "Workflows",
            "Budgets",
            "Sends",
            "Dead letters",
            "Backtests",
            "Audit",
        )
        await expect(nav).to_have_text([re.compile(name) for name in pages])
        # No page shows a form they may not use.
        for path in (
            f"/console/runs/{failed}",
            f"/console/runs/{waiting}",
            "/console/workflows",
            "/console/workflows/hello",
            "/console/sends",
            "/console/dead-letters",
        ):
            await page.goto(base + path)
            await expect(page.locator("main h1")).to_be_visible()
            for button in OPERATOR_FORMS:
                await expect(page.locator(f"main {button}")).to_have_count(0)
        await screenshot(page, f"roles-{who}-sends")
        # An approval: the approver may answer it, the viewer only reads it.
        await page.goto(f"{base}/console/runs/{answerable}")
        entry = page.locator(".approval")
        if who == "viewer":
            await expect(entry.locator("button")).to_have_count(0)
            await expect(entry).to_contain_text("may read this approval, not answer it")
            status, body = await forge(page, f"/console/runs/{answerable}/approve", {"step": "ok"})
            assert status == 403 and forbidden(body, "viewer", "approvals.answer"), body
            assert await open_wait(s, answerable) is not None
        await screenshot(page, f"roles-{who}-approval")
        # Forms posted anyway, with the page's own CSRF token: 403, named, nothing done.
        for action, path in forms.items():
            status, body = await forge(page, path)
            assert status == 403, (who, path, status)
            assert forbidden(body, who, action), body
        await page.close()

    assert (await run_of(s, failed))["retried_as"] is None
    assert await open_wait(s, waiting) is not None
    assert "hello" not in await paused(s)
    assert await attempts(s, send.send_key) == 1 and await controls_of(s, send.send_key) == []
    assert (await letter_of(s, "late"))["replayed_at"] is None
    expected = {(who, action) for who in REFUSED for action in forms}
    expected.add(("viewer", "approvals.answer"))
    assert await refusals_recorded(s, "console", expected) == expected

    # The approver answers the approval from the console; the trail says so.
    page = await browser.new_page()
    await sign_in(page, base, world.token("approver"))
    await page.goto(f"{base}/console/runs/{answerable}")
    await page.locator(".approval button:has-text('Approve')").click()
    await expect(page.locator(".flash")).to_contain_text("as approver")
    assert (await settled_run(s, answerable))["status"] == "succeeded"
    await page.close()

    # The operator's clicks do every one of them.
    page = await browser.new_page()
    await sign_in(page, base, world.operator_token)
    await page.goto(f"{base}/console/dead-letters")
    await page.locator(f"#dead-runs tr:has-text('{failed}') button:has-text('Retry')").click()
    await expect(page.locator(".flash")).to_contain_text(f"Retrying run {failed}")
    await page.goto(f"{base}/console/dead-letters")
    await page.locator(f"#dead-records tr[data-letter='{world.letter}'] button").click()
    await expect(page.locator(".flash")).to_contain_text(f"Dead letter {world.letter} replayed")
    await page.goto(f"{base}/console/runs/{waiting}")
    await page.click("button:has-text('Cancel this run')")
    await expect(page.locator(".flash")).to_contain_text(f"Asked run {waiting} to stop")
    await page.goto(f"{base}/console/workflows")
    await page.locator("form[action='/console/workflows/hello/pause'] button").click()
    await expect(page.locator(".flash")).to_contain_text("Paused hello")
    await page.locator("form[action='/console/workflows/hello/resume'] button").click()
    await expect(page.locator(".flash")).to_contain_text("Resumed hello")
    await page.goto(f"{base}/console/sends")
    card = page.locator(f"article[data-send='{send.send_id}']")
    await card.locator("button:has-text('Speed up')").click()
    await expect(page.locator(".flash")).to_contain_text(f"Send {send.send_id} sped up")
    await card.locator("button:has-text('Cancel send')").click()
    await expect(page.locator(".flash")).to_contain_text(f"Send {send.send_id} is being cancelled")
    assert (await settled_run(s, waiting))["status"] == "cancelled"
    assert [c["requested_by"] for c in await controls_of(s, send.send_key)] == [
        "operator",
        "operator",
    ]
    # The run of the send says who asked for each, where its transactions are.
    await page.goto(f"{base}/console/runs/{send.run_id}")
    asked = page.locator("#send-controls tbody tr")
    await expect(asked).to_have_count(2)
    await expect(asked.nth(0)).to_contain_text("speedup")
    await expect(asked.nth(1)).to_contain_text("cancel")
    for row in await asked.all():
        await expect(row).to_contain_text("operator")

    # The audit page shows it all, filtered.
    await page.goto(f"{base}/console/audit?principal=viewer&outcome=refused")
    rows = page.locator("table.audit tbody tr")
    await expect(rows.first).to_contain_text("viewer")
    for row in await rows.all():
        await expect(row).to_contain_text("refused")
    await screenshot(page, "roles-audit")
    done = {r["action"] for r in await trail(s, principal="operator") if r["via"] == "console"}
    assert set(forms) | {"workflows.pause"} <= done
