"""A worker with something for every action to act on, and principals of every role: the
world the role tests (API, CLI, console) try each action in."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rflow import storage
from rflow.settings import Settings
from rflow.storage import audit, controls, dead_letters, runs, waits
from tests.integration import chain
from tests.integration.harness import WorkerProcess, wait_until
from tests.integration.test_runs import fire, settled_run
from tests.integration.test_sends import chain_resources, pending_sends, private_node, token_for

TOKENS = {
    "APPROVER_TOKEN": "approver-token-5e1d",
    "VIEWER_TOKEN": "viewer-token-77a0",
    "SCRAPER_TOKEN": "scraper-token-0c94",
    "RETRIER_TOKEN": "retrier-token-b3f2",
}
"""Each principal's token, in the worker's and the CLI's environment."""

PRINCIPALS = """
principals:
  approver: { token_env: APPROVER_TOKEN, role: approver }
  viewer: { token_env: VIEWER_TOKEN }
  scraper: { token_env: SCRAPER_TOKEN, role: none, can: [metrics.read] }
  retrier: { token_env: RETRIER_TOKEN, role: approver, can: [runs.retry] }
"""

WORKFLOWS = """
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
    on_failure: dead_letter
    steps:
      - id: check
        command: { name: assert, args: { that: "${{ trigger.amount < 100 }}", message: "over 100" } }
  paid:
    trigger: { manual: { inputs: [ok] } }
    permissions: { relayers: [payout] }
    steps:
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "transfer(address,uint256)"
          args: ["0x000000000000000000000000000000000000dEaD", 1]
      - id: check
        command: { name: assert, args: { that: "${{ trigger.ok }}", message: "not ok" } }
  nightly:
    trigger: { schedule: { cron: "0 3 * * *" } }
    steps:
      - id: note
        command: { name: log, args: { message: "night" } }
"""

LATE = """
  late:
    trigger: { manual: {} }
    steps:
      - id: note
        command: { name: log, args: { message: "late" } }
"""

REFUSED = ("approver", "viewer")
"""The principals every operator action is tried as first (and refused to)."""


def token_of(name: str) -> str:
    return TOKENS[f"{name.upper()}_TOKEN"] if name != "operator" else ""


@dataclass
class World:
    """Something to act on for every action, and who acts."""

    settings: Settings
    worker: WorkerProcess
    project: Path
    w3: Any
    env: dict[str, str]
    checks: list[str]
    gated: list[str]
    resend: str
    sends: list[Any]
    letter: int
    operator_token: str
    seen: dict[str, Any] = field(default_factory=dict)

    def token(self, principal: str) -> str:
        return self.operator_token if principal == "operator" else token_of(principal)

    def cli(self, principal: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``rflow ARGS`` as ``principal`` (its token in RFLOW_CLI_TOKEN)."""
        env = {**os.environ, **self.settings.to_env(), **self.env}
        env["RFLOW_CLI_TOKEN"] = self.token(principal)
        env["RFLOW_WEB_PORT"] = str(self.worker.settings.web_port)
        env.pop("RFLOW_PROJECT", None)
        return subprocess.run(
            [sys.executable, "-m", "rflow.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )


async def build(settings: Settings, worker_factory, tmp_path: Path, stack) -> World:
    """Start the world: a private anvil, a worker, and the runs, sends and dead letter
    the actions take."""
    url, w3 = await private_node(stack)
    relayer = await chain.funded_account(w3)
    token = await token_for(w3, relayer)
    project = tmp_path / "project.yaml"
    project.write_text(chain_resources(token) + PRINCIPALS + WORKFLOWS)
    env = {**TOKENS, "PAYOUT_KEY": relayer.key.hex()}
    worker = worker_factory(project_path=project, env=env, rpc_urls={"local": url})
    await worker.wait_ready()
    assert settings.api_token is not None
    world = World(
        settings=settings,
        worker=worker,
        project=project,
        w3=w3,
        env={**env, "RFLOW_RPC_URL_LOCAL": url},
        checks=[],
        gated=[],
        resend="",
        sends=[],
        letter=0,
        operator_token=settings.api_token.get_secret_value(),
    )
    world.checks = [
        await fire(settings, project, "checks", f"manual:checks:{i}", {"amount": 500})
        for i in range(3)
    ]
    world.gated = [
        await fire(settings, project, "gated", f"manual:gated:{i}", {}) for i in range(6)
    ]
    world.resend = await fire(settings, project, "paid", "manual:paid:failed", {"ok": False})
    for rid in [*world.checks, world.resend]:
        assert (await settled_run(settings, rid))["status"] == "failed"
    for rid in world.gated:
        await wait_until(lambda rid=rid: open_wait(settings, rid), what=f"{rid} to wait")

    # Sends that stay pending: the node mines nothing from here on.
    await chain.rpc(w3, "evm_setAutomine", False)
    for i in range(4):
        await fire(settings, project, "paid", f"manual:paid:{i}", {"ok": True})
    world.sends = await wait_until(lambda: pending_sends(settings, 4), what="4 pending sends")

    # A firing of a workflow the deployment does not have yet: a dead letter, replayable
    # once the operator has deployed it.
    later = tmp_path / "later.yaml"
    later.write_text(project.read_text() + LATE)
    await fire(settings, later, "late", "manual:late:1", {})
    letter = await wait_until(lambda: letter_of(settings, "late"), what="the late letter")
    world.letter = letter["id"]
    project.write_text(later.read_text())
    deployed = await asyncio.to_thread(world.cli, "operator", "deploy", str(project))
    assert deployed.returncode == 0, deployed.stderr
    return world


async def db(settings: Settings, work: Any) -> Any:
    conn = await storage.connect(settings)
    async with conn:
        return await work(conn)


async def open_wait(settings: Settings, rid: str) -> dict[str, Any] | None:
    found = await db(settings, lambda conn: waits.open_waits(conn, rid))
    return found[0] if found else None


async def letter_of(settings: Settings, workflow: str) -> dict[str, Any] | None:
    rows = await db(settings, lambda conn: dead_letters.recent(conn, limit=100))
    return next((r for r in rows if f"unknown workflow '{workflow}'" in r["reason"]), None)


async def run_of(settings: Settings, rid: str) -> dict[str, Any] | None:
    return await db(settings, lambda conn: runs.get_run(conn, rid))


async def paused(settings: Settings) -> dict[str, Any]:
    return await db(settings, controls.paused)


async def trail(settings: Settings, **filters: Any) -> list[dict[str, Any]]:
    return await db(settings, lambda conn: audit.listing(conn, limit=1000, **filters))


async def attempts(settings: Settings, send_key: str) -> int:
    from rflow.storage import sends

    row = await db(settings, lambda conn: sends.find(conn, send_key))
    return len(row.attempts)


async def controls_of(settings: Settings, send_key: str) -> list[dict[str, Any]]:
    from rflow.storage import send_controls

    return await db(settings, lambda conn: send_controls.of_send(conn, send_key))


def forbidden(text: str, principal: str, action: str) -> bool:
    """Whether ``text`` is the refusal of ``action`` to ``principal``."""
    return f"forbidden: principal '{principal}' (" in text and f"may not {action}" in text


async def refusals_recorded(
    settings: Settings, via: str, expected: set[tuple[str, str]]
) -> set[tuple[str, str]]:
    """The (principal, action) refusals the audit trail holds through ``via``."""
    rows = await trail(settings, outcome="refused")
    found = {(r["principal"], r["action"]) for r in rows if r["via"] == via}
    return found & expected
