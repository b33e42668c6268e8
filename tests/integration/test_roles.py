"""Roles on a real worker, Kafka, Postgres and anvil: for every action, an approver's and a
viewer's token are refused (403, or exit 1, naming the action and the principal) and
nothing happens, while the operator's succeeds; through the HTTP API and through the CLI.
Every refusal and every action is a row of the audit trail, and the things acted on say
who asked."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from rflow.authz import ACTIONS
from rflow.engine.keys import run_id
from rflow.storage import schedules as stored_schedules
from tests.integration.roles_world import (
    REFUSED,
    World,
    attempts,
    build,
    controls_of,
    db,
    forbidden,
    letter_of,
    open_wait,
    paused,
    refusals_recorded,
    run_of,
    trail,
)
from tests.integration.test_api import call
from tests.integration.test_runs import settled_run

pytestmark = [pytest.mark.usefixtures("applied_topics", "schema"), pytest.mark.timeout(900)]


@pytest.fixture
async def world(settings, worker_factory, tmp_path):
    async with contextlib.AsyncExitStack() as stack:
        yield await build(settings, worker_factory, tmp_path, stack)


async def as_(world: World, principal: str, method: str, path: str, body=None):
    return await call(world.worker, method, path, body, token=world.token(principal))


async def refused_everywhere(world: World, action: str, method: str, path: str, body=None):
    """``method path`` as the approver and the viewer: 403 naming the action and each."""
    for who in REFUSED:
        status, answer = await as_(world, who, method, path, body)
        assert status == 403, (who, path, answer)
        assert forbidden(answer["error"], who, action), answer
        assert (answer["action"], answer["principal"]) == (action, who)


async def schedule_enabled(world: World) -> bool:
    rows = await db(world.settings, stored_schedules.disabled)
    return not any(row.workflow == "nightly" for row in rows)


async def test_through_the_api_each_role_does_exactly_what_it_may(world):
    s = world.settings

    # runs.run: no run of hello is started by a refused request.
    await refused_everywhere(world, "runs.run", "POST", "/api/workflows/hello/runs", {})
    assert (await as_(world, "operator", "GET", "/api/runs?workflow=hello"))[1]["runs"] == []
    status, started = await as_(world, "operator", "POST", "/api/workflows/hello/runs", {})
    assert status == 202, started
    [hello] = started["run_ids"]
    assert (await settled_run(s, hello))["status"] == "succeeded"

    # runs.retry: the failed run is not retried.
    failed = world.checks[0]
    await refused_everywhere(world, "runs.retry", "POST", f"/api/runs/{failed}/retry", {})
    assert (await run_of(s, failed))["retried_as"] is None
    status, retried = await as_(world, "operator", "POST", f"/api/runs/{failed}/retry", {})
    assert status == 200 and not retried["already"], retried
    assert (await run_of(s, failed))["retried_by"] == "operator"

    # runs.resend: a principal that may retry, but not send again, sends nothing.
    resend = {"from": "pay", "yes": True}
    path = f"/api/runs/{world.resend}/retry"
    await refused_everywhere(world, "runs.retry", "POST", path, resend)
    status, answer = await as_(world, "retrier", "POST", path, resend)
    assert (status, answer["action"], answer["principal"]) == (403, "runs.resend", "retrier")
    assert forbidden(answer["error"], "retrier", "runs.resend")
    assert (await run_of(s, world.resend))["retried_as"] is None
    status, retried = await as_(world, "operator", "POST", path, resend)
    assert status == 200 and [r["path"] for r in retried["resends"]] == ["pay"], retried

    # runs.cancel: the waiting run keeps waiting.
    waiting = world.gated[0]
    await refused_everywhere(world, "runs.cancel", "POST", f"/api/runs/{waiting}/cancel", {})
    status, cancel = await as_(world, "operator", "POST", f"/api/runs/{waiting}/cancel", {})
    assert status == 200 and cancel["cancel_requested"] == "cancelled by operator"
    cancelled = await settled_run(s, waiting)
    assert (
        cancelled["status"] == "cancelled" and "cancelled by operator" in cancelled["error_message"]
    )

    # approvals.answer: the viewer may not, the approver and the operator may.
    for rid, who in ((world.gated[1], "approver"), (world.gated[2], "operator")):
        status, answer = await as_(world, "viewer", "POST", f"/api/runs/{rid}/approve", {})
        assert status == 403 and forbidden(answer["error"], "viewer", "approvals.answer")
        assert await open_wait(s, rid) is not None
        status, answer = await as_(world, who, "POST", f"/api/runs/{rid}/approve", {})
        assert (status, answer["answer"]["by"]) == (200, who), answer
        assert (await settled_run(s, rid))["status"] == "succeeded"

    # sends.speedup and sends.cancel: the pending sends sign nothing new.
    first, second = world.sends[0], world.sends[1]
    await refused_everywhere(
        world, "sends.speedup", "POST", f"/api/sends/{first.send_id}/speedup", {}
    )
    await refused_everywhere(
        world, "sends.cancel", "POST", f"/api/sends/{second.send_id}/cancel", {}
    )
    for send in (first, second):
        assert await attempts(s, send.send_key) == 1 and await controls_of(s, send.send_key) == []
    status, sped = await as_(world, "operator", "POST", f"/api/sends/{first.send_id}/speedup", {})
    assert status == 200, sped
    assert await attempts(s, first.send_key) == 2
    [asked] = await controls_of(s, first.send_key)
    assert (asked["action"], asked["requested_by"]) == ("speedup", "operator")
    status, cancel = await as_(world, "operator", "POST", f"/api/sends/{second.send_id}/cancel", {})
    assert status == 200, cancel
    [asked] = await controls_of(s, second.send_key)
    assert (asked["action"], asked["requested_by"]) == ("cancel", "operator")

    # workflows.pause, both ways.
    await refused_everywhere(world, "workflows.pause", "POST", "/api/workflows/hello/pause", {})
    assert "hello" not in await paused(s)
    status, _ = await as_(world, "operator", "POST", "/api/workflows/hello/pause", {})
    assert status == 200 and (await paused(s))["hello"][0] == "operator"
    await refused_everywhere(world, "workflows.pause", "POST", "/api/workflows/hello/resume", {})
    assert "hello" in await paused(s)
    assert (await as_(world, "operator", "POST", "/api/workflows/hello/resume", {}))[0] == 200

    # schedules.toggle, both ways.
    schedule = "/api/schedules/nightly/schedule"
    await refused_everywhere(world, "schedules.toggle", "POST", f"{schedule}/disable", {})
    assert await schedule_enabled(world)
    status, off = await as_(world, "operator", "POST", f"{schedule}/disable", {})
    assert status == 200, off
    assert not await schedule_enabled(world)
    await refused_everywhere(world, "schedules.toggle", "POST", f"{schedule}/enable", {})
    assert (await as_(world, "operator", "POST", f"{schedule}/enable", {}))[0] == 200

    # Reads: every role from viewer up reads; the scrape credential reads /metrics only.
    for who in ("viewer", "approver", "operator"):
        for path in ("/api/runs", "/api/approvals", "/api/audit", "/api/sends", "/api/workflows"):
            assert (await as_(world, who, "GET", path))[0] == 200, (who, path)
    status, answer = await as_(world, "scraper", "GET", "/api/runs")
    assert status == 403 and forbidden(answer["error"], "scraper", "runs.read")
    assert (await as_(world, "scraper", "GET", "/api/audit"))[0] == 403

    def scrape(token: str) -> int:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(world.worker.url + "/metrics")
        request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert await asyncio.to_thread(scrape, world.token("scraper")) == 200
    assert await asyncio.to_thread(scrape, world.token("viewer")) == 200

    # The trail holds every refusal and every action, through the api.
    tried = {"runs.run", "runs.retry", "runs.cancel", "sends.speedup", "sends.cancel",
             "workflows.pause", "schedules.toggle"}  # fmt: skip
    expected = {(who, action) for who in REFUSED for action in tried}
    expected |= {
        ("viewer", "approvals.answer"),
        ("retrier", "runs.resend"),
        ("scraper", "runs.read"),
    }
    assert await refusals_recorded(s, "api", expected) == expected
    done = {(r["action"], r["outcome"]) for r in await trail(s, principal="operator")}
    # A retry that sends again is one row: runs.retry, with its from and yes.
    assert {(a, "done") for a in tried | {"approvals.answer"}} - done == set()
    resent_ok = [r for r in await trail(s, action="runs.retry") if r["target_id"] == world.resend]
    assert [
        (r["principal"], r["outcome"], r["arguments"])
        for r in resent_ok
        if r["principal"] == "operator"
    ] == [("operator", "done", {"from": "pay", "yes": True})]
    [resent] = [r for r in await trail(s, action="runs.resend") if r["outcome"] == "refused"]
    assert (resent["principal"], resent["role"], resent["target_id"]) == (
        "retrier",
        "approver",
        world.resend,
    )
    assert resent["arguments"] == {"from": "pay"}


async def test_through_the_cli_each_role_does_exactly_what_it_may(world):
    s = world.settings

    async def cli(who: str, *args: str):
        return await asyncio.to_thread(world.cli, who, *args)

    async def refused(action: str, *args: str) -> None:
        for who in REFUSED:
            done = await cli(who, *args)
            assert done.returncode == 1, (who, args, done.stdout, done.stderr)
            assert forbidden(done.stderr, who, action), done.stderr

    # runs.run: rflow run and rflow trigger start nothing.
    await refused("runs.run", "run", "hello", "--key", "k-refused", "--project", str(world.project))
    await refused(
        "runs.run", "trigger", "hello", "--key", "t-refused", "--project", str(world.project)
    )
    for key in ("manual:hello:k-refused", "t-refused"):
        assert await run_of(s, run_id("hello", key)) is None
    done = await cli("operator", "run", "hello", "--key", "k-ok", "--project", str(world.project))
    assert done.returncode == 0, done.stderr

    # runs.retry and runs.resend.
    failed = world.checks[1]
    await refused("runs.retry", "runs", "retry", failed)
    assert (await run_of(s, failed))["retried_as"] is None
    done = await cli("retrier", "runs", "retry", world.resend, "--from", "pay", "--yes")
    assert done.returncode == 1 and forbidden(done.stderr, "retrier", "runs.resend"), done.stderr
    assert (await run_of(s, world.resend))["retried_as"] is None
    done = await cli("operator", "runs", "retry", failed)
    assert done.returncode == 0, done.stderr
    run = (await cli("operator", "runs", "show", failed)).stdout
    assert "by operator" in run  # retried   as r... by operator

    # runs.cancel.
    waiting = world.gated[3]
    await refused("runs.cancel", "runs", "cancel", waiting)
    assert await open_wait(s, waiting) is not None
    assert (await cli("operator", "runs", "cancel", waiting, "--reason", "tidy")).returncode == 0
    cancelled = await settled_run(s, waiting)
    assert cancelled["error_message"].endswith("cancelled by operator: tidy")

    # approvals.answer: the viewer may not; the approver may.
    rid = world.gated[4]
    done = await cli("viewer", "approvals", "approve", rid)
    assert done.returncode == 1 and forbidden(done.stderr, "viewer", "approvals.answer")
    assert await open_wait(s, rid) is not None
    done = await cli("approver", "approvals", "approve", rid)
    assert done.returncode == 0 and "approved as approver" in done.stdout, done.stderr
    done = await cli("operator", "runs", "reject", world.gated[5], "--text", "no")
    assert done.returncode == 0, done.stderr

    # sends.speedup and sends.cancel.
    third, fourth = world.sends[2], world.sends[3]
    await refused("sends.speedup", "sends", "speedup", third.send_id)
    await refused("sends.cancel", "sends", "cancel", fourth.send_id)
    assert await controls_of(s, third.send_key) == [] == await controls_of(s, fourth.send_key)
    assert (await cli("operator", "sends", "speedup", third.send_id)).returncode == 0
    assert (await cli("operator", "sends", "cancel", fourth.send_id)).returncode == 0
    assert [c["requested_by"] for c in await controls_of(s, fourth.send_key)] == ["operator"]

    # workflows.pause and schedules.toggle.
    await refused("workflows.pause", "workflow", "pause", "hello")
    assert "hello" not in await paused(s)
    assert (await cli("operator", "workflow", "pause", "hello")).returncode == 0
    await refused("workflows.pause", "workflow", "resume", "hello")
    assert (await cli("operator", "workflow", "resume", "hello")).returncode == 0
    await refused("schedules.toggle", "schedules", "disable", "nightly")
    assert await schedule_enabled(world)
    assert (await cli("operator", "schedules", "disable", "nightly")).returncode == 0
    await refused("schedules.toggle", "schedules", "enable", "nightly")
    assert (await cli("operator", "schedules", "enable", "nightly")).returncode == 0

    # dead_letters.replay: the letter stays unreplayed until the operator replays it.
    letter = str(world.letter)
    await refused("dead_letters.replay", "dead-letters", "replay", letter)
    assert (await letter_of(s, "late"))["replayed_at"] is None
    done = await cli("operator", "dead-letters", "replay", letter)
    assert done.returncode == 0, done.stderr
    assert (await letter_of(s, "late"))["replayed_at"] is not None

    # deploy: nothing is published by a refused deploy.
    from rflow.storage import deployments

    before = await db(s, deployments.latest_id)
    await refused("deploy", "deploy", str(world.project))
    await refused("deploy.rollback", "deploy", "--rollback", str(world.project))
    assert await db(s, deployments.latest_id) == before
    assert (await cli("operator", "deploy", str(world.project))).returncode == 0

    # runs.signal and backtests.run: no signal is kept, no backtest is reported.
    await refused("runs.signal", "runs", "signal", world.gated[0], "go")
    await refused("backtests.run", "backtest", str(world.project.parent))
    assert (await cli("operator", "runs", "list")).returncode == 0

    # Reads, and the audit trail itself.
    for who in ("viewer", "approver"):
        for args in (("runs", "list"), ("approvals", "ls"), ("sends", "ls"), ("audit", "ls")):
            done = await cli(who, *args)
            assert done.returncode == 0, (who, args, done.stderr)
    done = await cli("scraper", "runs", "list")
    assert done.returncode == 1 and forbidden(done.stderr, "scraper", "runs.read")

    tried = {a for a, spec in ACTIONS.items() if spec.role == "operator"} - {"runs.resend"}
    expected = {(who, action) for who in REFUSED for action in tried}
    expected |= {
        ("viewer", "approvals.answer"),
        ("retrier", "runs.resend"),
        ("scraper", "runs.read"),
    }
    assert await refusals_recorded(s, "cli", expected) == expected
    listed = await cli(
        "operator", "audit", "ls", "--principal", "viewer", "--outcome", "refused", "--json"
    )
    rows = json.loads(listed.stdout)
    assert {r["action"] for r in rows if r["via"] == "cli"} >= tried | {"approvals.answer"}
    assert all(r["principal"] == "viewer" and r["role"] == "viewer" for r in rows)
    family = json.loads((await cli("viewer", "audit", "ls", "--action", "runs", "--json")).stdout)
    assert family and all(r["action"].startswith("runs.") for r in family)
