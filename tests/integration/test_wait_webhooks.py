"""Webhook waits on a real worker, Kafka and Postgres: a step hands the wait's resume URL on
(``${{ wait.url }}``) without the URL entering the journal, the topics or the database;
every auth type (none, api_key, hmac, timestamped hmac) resumes the waiting run at that
URL; a wrong token, the path alone, a wrong, stale or replayed credential is refused 401
with the reason while the run keeps waiting."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from rflow import storage
from rflow.ingress import sign
from rflow.ingress.auth import sign_timestamped
from rflow.storage import runs, waits
from tests.integration.harness import topic_messages, wait_until
from tests.integration.test_runs import fire, run_status, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

SECRET = "wait-secret-93c1f0"
AUTH = {
    "none": "{ type: none }",
    "api_key": "{ type: api_key, secret_env: WAIT_SECRET }",
    "hmac": "{ type: hmac, secret_env: WAIT_SECRET }",
    "timestamped": "{ type: hmac, secret_env: WAIT_SECRET, timestamp_header: X-Timestamp }",
}


def project(sink: str, auth: str) -> str:
    return f"""
workflows:
  confirm:
    trigger: {{ manual: {{}} }}
    steps:
      - id: ask
        http_call:
          url: "{sink}/ask"
          method: POST
          body: {{ resume: "${{{{ wait.url }}}}", order: "${{{{ trigger.order }}}}" }}
      - id: confirmed
        wait_for:
          webhook: {{ match: {{ status: ok }}, auth: {auth} }}
          timeout: 1h
      - id: done
        command: {{ name: log, args: {{ message: "confirmed by ${{{{ steps.confirmed.output.body.who }}}}" }} }}
"""


def credentials(kind: str, body: bytes, *, at: int | None = None) -> dict[str, str]:
    """The headers that pass auth ``kind`` for ``body``."""
    if kind == "api_key":
        return {"X-API-Key": SECRET}
    if kind == "hmac":
        return {"X-Hub-Signature-256": sign(SECRET, body)}
    if kind == "timestamped":
        stamp = at if at is not None else int(time.time())
        digest = sign_timestamped(SECRET, body, stamp)
        return {"X-Timestamp": str(stamp), "X-Hub-Signature-256": f"sha256={digest}"}
    return {}


def post(base: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(base + path, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    for name, value in headers.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def still_waiting(settings, rid: str) -> None:
    conn = await storage.connect(settings)
    async with conn:
        [wait] = await waits.open_waits(conn, rid)
        run = await runs.get_run(conn, rid)
    assert wait["resolved_at"] is None and run["status"] == "waiting", run


async def everything_stored(settings, rid: str) -> str:
    """The run's rows and every record of the test's topics, as text."""
    conn = await storage.connect(settings)
    async with conn:
        run = await runs.get_run(conn, rid)
        rows = await (await conn.execute("SELECT spec::text FROM waits")).fetchall()
    records = await topic_messages(settings)
    return json.dumps(run, default=str) + repr(rows) + repr([m.value for m in records])


@pytest.mark.parametrize("kind", list(AUTH))
async def test_each_auth_type_resumes_the_run_at_its_resume_url_and_refuses_the_rest(
    settings, worker_factory, tmp_path, sink, kind
):
    path = tmp_path / "project.yaml"
    path.write_text(project(sink.url, AUTH[kind]))
    public = "https://rflow.example.com" if kind == "none" else None
    worker = worker_factory(project_path=path, env={"WAIT_SECRET": SECRET}, public_url=public)
    await worker.wait_ready()
    rid = await fire(settings, path, "confirm", "manual:confirm:1", {"order": 42})

    # The step handed the URL on; the URL starts with RFLOW_PUBLIC_URL when it is set.
    asked = await wait_until(lambda: _asked(sink), what="the ask step's call")
    url = asked.body["resume"]
    assert url.startswith((public or worker.url) + "/hooks/wait/"), url
    resume = urllib.parse.urlsplit(url).path
    token = resume.rsplit("/", 1)[1]
    await wait_until(lambda: _waiting(settings, rid), what="the run to wait")
    await run_status(settings, rid, "waiting")
    # The token is in no row and on no topic: the step's input and output say the
    # placeholder, and the wait keeps the token's hash.
    stored = await everything_stored(settings, rid)
    assert token not in stored
    assert "${RFLOW_WAIT_URL}" in stored
    base = worker.url

    good = b'{"status": "ok", "who": "carol"}'
    refused = [
        # a token made up, or the wait's path with no token: anyone could compute those
        (base, "/hooks/wait/" + "A" * 43, good, credentials(kind, good), "no open wait"),
        (base, "/hooks/wait", good, credentials(kind, good), "the path alone is refused"),
    ]
    if kind == "api_key":
        refused.append((base, resume, good, {"X-API-Key": "wrong"}, "API key does not match"))
    if kind == "hmac":
        wrong = {"X-Hub-Signature-256": sign("not-the-secret", good)}
        refused.append((base, resume, good, wrong, "signature does not match"))
    if kind == "timestamped":
        stale = credentials(kind, good, at=int(time.time()) - 3600)
        refused.append((base, resume, good, stale, "outside the tolerance"))
    for at, where, body, headers, why in refused:
        status, answer = await asyncio.to_thread(post, at, where, body, headers)
        assert status == 401 and why in answer["error"], (where, status, answer)
        await still_waiting(settings, rid)

    if kind == "timestamped":
        # A delivery that passed is taken once: its replay is refused, even though the
        # first was ignored for its body.
        pending = b'{"status": "pending"}'
        signed = credentials(kind, pending)
        status, answer = await asyncio.to_thread(post, base, resume, pending, signed)
        assert (status, answer["accepted"]) == (202, False)
        status, answer = await asyncio.to_thread(post, base, resume, pending, signed)
        assert status == 401 and "used already" in answer["error"], answer
        await still_waiting(settings, rid)

    status, answer = await asyncio.to_thread(post, base, resume, good, credentials(kind, good))
    assert (status, answer) == (202, {"accepted": True, "resumed": [rid]})
    run = await settled_run(settings, rid)
    assert run["status"] == "succeeded"
    steps = {s["path"]: s for s in run["steps"]}
    assert steps["confirmed"]["output"]["body"] == {"status": "ok", "who": "carol"}
    kept = {name.lower() for name in steps["confirmed"]["output"]["headers"]}
    assert not kept & {"x-api-key", "x-hub-signature-256"}  # the credential is not kept
    assert steps["ask"]["input"]["body"]["resume"] == "${RFLOW_WAIT_URL}"
    assert steps["ask"]["output"]["json"]["echo"]["resume"] == "${RFLOW_WAIT_URL}"
    # Answered: the URL answers nothing more.
    status, answer = await asyncio.to_thread(post, base, resume, good, credentials(kind, good))
    assert status == 401 and "no open wait" in answer["error"]
    assert token not in await everything_stored(settings, rid)


async def _asked(sink) -> Any:
    return next((r for r in sink.requests if r.path == "/ask"), None)


async def _waiting(settings, rid: str) -> bool:
    conn = await storage.connect(settings)
    async with conn:
        return bool(await waits.open_waits(conn, rid))


SHOWN = """
principals:
  approver: { token_env: APPROVER_TOKEN, role: approver }
  viewer: { token_env: VIEWER_TOKEN }
"""


async def test_the_resume_url_is_shown_to_those_who_may_answer_it(
    settings, worker_factory, tmp_path, sink
):
    import os
    import subprocess
    import sys

    from playwright.async_api import expect

    from tests.integration.browser import chromium, screenshot, sign_in
    from tests.integration.test_api import call

    tokens = {"APPROVER_TOKEN": "approver-token-aa01", "VIEWER_TOKEN": "viewer-token-bb02"}
    path = tmp_path / "project.yaml"
    path.write_text(SHOWN + project(sink.url, AUTH["none"]))
    worker = worker_factory(project_path=path, env=tokens)
    await worker.wait_ready()
    rid = await fire(settings, path, "confirm", "manual:confirm:1", {"order": 7})
    await run_status(settings, rid, "waiting")
    url = (await wait_until(lambda: _asked(sink), what="the ask step's call")).body["resume"]

    # The API: the URL for whoever may answer, null for a viewer.
    _, shown = await call(worker, "GET", f"/api/runs/{rid}", token=tokens["APPROVER_TOKEN"])
    assert shown["webhook_waits"] == [{"step": "confirmed", "resume_url": url, "auth": "none"}]
    _, hidden = await call(worker, "GET", f"/api/runs/{rid}", token=tokens["VIEWER_TOKEN"])
    assert hidden["webhook_waits"] is None

    # The CLI's runs show.
    def show(token: str) -> str:
        env = {**os.environ, **settings.to_env(), **tokens, "RFLOW_CLI_TOKEN": token}
        env["RFLOW_WEB_PORT"] = str(worker.settings.web_port)
        done = subprocess.run(
            [sys.executable, "-m", "rflow.cli", "runs", "show", rid],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert f"resume    POST {url}  (confirmed, auth none)" in await asyncio.to_thread(
        show, tokens["APPROVER_TOKEN"]
    )
    viewed = await asyncio.to_thread(show, tokens["VIEWER_TOKEN"])
    assert url not in viewed and "shown to principals who may answer" in viewed

    # The console's run page.
    async with chromium(tmp_path / "chromium") as browser:
        page = await browser.new_page()
        await sign_in(page, worker.url, tokens["APPROVER_TOKEN"])
        await page.goto(f"{worker.url}/console/runs/{rid}")
        await expect(page.locator("#resume code.resume-url")).to_have_text(url)
        await screenshot(page, "wait-resume-url")
        viewer = await browser.new_page()
        await sign_in(viewer, worker.url, tokens["VIEWER_TOKEN"])
        await viewer.goto(f"{worker.url}/console/runs/{rid}")
        await expect(viewer.locator("h1 .status")).to_have_text("waiting")
        await expect(viewer.locator("#resume")).to_have_count(0)
        assert url not in await viewer.content()
