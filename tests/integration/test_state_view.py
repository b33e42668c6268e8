"""A workflow's durable state, read three ways against a real worker: ``rflow state``,
``GET /api/workflows/{name}/state`` and the console's workflow page in a real browser.
All three read the same rows, none changes them, and each refuses a workflow or a key
that does not exist with the reason."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from playwright.async_api import expect

from rflow import storage
from rflow.settings import Settings
from rflow.storage import workflow_state
from tests.integration.browser import chromium, screenshot, sign_in
from tests.integration.test_api import call
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
channels:
  ops: { type: log }
workflows:
  tally:
    trigger: { manual: { inputs: [who] } }
    steps:
      - id: remember
        list_add: { list: seen, value: "${{ inputs.who }}" }
      - id: note
        state_set:
          last: "${{ inputs.who }}"
          wei: "${{ 1250000000000000000000 }}"
          meta: { runs: "${{ length(state.seen) }}" }
  quiet:
    trigger: { manual: {} }
    steps:
      - id: hello
        command: { name: log, args: { message: hi } }
"""


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rflow.cli", *args],
        env={**os.environ, **settings.to_env()},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def stored(settings: Settings) -> list[workflow_state.StateEntry]:
    conn = await storage.connect(settings)
    async with conn:
        return await workflow_state.entries(conn, "tally")


async def test_the_state_is_read_by_the_cli_the_api_and_the_console(
    settings, worker_factory, tmp_path
):
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT)
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    for who in ("ann", "bob"):
        run = await settled_run(
            settings, await fire(settings, path, "tally", f"k-{who}", {"who": who})
        )
        assert run["status"] == "succeeded", run
    before = await stored(settings)

    # The CLI: every key, one key whole, JSON, and the refusals.
    listed = await asyncio.to_thread(cli, settings, "state", "tally")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["KEY", "TYPE", "UPDATED", "VALUE"]
    assert [line.split()[0] for line in lines[1:]] == ["last", "meta", "seen", "wei"]
    assert "list of 2" in lines[3] and lines[3].endswith('["ann","bob"]')
    assert lines[4].endswith("1250000000000000000000")  # exact, no separators
    one = await asyncio.to_thread(cli, settings, "state", "tally", "seen", "--json")
    assert one.returncode == 0, one.stderr
    document = json.loads(one.stdout)
    assert {k: document[k] for k in ("workflow", "key", "value", "type")} == {
        "workflow": "tally",
        "key": "seen",
        "value": ["ann", "bob"],
        "type": "list of 2",
    }
    whole = await asyncio.to_thread(cli, settings, "state", "tally", "meta")
    assert whole.stdout.splitlines()[0].startswith("tally state meta (object of 1 key, written ")
    assert json.loads("\n".join(whole.stdout.splitlines()[1:])) == {"runs": 2}
    missing = await asyncio.to_thread(cli, settings, "state", "tally", "sen")
    assert (missing.returncode, missing.stderr.strip()) == (
        1,
        "error: workflow 'tally' has no state key 'sen' — did you mean 'seen'? (it has: last, "
        "meta, seen, wei)",
    )
    ghost = await asyncio.to_thread(cli, settings, "state", "ghost")
    assert (ghost.returncode, ghost.stderr.strip()) == (
        1,
        "error: no workflow 'ghost': none is deployed under that name, and none has runs",
    )
    empty = await asyncio.to_thread(cli, settings, "state", "quiet")
    assert (empty.returncode, empty.stdout.strip()) == (
        0,
        "workflow quiet has no durable state yet: state_set, list_add and list_remove steps "
        "write it",
    )

    # The API: the same document, behind the token like every read route.
    status, answer = await call(worker, "GET", "/api/workflows/tally/state")
    assert status == 200
    assert {entry["key"]: entry["value"] for entry in answer["keys"]} == {
        "last": "bob",
        "meta": {"runs": 2},
        "seen": ["ann", "bob"],
        "wei": "1250000000000000000000",  # beyond 64 bits: as digits, as every API answer
    }
    assert answer["keys"][2]["type"] == "list of 2"
    status, answer = await call(worker, "GET", "/api/workflows/tally/state?key=last")
    assert (status, answer["value"], answer["type"]) == (200, "bob", "text")
    status, answer = await call(worker, "GET", "/api/workflows/tally/state?key=nope")
    assert status == 404 and answer["error"].startswith("workflow 'tally' has no state key 'nope'")
    status, answer = await call(worker, "GET", "/api/workflows/ghost/state")
    assert status == 404 and answer["error"].startswith("no workflow 'ghost'")
    assert (await call(worker, "GET", "/api/workflows/tally/state", token=None))[0] == 401
    status, answer = await call(worker, "GET", "/api/workflows/quiet/state")
    assert (status, answer) == (200, {"workflow": "quiet", "keys": []})

    # The console: a panel on the workflow's page, in a real browser.
    token = settings.api_token.get_secret_value()
    async with chromium(tmp_path / "profile") as browser:
        page = await browser.new_page()
        await sign_in(page, worker.url, token)
        await page.goto(f"{worker.url}/console/workflows/tally")
        panel = page.locator("section#state")
        await expect(panel.locator("h2")).to_have_text("Durable state")
        rows = panel.locator("tbody tr")
        await expect(rows).to_have_count(4)
        seen = rows.nth(2)
        await expect(seen.locator("td").nth(0)).to_have_text("seen")
        await expect(seen.locator("td").nth(1)).to_have_text("list of 2")
        assert json.loads(await seen.locator("pre.value").inner_text()) == ["ann", "bob"]
        await expect(rows.nth(3).locator("pre.value")).to_have_text("1250000000000000000000")
        await expect(panel).to_contain_text("rflow state tally")
        await screenshot(page, "workflow-state")
        await page.goto(f"{worker.url}/console/workflows/quiet")
        await expect(page.locator("section#state td.empty")).to_have_text(
            "No durable state yet: no step of quiet has written any."
        )
    # Reading changed nothing.
    assert await stored(settings) == before
