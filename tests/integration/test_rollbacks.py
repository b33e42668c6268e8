"""Deploys move forward: a worker restarted with an older project does not roll the fleet
back; going back is an operator's `--rollback`, recorded as the action deploy.rollback."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from rflow import storage
from rflow.agents.effects import partition_of
from rflow.engine.keys import run_id
from rflow.storage import deployments
from rflow.streams.topics import Catalog
from tests.integration import chain
from tests.integration.harness import WorkerProcess, wait_until
from tests.integration.test_live_deploys import cli, newest_deployment, running
from tests.integration.test_runs import fire, settled_run
from tests.integration.test_sends import error_of, sends_of

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
networks:
  local: {{ chain_id: 31337, confirmations: 0 }}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
budgets:
  daily: {{ window: 24h, max_native_value: {cap} }}
workflows:
  pay:
    trigger: {{ manual: {{ inputs: [to, value] }} }}
    permissions: {{ relayers: [payout], max_value_per_tx: 1000 wei }}
    budgets: [daily]
    steps:
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          to: "${{{{ trigger.to }}}}"
          value: "${{{{ trigger.value }}}}"
"""
WORKER = (*WorkerProcess.RFLOW[:-2], "--rollback", *WorkerProcess.RFLOW[-2:])


def versions_of(tmp_path: Path) -> tuple[Path, Path]:
    """v1: a budget of 10000 wei a day; v2: the same project with a cap of 300 wei."""
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    for folder, cap in ((v1, "10000 wei"), (v2, "300 wei")):
        folder.mkdir()
        (folder / "project.yaml").write_text(PROJECT.format(cap=cap))
    return v1, v2


async def stored(settings) -> list[Any]:
    conn = await storage.connect(settings)
    async with conn:
        return await deployments.recent(conn, 10)


def keys_on_every_partition(settings, prefix: str) -> list[str]:
    """Trigger keys whose firings land on each partition (so on every worker)."""
    count = Catalog.from_settings(settings).spec("rflow.triggers").partitions
    found: dict[int, str] = {}
    for i in range(10_000):
        key = f"{prefix}{i}"
        found.setdefault(partition_of(f"manual:pay:{key}".encode(), count), key)
        if len(found) == count:
            return [f"manual:pay:{k}" for k in found.values()]
    raise AssertionError("no key for some partition")


async def test_a_worker_restarted_with_an_older_project_leaves_the_newest_in_force(
    settings, worker_factory, tmp_path, w3
):
    payout = await chain.funded_account(w3)
    env = {"PAYOUT_KEY": payout.key.hex()}
    v1, v2 = versions_of(tmp_path)
    workers = [worker_factory(project_path=v1, env=env), worker_factory(project_path=v1, env=env)]
    for worker in workers:
        await worker.wait_ready()
    first = await newest_deployment(settings)
    deployed = await asyncio.to_thread(cli, settings, "deploy", str(v2))
    assert deployed.returncode == 0, deployed.stderr
    second = await newest_deployment(settings)
    assert second == first + 1
    for worker in workers:
        await running(worker, second)

    # One host restarts from an old image: the project it is given is deployment 1's.
    workers[0].stop()
    restarted = worker_factory(project_path=v1, env=env)
    await restarted.wait_ready()
    log = restarted.tail(400)
    assert f"is deployment {first}, older than deployment {second} (the newest" in log, log
    assert f"this worker does not deploy it and runs deployment {second} instead" in log
    assert f"rflow deploy --rollback {v1}" in log
    assert [d.id for d in await stored(settings)] == [second, first]  # nothing new stored
    for worker in (restarted, workers[1]):
        await running(worker, second)

    # The tighter budget still refuses, on every partition, so on both workers.
    nonce = await w3.eth.get_transaction_count(payout.address)
    to = chain.Account.create().address
    refused = []
    for key in keys_on_every_partition(settings, "tight-"):
        refused.append(await fire(settings, v1, "pay", key, {"to": to, "value": 400}))
    for rid in refused:
        run = await settled_run(settings, rid, timeout=60)
        assert run["status"] == "failed", run
        error = error_of(run, "pay")
        assert error["kind"] == "budget_exceeded" and "cap 300" in error["message"], error
        assert await sends_of(settings, rid) == []
    assert await w3.eth.get_transaction_count(payout.address) == nonce
    assert await w3.eth.get_balance(to) == 0

    # `rflow deploy` of the older project needs --rollback too; with it, the fleet goes
    # back, recorded as the operator's action.
    refused_deploy = await asyncio.to_thread(cli, settings, "deploy", str(v1))
    assert refused_deploy.returncode == 1
    assert f"is deployment {first}, older than deployment {second}" in refused_deploy.stderr
    assert f"rflow deploy --rollback {v1}" in refused_deploy.stderr
    assert (await newest_deployment(settings)) == second
    rolled = await asyncio.to_thread(cli, settings, "deploy", "--rollback", str(v1))
    assert rolled.returncode == 0, rolled.stderr
    assert f"(deploy.rollback from deployment {second})" in rolled.stdout
    [third, *_] = await stored(settings)
    assert (third.id, third.action, third.replaced) == (second + 1, "deploy.rollback", second)
    assert third.actor.startswith("rflow deploy (")
    listed = json.loads((await asyncio.to_thread(cli, settings, "deployments", "--json")).stdout)
    assert listed["deployments"][0]["action"] == "deploy.rollback"
    for worker in (restarted, workers[1]):
        await running(worker, third.id)
    rid = await fire(settings, v1, "pay", "manual:pay:loose-again", {"to": to, "value": 400})
    assert (await settled_run(settings, rid, timeout=60))["status"] == "succeeded"
    assert await w3.eth.get_balance(to) == 400


async def test_a_worker_goes_back_only_when_told_rollback_and_never_to_what_it_cannot_load(
    settings, worker_factory, tmp_path, w3
):
    payout = await chain.funded_account(w3)
    env = {"PAYOUT_KEY": payout.key.hex()}
    v1, v2 = versions_of(tmp_path)
    # The newest names a variable the deploying machine has and the workers have not.
    (v2 / "project.yaml").write_text(
        (v2 / "project.yaml").read_text()
        + "  needs:\n    trigger: { manual: {} }\n    steps:\n      - id: note\n"
        '        command: { name: log, args: { message: "${RFLOW_TEST_NEWEST_ONLY}" } }\n'
    )
    first = worker_factory(project_path=v1, env=env)
    await first.wait_ready()
    deployed = await asyncio.to_thread(
        cli, settings, "deploy", str(v2), RFLOW_TEST_NEWEST_ONLY="here"
    )
    assert deployed.returncode == 0, deployed.stderr
    second = await newest_deployment(settings)
    first.stop()

    # Restarted with the older project, a worker that cannot load the newest does not fall
    # back to its own: it does not start.
    stale = worker_factory(project_path=v1, env=env)

    async def exited() -> int | None:
        return stale.proc.poll() if stale.proc is not None else None

    code = await wait_until(exited, timeout=90, what="the worker to refuse to start")
    assert code != 0
    log = stale.tail(200)
    assert f"deployment {second} does not load here" in log, log
    assert "RFLOW_TEST_NEWEST_ONLY" in log
    assert "so this worker does not start: it never runs the older project" in log
    assert (await stored(settings))[0].id == second

    # Told --rollback, a worker deploys its project as the newest, recorded as such.
    back = worker_factory(WORKER, project_path=v1, env=env)
    await back.wait_ready()
    [third, *_] = await stored(settings)
    assert (third.id, third.action, third.replaced) == (second + 1, "deploy.rollback", second)
    assert third.actor.startswith("worker ") and third.actor.endswith("--rollback")
    await running(back, third.id)
    assert "rolled back: deployed the project at" in back.tail(400)
    rid = await fire(settings, v1, "pay", "manual:pay:after", {"to": payout.address, "value": 400})
    run = await settled_run(settings, rid, timeout=60)
    assert run["status"] == "succeeded", run
    assert run_id("pay", "manual:pay:after") == rid
