"""A week of payouts, run for real, for the backtest tests: a payout workflow on a
private anvil, its firings received over seven days and produced as rflow's manual
ingress produces them, and a worker that runs them (sends mined, charges spent, the read
model projected). Then ``rflow backtest`` as a user runs it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from eth_account import Account

from rflow import storage
from rflow.lang import load_project
from rflow.settings import Settings
from rflow.storage import runs
from rflow.streams.producer import Producer
from rflow.triggering import trigger_record
from tests.integration import chain
from tests.integration.harness import wait_until

MILLI = 10**15
"""A thousandth of an ether, in wei."""

FIRINGS = [
    # (hours after the week's start, payments in milli-ether, bonus, region)
    (2, [10, 20], True, None),
    (8, [15], False, None),
    (26, [10, 10], False, "eu"),
    (50, [30], True, None),
    (80, [40, 40], False, None),
    (83, [50], False, None),
    (87, [30, 20], False, None),
    (110, [10], True, "eu"),
    (134, [25], False, None),
    (158, [10, 5], False, None),
]
"""Ten firings over a week. Their total (0.328 ether) fits the deployed budget even all at
once (the worker runs them within a minute); the candidate's cap of 0.15 ether a day is
passed on the fourth day, by the third firing's first transfer."""

DEPLOYED_BONUS = 1 * MILLI
CANDIDATE_BONUS = 3 * MILLI
TIP = MILLI // 2


def project_yaml(
    rpc_env: str,
    relayer: str,
    recipients: dict[str, str],
    *,
    bonus: int = DEPLOYED_BONUS,
    cap: str = "1 ether",
    tip: bool = False,
) -> str:
    """The payout project: pay each payment, a bonus when asked; the candidate raises the
    bonus, tips the EU desk and caps the budget lower."""
    tip_step = (
        f"""
      - id: tip
        if: "${{{{ inputs.region == 'eu' }}}}"
        send_transaction:
          network: local
          relayer: payout
          to: "{recipients["tip"]}"
          value: "{TIP}"
"""
        if tip
        else ""
    )
    return f"""
networks:
  local: {{ chain_id: 31337, rpc_url_env: {rpc_env}, confirmations: 0 }}
relayers:
  payout: {{ key_env: BACKTEST_PAYOUT_KEY, address: "{relayer}", networks: [local] }}
budgets:
  daily:
    window: 24h
    max_native_value: {cap}
    scope: {{ relayers: [payout], networks: [local] }}
workflows:
  payouts:
    trigger: {{ manual: {{ inputs: [payments, bonus, region] }} }}
    permissions: {{ relayers: [payout] }}
    budgets: [daily]
    steps:
      - id: pay
        foreach: "${{{{ inputs.payments }}}}"
        send_transaction:
          network: local
          relayer: payout
          to: "${{{{ item.to }}}}"
          value: "${{{{ item.value }}}}"
      - id: bonus
        if: "${{{{ inputs.bonus }}}}"
        send_transaction:
          network: local
          relayer: payout
          to: "{recipients["bonus"]}"
          value: "{bonus}"
{tip_step}"""


@dataclass
class Week:
    """A week of payouts that ran."""

    settings: Settings
    rpc_url: str
    rpc_env: str
    relayer: Any
    recipients: dict[str, str]
    payees: list[str]
    start: datetime
    deployed: Path
    run_ids: list[str]
    folder: Path
    workers: list[Any]

    @property
    def env(self) -> dict[str, str]:
        """What a backtest needs of the environment: the settings and the node's URL (no
        relayer key: a backtest signs nothing)."""
        return {**self.settings.to_env(), self.rpc_env: self.rpc_url}

    def candidate(self, name: str, **changes: Any) -> Path:
        """A candidate project folder: the deployed one with ``changes``."""
        folder = self.folder / name
        folder.mkdir(exist_ok=True)
        (folder / "project.yaml").write_text(
            project_yaml(self.rpc_env, self.relayer.address, self.recipients, **changes)
        )
        return folder


def payments(index: int, payees: list[str]) -> list[dict[str, Any]]:
    _, amounts, _, _ = FIRINGS[index]
    return [
        {"to": payees[(index + i) % len(payees)], "value": str(milli * MILLI)}
        for i, milli in enumerate(amounts)
    ]


async def run_a_week(settings: Settings, worker_factory: Any, tmp_path: Path, rpc_url: str) -> Week:
    """Deploy the payout project (a worker started with it), fire the week's ten firings,
    and wait until every run has settled in the read model."""
    w3 = chain.connect(rpc_url)
    try:
        relayer = await chain.funded_account(w3, ether=10)
    finally:
        await w3.provider.disconnect()
    recipients = {"bonus": Account.create().address, "tip": Account.create().address}
    payees = [Account.create().address for _ in range(4)]
    rpc_env = "BACKTEST_RPC_URL"
    folder = tmp_path / "projects"
    deployed = folder / "deployed"
    deployed.mkdir(parents=True)
    (deployed / "project.yaml").write_text(project_yaml(rpc_env, relayer.address, recipients))
    worker = worker_factory(
        project_path=deployed,
        env={rpc_env: rpc_url, "BACKTEST_PAYOUT_KEY": relayer.key.hex()},
    )
    await worker.wait_ready()
    project = load_project(deployed, {rpc_env: rpc_url})
    start = datetime.now(UTC) - timedelta(days=7)
    run_ids = []
    async with Producer(settings) as producer:
        for index, (hours, _, bonus, region) in enumerate(FIRINGS):
            payload: dict[str, Any] = {"payments": payments(index, payees), "bonus": bonus}
            if region is not None:
                payload["region"] = region
            record = trigger_record(
                "payouts",
                project.workflows["payouts"],
                source="manual",
                trigger_key=f"manual:payouts:week-{index}",
                payload=payload,
                received_at=start + timedelta(hours=hours),
            )
            await producer.trigger(record)
            run_ids.append(_run_id(record.trigger_key))

    async def all_settled() -> bool:
        conn = await storage.connect(settings)
        async with conn:
            found = [await runs.get_run(conn, rid) for rid in run_ids]
        return all(run is not None and run["settled_at"] is not None for run in found)

    try:
        await wait_until(all_settled, timeout=120, what="the week's ten runs to settle")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{worker.tail()}") from None
    return Week(
        settings,
        rpc_url,
        rpc_env,
        relayer,
        recipients,
        payees,
        start,
        deployed,
        run_ids,
        folder,
        [worker],
    )


def _run_id(trigger_key: str) -> str:
    from rflow.engine.keys import run_id

    return run_id("payouts", trigger_key)


async def rflow(week: Week, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """``rflow ARGS`` as a user runs it, with the week's settings and node, ``stdin``
    typed in."""
    command = [sys.executable, "-m", "rflow.cli", *args]

    def run() -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            command,
            env={**os.environ, **week.env},
            input=stdin,
            capture_output=True,
            timeout=300,
        )

    return await asyncio.to_thread(run)


async def backtest(week: Week, candidate: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """``rflow backtest CANDIDATE --since 7d --json ARGS`` as a user runs it: its exit
    status, its JSON report and its standard error."""
    done = await rflow(week, "backtest", str(candidate), "--since", "7d", "--json", *args)
    out = done.stdout.decode()
    try:
        report = json.loads(out)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON:\n{out}\n{done.stderr.decode()}") from None
    return done.returncode, report, done.stderr.decode()
