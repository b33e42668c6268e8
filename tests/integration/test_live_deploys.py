"""Deploys are live: `rflow deploy` reaches running workers without a restart.

Added workflows fire on every worker, removed ones stop (their firings are refused with
the reason), changed ones start new runs with the new version while a run in flight
keeps its own; every send is checked against the current permissions and budgets; a
deployment a worker cannot load leaves it on the one it runs, and says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from rflow import storage
from rflow.agents.effects import partition_of
from rflow.deployment import Deployment
from rflow.engine.keys import run_id, workflow_version
from rflow.ingress.scheduler import SchedulerService
from rflow.lang import load_project
from rflow.storage import dead_letters
from rflow.streams.app import create_app
from rflow.streams.topics import Catalog
from tests.integration import chain
from tests.integration.harness import WorkerProcess, wait_until
from tests.integration.test_api import call
from tests.integration.test_operations import parked
from tests.integration.test_runs import fire, settled_run
from tests.integration.test_schedules import fired, key, schedule, utc, write_project
from tests.integration.test_sends import error_of, sends_of

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

APPROVAL = """
      - id: ok
        wait_for: { approval: { prompt: "go?" }, timeout: 1h }
"""
LOG = """
      - id: note
        command: { name: log, args: { message: "%s" } }
"""


def greet(sink: str, tag: str) -> str:
    """A manual workflow that waits for an approval, then calls the sink at /greet/<tag>."""
    return (
        "  greet:\n    trigger: { manual: {} }\n    steps:"
        + APPROVAL
        + f'      - id: call\n        http_call: {{ url: "{sink}/greet/{tag}", method: POST }}\n'
    )


def logging_workflow(name: str, trigger: str, *, approval: bool = False) -> str:
    return (
        f"  {name}:\n    trigger: {trigger}\n    steps:"
        + (APPROVAL if approval else "")
        + (LOG % name)
    )


def write(folder: Path, *workflows: str) -> Path:
    """A project folder of one file holding ``workflows``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "project.yaml").write_text("workflows:\n" + "".join(workflows))
    return folder


def cli(settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``rflow ARGS`` in its own process, with the test's settings and ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "rflow.cli", *args],
        env={**os.environ, **settings.to_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def post(
    worker: WorkerProcess, path: str, body: bytes = b"{}", headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """POST ``body`` to the worker (the API's token on /api/ paths): (status, JSON)."""

    def send() -> tuple[int, Any]:
        request = urllib.request.Request(
            worker.url + path,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                **(worker.auth if path.startswith("/api/") else {}),
                **(headers or {}),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    return await asyncio.to_thread(send)


async def deployment_of(worker: WorkerProcess) -> dict[str, Any]:
    """What the worker's /healthz says it runs: ``{"id": ..., "failed": ...}``."""
    status, body = await worker.get("/healthz")
    assert status == 200, (status, body, worker.tail())
    return body["deployment"]


async def running(worker: WorkerProcess, deployment: int) -> None:
    async def there() -> bool:
        return (await deployment_of(worker))["id"] == deployment

    try:
        await wait_until(there, timeout=30, what=f"the worker to run deployment {deployment}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- worker log ---\n{worker.tail()}") from None


async def newest_deployment(settings) -> int:
    """The newest deployment's id, as `rflow deployments` shows it (once there is one)."""

    async def newest() -> int | None:
        listed = await asyncio.to_thread(cli, settings, "deployments", "--json")
        assert listed.returncode == 0, listed.stderr
        found = json.loads(listed.stdout)["deployments"]
        return found[0]["id"] if found else None

    return await wait_until(newest, timeout=30, what="a deployment")


async def triggers_admitted(worker: WorkerProcess, workflow: str) -> float:
    """The worker's ``rflow_triggers_total`` of ``workflow``: firings it admitted."""

    def fetch() -> str:
        request = urllib.request.Request(worker.url + "/metrics", headers=worker.auth)
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.read().decode()

    total = 0.0
    for line in (await asyncio.to_thread(fetch)).splitlines():
        if line.startswith("rflow_triggers_total{") and f'workflow="{workflow}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def dead_letter(settings, trigger_key: str) -> dict[str, Any]:
    async def found() -> dict[str, Any] | None:
        conn = await storage.connect(settings)
        async with conn:
            rows = await dead_letters.recent(conn)
        return next((r for r in rows if json.loads(r["raw"])["trigger_key"] == trigger_key), None)

    return await wait_until(found, timeout=30, what=f"the dead letter of {trigger_key}")


def versions(path: Path) -> dict[str, str]:
    return {name: workflow_version(w) for name, w in load_project(path, {}).workflows.items()}


async def test_a_deploy_adds_changes_and_removes_workflows_on_two_running_workers(
    settings, worker_factory, tmp_path, sink
):
    v1 = write(
        tmp_path / "v1",
        greet(sink.url, "one"),
        logging_workflow("old", "{ webhook: { path: /hooks/old } }", approval=True),
    )
    v2 = write(
        tmp_path / "v2",
        greet(sink.url, "two"),
        logging_workflow("greet2", "{ manual: {} }"),
        logging_workflow("hook2", "{ webhook: { path: /hooks/hook2 } }"),
    )
    before, after = versions(v1), versions(v2)
    workers = [worker_factory(project_path=v1), worker_factory(project_path=v1)]
    for worker in workers:
        await worker.wait_ready()
    first = await newest_deployment(settings)
    for worker in workers:
        await running(worker, first)
    assert (await post(workers[0], "/hooks/hook2"))[0] == 404

    # In flight across the deploy: a run of the workflow that changes, one of the one removed.
    status, reply = await post(workers[1], "/hooks/old")
    assert status == 202, reply
    old_run = run_id("old", reply["trigger_key"])
    greet_before = await fire(settings, v1, "greet", "manual:greet:before", {})
    await parked(settings, old_run)
    await parked(settings, greet_before)

    deployed = cli(settings, "deploy", str(v2), "--json")
    assert deployed.returncode == 0, deployed.stderr
    rows = {row["workflow"]: row for row in json.loads(deployed.stdout)}
    assert rows == {
        "greet": {
            "workflow": "greet",
            "version": after["greet"],
            "previous": before["greet"],
            "changed": True,
        },
        "greet2": {
            "workflow": "greet2",
            "version": after["greet2"],
            "previous": None,
            "changed": True,
        },
        "hook2": {
            "workflow": "hook2",
            "version": after["hook2"],
            "previous": None,
            "changed": True,
        },
        "old": {"workflow": "old", "version": None, "previous": before["old"], "changed": True},
    }
    second = await newest_deployment(settings)
    assert second > first
    assert (
        f"deployment {second}: added greet2, hook2; changed greet; removed old" in deployed.stderr
    )
    assert "rflow deployments" in deployed.stderr
    for worker in workers:
        await running(worker, second)

    # Added: manual runs on every partition, through either worker, start without a restart.
    count = Catalog.from_settings(settings).spec("rflow.triggers").partitions
    by_partition: dict[int, str] = {}
    for i in range(1000):
        by_partition.setdefault(partition_of(f"manual:greet2:k{i}".encode(), count), f"k{i}")
        if len(by_partition) == count:
            break
    for i, idempotency_key in enumerate(by_partition.values()):
        status, reply = await post(
            workers[i % 2],
            "/api/workflows/greet2/runs",
            headers={"Idempotency-Key": idempotency_key},
        )
        assert status == 202, reply
    for idempotency_key in by_partition.values():
        run = await settled_run(settings, run_id("greet2", f"manual:greet2:{idempotency_key}"))
        assert (run["status"], run["version"]) == ("succeeded", after["greet2"])
    for worker in workers:  # each worker admitted the firings of its own partitions
        assert await triggers_admitted(worker, "greet2") > 0, worker.tail()
    # ... and its webhook answers on both workers.
    for worker in workers:
        status, reply = await post(worker, "/hooks/hook2", b'{"n": 1}')
        assert status == 202, reply
        run = await settled_run(settings, run_id("hook2", reply["trigger_key"]))
        assert run["status"] == "succeeded"

    # Changed: new runs start with the new version; the run in flight keeps its own.
    greet_after = await fire(settings, v2, "greet", "manual:greet:after", {})
    await parked(settings, greet_after)
    for rid in (greet_before, greet_after):
        assert (await call(workers[0], "POST", f"/api/runs/{rid}/approve", {}))[0] == 200
    for rid, version in ((greet_before, before["greet"]), (greet_after, after["greet"])):
        run = await settled_run(settings, rid)
        assert (run["status"], run["version"]) == ("succeeded", version)
    assert sorted(r.path for r in sink.requests) == ["/greet/one", "/greet/two"]

    # Removed: its webhook answers 404 on both workers, a firing of it is refused with the
    # reason, and its run in flight finishes on the version it started with.
    for worker in workers:
        status, reply = await post(worker, "/hooks/old")
        assert (status, reply) == (404, {"error": "no webhook at /hooks/old"})
    await fire(settings, v1, "old", "webhook:old:late", {})
    letter = await dead_letter(settings, "webhook:old:late")
    assert letter["reason"] == f"workflow 'old' was removed by deployment {second}"
    assert (await call(workers[1], "POST", f"/api/runs/{old_run}/approve", {}))[0] == 200
    run = await settled_run(settings, old_run)
    assert (run["status"], run["version"]) == ("succeeded", before["old"])

    _, listed = await call(workers[0], "GET", "/api/workflows")
    assert sorted(w["workflow"] for w in listed["workflows"]) == ["greet", "greet2", "hook2"]
    assert listed["deployment"] == {"id": second, "failed": None}


MONEY = """
networks:
  local: {{ chain_id: 31337, confirmations: 0 }}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
budgets:
  daily: {{ window: 24h, max_native_value: {cap} }}
workflows:
  pay:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout], max_value_per_tx: {per_tx} }}
    budgets: [daily]
    steps:
      - id: ok
        wait_for: {{ approval: {{ prompt: "pay?" }}, timeout: 1h }}
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          to: "${{{{ trigger.to }}}}"
          value: "${{{{ trigger.value }}}}"
"""


async def test_a_send_waiting_through_a_deploy_is_checked_against_the_tightened_limits(
    settings, worker_factory, tmp_path, w3
):
    payout = await chain.funded_account(w3)
    loose, tight = tmp_path / "loose.yaml", tmp_path / "tight.yaml"
    loose.write_text(MONEY.format(cap="10000 wei", per_tx="1000 wei"))
    tight.write_text(MONEY.format(cap="300 wei", per_tx="500 wei"))
    worker = worker_factory(project_path=loose, env={"PAYOUT_KEY": payout.key.hex()})
    await worker.wait_ready()
    nonce = await w3.eth.get_transaction_count(payout.address)
    to = {name: chain.Account.create().address for name in ("paid", "big", "over", "fits")}

    async def pay(name: str, value: int) -> str:
        rid = await fire(
            settings, loose, "pay", f"manual:pay:{name}", {"to": to[name], "value": value}
        )
        await parked(settings, rid)
        return rid

    async def approve(rid: str) -> dict[str, Any]:
        assert (await call(worker, "POST", f"/api/runs/{rid}/approve", {}))[0] == 200
        return await settled_run(settings, rid)

    paid = await pay("paid", 100)  # under the loose limits, and sent under them
    assert (await approve(paid))["status"] == "succeeded"
    big = await pay("big", 800)  # within max_value_per_tx 1000, not 500
    over = await pay("over", 400)  # within both per-tx limits; 100 + 400 is over a cap of 300

    deployed = cli(settings, "deploy", str(tight))
    assert deployed.returncode == 0, deployed.stderr
    assert "budgets: changed daily" in deployed.stdout, deployed.stdout  # not only workflows
    await running(worker, await newest_deployment(settings))

    run = await approve(big)
    assert run["status"] == "failed"
    error = error_of(run, "pay")
    assert error["kind"] == "permission_denied", error
    assert "exceeds permissions.max_value_per_tx (500 wei)" in error["message"]
    run = await approve(over)
    assert run["status"] == "failed"
    error = error_of(run, "pay")
    assert error["kind"] == "budget_exceeded", error
    assert "cap 300" in error["message"]
    fits = await pay("fits", 100)  # 100 + 100 fits the tight cap: sends still go out
    assert (await approve(fits))["status"] == "succeeded"

    # Nothing of the refused sends was stored, signed or broadcast.
    assert await sends_of(settings, big) == [] and await sends_of(settings, over) == []
    assert await w3.eth.get_transaction_count(payout.address) == nonce + 2
    assert [await w3.eth.get_balance(to[name]) for name in ("paid", "big", "over", "fits")] == [
        100,
        0,
        0,
        100,
    ]


async def test_a_deployment_that_does_not_load_on_a_worker_leaves_it_on_the_one_it_runs(
    settings, worker_factory, tmp_path, sink
):
    assert "RFLOW_TEST_DEPLOY_ONLY" not in os.environ
    stays = logging_workflow("stays", "{ manual: {} }")
    calls = (
        "  calls:\n    trigger: { manual: {} }\n"
        f'    permissions: {{ http_hosts: ["127.0.0.1:{sink.port}"] }}\n    steps:\n'
        f'      - id: call\n        http_call: {{ url: "{sink.url}/calls", method: POST }}\n'
    )
    needs = (
        "  needs:\n    trigger: { manual: {} }\n    steps:\n      - id: note\n"
        '        command: { name: log, args: { message: "%s" } }\n'
    )
    v1 = write(tmp_path / "v1", stays, calls)
    v2 = write(tmp_path / "v2", stays, calls, needs % "${RFLOW_TEST_DEPLOY_ONLY}")
    v3 = write(tmp_path / "v3", stays, calls, needs % "${RFLOW_TEST_DEPLOY_ONLY:-a default}")
    worker = worker_factory(project_path=v1)
    await worker.wait_ready()
    first = await newest_deployment(settings)
    await running(worker, first)
    rid = await fire(settings, v1, "calls", "manual:calls:1", {})
    assert (await settled_run(settings, rid))["status"] == "succeeded"

    # The deploying machine has the variable; the worker has not.
    deployed = cli(settings, "deploy", str(v2), RFLOW_TEST_DEPLOY_ONLY="here")
    assert deployed.returncode == 0, deployed.stderr
    second = await newest_deployment(settings)

    async def failed() -> dict[str, Any] | None:
        return (await deployment_of(worker))["failed"]

    refused = await wait_until(failed, timeout=30, what="the worker to report the failed load")
    assert refused["id"] == second
    assert "environment variable RFLOW_TEST_DEPLOY_ONLY is not set" in refused["error"]
    assert (await deployment_of(worker))["id"] == first
    assert f"deployment {second} does not load on this worker" in worker.log_path.read_text()
    listed = json.loads(cli(settings, "deployments", "--json").stdout)
    (row,) = listed["workers"]
    assert (row["deployment"], row["failed"]) == (first, second)
    assert "RFLOW_TEST_DEPLOY_ONLY" in row["error"]
    shown = cli(settings, "deployments")
    assert f"deployment {second} does not load here" in shown.stdout

    # It keeps running what it ran, and refuses what it does not run with the reason.
    rid = await fire(settings, v1, "stays", "manual:stays:1", {})
    assert (await settled_run(settings, rid))["status"] == "succeeded"
    # But it checks no http call (nor send) against permissions that may be out of date.
    rid = await fire(settings, v1, "calls", "manual:calls:2", {})
    run = await settled_run(settings, rid)
    assert run["status"] == "failed"
    error = error_of(run, "call")
    assert error["kind"] == "permission_denied", error
    assert f"could not load deployment {second}, the newest" in error["message"]
    assert len(sink.keys("/calls")) == 1
    await fire(settings, v3, "needs", "manual:needs:1", {})
    letter = await dead_letter(settings, "manual:needs:1")
    assert letter["reason"] == (
        f"unknown workflow 'needs' (not in deployment {first}, which this worker runs)"
    )

    # A deployment that loads here is taken up, and the failure is no longer reported.
    assert cli(settings, "deploy", str(v3)).returncode == 0
    third = await newest_deployment(settings)
    await running(worker, third)
    assert (await deployment_of(worker))["failed"] is None
    rid = await fire(settings, v3, "needs", "manual:needs:2", {})
    assert (await settled_run(settings, rid))["status"] == "succeeded"
    rid = await fire(settings, v3, "calls", "manual:calls:3", {})
    assert (await settled_run(settings, rid))["status"] == "succeeded"
    assert len(sink.keys("/calls")) == 2


class Clock:
    """A clock the test sets."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def test_a_running_scheduler_fires_the_schedules_of_the_current_deployment(
    settings, tmp_path
):
    every_minute = schedule("* * * * *", "UTC")
    before = load_project(write_project(tmp_path / "a.yaml", {"tick": every_minute}), {})
    after = load_project(write_project(tmp_path / "b.yaml", {"tock": every_minute}), {})
    app = create_app(settings, before)
    clock = Clock(utc(2026, 5, 6, 10, 0, 30))
    service = SchedulerService(app, clock=clock)

    async def produced(count: int) -> list[str]:
        async def enough() -> list[str] | None:
            found = sorted(
                f"{f.record.workflow} {f.record.trigger_key}" for f in await fired(settings)
            )
            return found if len(found) >= count else None

        return await wait_until(enough, timeout=30, what=f"{count} scheduled firings")

    async def handled(workflow: str, at: datetime) -> None:
        scheduler = service.scheduler

        async def seen() -> bool:
            known = scheduler._known.get((workflow, "schedule")) if scheduler else None
            return known is not None and known.wake is not None and known.wake > at

        await wait_until(seen, timeout=30, what=f"the scheduler to handle {workflow} at {at}")

    async with app.rflow.database:
        await service.start()
        try:
            await handled("tick", clock.now)  # first sight: its cursor starts, nothing fires
            clock.now = utc(2026, 5, 6, 10, 1, 5)
            assert await produced(1) == [f"tick {key(utc(2026, 5, 6, 10, 1))}"]

            app.rflow.take(Deployment.of(after, id=2))
            clock.now = utc(2026, 5, 6, 10, 2, 5)
            await handled("tock", clock.now)
            clock.now = utc(2026, 5, 6, 10, 3, 5)
            found = await produced(2)
            # tick fired neither at 10:02 nor at 10:03: its schedule left with the deploy.
            assert found == [
                f"tick {key(utc(2026, 5, 6, 10, 1))}",
                f"tock {key(utc(2026, 5, 6, 10, 3))}",
            ]
            assert set(service.scheduler.workflows) == {"tock"}
        finally:
            await service.stop()
