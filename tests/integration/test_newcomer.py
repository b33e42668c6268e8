"""A newcomer handed an approver's token tries every command of the CLI, every route of
the API and every page and form of the console: they read, and answer approvals, and
nothing else happens. The lists tried are checked against what the code defines, so a
new command, route or page joins them."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click
import pytest

from rflow import authz, storage
from rflow.authz import Principal
from rflow.console import auth
from rflow.reference import console_actions
from rflow.storage import controls, deployments, schedules
from rflow.streams.api import ROUTES
from tests.integration.roles_world import db, forbidden, open_wait, run_of
from tests.integration.test_console_sessions import http_sign_in, request
from tests.integration.test_runs import fire, run_status, settled_run

pytestmark = [pytest.mark.usefixtures("applied_topics", "schema"), pytest.mark.timeout(900)]

TOKEN = "newcomer-token-41c7e9"
PROJECT = """
principals:
  newcomer: { token_env: NEWCOMER_TOKEN, role: approver }
channels:
  ops: { type: log }
workflows:
  hello:
    trigger: { manual: {} }
    steps:
      - id: greet
        command: { name: log, args: { message: "hello" } }
  gated:
    trigger: { manual: {} }
    steps:
      - id: ok
        wait_for: { approval: { prompt: "go?" }, timeout: 1h }
  checks:
    trigger: { manual: {} }
    steps:
      - id: check
        command: { name: assert, args: { that: "${{ false }}", message: "no" } }
  nightly:
    trigger: { schedule: { cron: "0 3 * * *" } }
    steps:
      - id: note
        command: { name: log, args: { message: "night" } }
"""
NEWCOMER = Principal.of("newcomer", "approver")


def commands() -> dict[str, click.Command]:
    from rflow.cli import commands as _attached  # noqa: F401
    from rflow.cli import main

    found: dict[str, click.Command] = {}

    def walk(prefix: str, group: click.Group) -> None:
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                walk(f"{prefix} {name}", command)
            else:
                found[f"{prefix} {name}"] = command

    walk("rflow", main)
    return found


def arguments(project: Path, gated: str, failed: str) -> dict[str, list[str] | None]:
    """What the newcomer gives each command (``None``: not run: a server, or a tool of
    the local development chain that signs with its funded account)."""
    p = str(project)
    return {
        "rflow approvals approve": [gated],
        "rflow approvals ls": [],
        "rflow approvals reject": ["r0000"],
        "rflow approvals show": [gated],
        "rflow audit ls": [],
        "rflow backtest": [str(project.parent)],
        "rflow budgets ls": ["--project", p],
        "rflow dead-letters ls": [],
        "rflow dead-letters replay": ["1"],
        "rflow dead-letters show": ["1"],
        "rflow deploy": [p],
        "rflow deployments": [],
        "rflow dev emit": None,
        "rflow doctor": [p],
        "rflow kafka acls": [],
        "rflow keys address": [p, "hot"],
        "rflow keys generate": [],
        "rflow migrate": [],
        "rflow run": ["hello", "--key", "newcomer"],
        "rflow runs approve": ["r0000"],
        "rflow runs cancel": [gated],
        "rflow runs list": [],
        "rflow runs reject": ["r0000"],
        "rflow runs retry": [failed],
        "rflow runs show": [failed],
        "rflow runs signal": [gated, "go"],
        "rflow schedules disable": ["nightly"],
        "rflow schedules enable": ["nightly"],
        "rflow schedules ls": [],
        "rflow schema": [],
        "rflow sends cancel": ["s000000000000"],
        "rflow sends ls": [],
        "rflow sends speedup": ["s000000000000"],
        "rflow spend": [],
        "rflow state": ["hello"],
        "rflow topics apply": [],
        "rflow trigger": ["hello", "--key", "newcomer-trigger", "--project", p],
        "rflow validate": [p],
        "rflow worker": None,
        "rflow workflow ls": [],
        "rflow workflow pause": ["hello"],
        "rflow workflow resume": ["hello"],
        "rflow workers": [],
    }


def api(url: str, method: str, body: dict | None) -> tuple[int, Any]:
    """One API request as the newcomer: (status, its JSON, or its text)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {TOKEN}")
    req.add_header("Content-Type", "application/json")
    try:
        resp = urllib.request.urlopen(req, timeout=30)
    except urllib.error.HTTPError as exc:
        resp = exc
    with resp:
        raw = resp.read()
    try:
        return resp.status, json.loads(raw)
    except ValueError:
        return resp.status, raw.decode()


def fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "x0000"), path)


async def test_a_newcomer_with_an_approvers_token_reads_and_answers_approvals_and_nothing_else(
    settings, worker_factory, tmp_path
):
    project = tmp_path / "project.yaml"
    project.write_text(PROJECT)
    worker = worker_factory(project_path=project, env={"NEWCOMER_TOKEN": TOKEN})
    await worker.wait_ready()
    gated = [await fire(settings, project, "gated", f"manual:gated:{i}", {}) for i in range(3)]
    failed = await fire(settings, project, "checks", "manual:checks:1", {})
    assert (await settled_run(settings, failed))["status"] == "failed"
    for rid in gated:
        await run_status(settings, rid, "waiting")
    deployed = await db(settings, deployments.latest_id)

    # Every command.
    given = arguments(project, gated[0], failed)
    found = commands()
    assert set(given) == set(found), "a command is missing from this test's list"
    env = {**os.environ, **settings.to_env(), "NEWCOMER_TOKEN": TOKEN, "RFLOW_CLI_TOKEN": TOKEN}
    env["RFLOW_WEB_PORT"] = str(worker.settings.web_port)
    env.pop("RFLOW_PROJECT", None)
    tried = {"allowed": [], "refused": []}
    for path, args in sorted(given.items()):
        if args is None:
            continue
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "rflow.cli", *path.split()[1:], *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        action = getattr(found[path].callback, "rflow_action", None)
        if action is None or authz.decide(NEWCOMER, action):
            assert "forbidden" not in done.stderr, (path, done.stderr)
            tried["allowed"].append(path)
        else:
            assert done.returncode == 1 and forbidden(done.stderr, "newcomer", action), (
                path,
                done.stdout,
                done.stderr,
            )
            tried["refused"].append(path)
    assert "rflow approvals approve" in tried["allowed"] and "rflow deploy" in tried["refused"]
    assert (await settled_run(settings, gated[0]))["status"] == "succeeded"  # answered

    # Every route of the API.
    values = {"run_id": gated[1], "workflow": "hello", "name": "hello", "trigger": "schedule"}
    for path, methods in ROUTES.items():
        for method, action in methods.items():
            body = {} if method == "POST" else None
            status, answer = await asyncio.to_thread(
                api, worker.url + fill(path, values), method, body
            )
            if authz.decide(NEWCOMER, action):
                assert status != 403, (method, path, answer)
            else:
                assert status == 403, (method, path, status, answer)
                assert (answer["action"], answer["principal"]) == (action, "newcomer")
    assert (await settled_run(settings, gated[1]))["status"] == "succeeded"  # answered

    # Every page and form of the console.
    session, _ = await asyncio.to_thread(http_sign_in, worker.url, TOKEN)
    cookies = {auth.SESSION_COOKIE: session}
    values = {"run_id": gated[2], "name": "hello", "send_id": "s0", "letter_id": "1"}
    for path, method, action in console_actions():
        url = worker.url + fill(path, values)
        if method == "GET":
            status, _, _, body = await asyncio.to_thread(request, url, cookies=cookies)
            assert status in (200, 404), (path, status)
            assert "forbidden" not in body
            continue
        form = {"csrf": auth.csrf_for(session), "step": "ok"}
        status, _, _, body = await asyncio.to_thread(request, url, cookies=cookies, form=form)
        if authz.decide(NEWCOMER, action):
            assert status == 303, (path, status)
        else:
            assert status == 403 and "newcomer" in body and action in body, (path, status)
    assert (await settled_run(settings, gated[2]))["status"] in ("succeeded", "rejected")

    # Nothing but the answers happened.
    from rflow.engine.keys import run_id

    assert await run_of(settings, run_id("hello", "manual:hello:newcomer")) is None
    assert await run_of(settings, run_id("hello", "newcomer-trigger")) is None
    assert (await run_of(settings, failed))["retried_as"] is None
    assert "hello" not in await db(settings, controls.paused)
    assert await db(settings, schedules.disabled) == []
    assert await db(settings, deployments.latest_id) == deployed
    for rid in gated:
        assert await open_wait(settings, rid) is None
    conn = await storage.connect(settings)
    async with conn:
        cur = await conn.execute(
            "SELECT DISTINCT action FROM audit_log WHERE principal = 'newcomer' "
            "AND outcome = 'done'"
        )
        assert {row[0] for row in await cur.fetchall()} == {"approvals.answer"}
