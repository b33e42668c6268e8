"""Nothing accepted is dropped, and the backlog is visible: held firings of a paused
workflow start in order on resume; every admitted firing has a row from the moment it is
admitted (pending, with why); a parked run is waiting; commands that did nothing say so."""

from __future__ import annotations

import json

import pytest

from tests.integration.harness import wait_until
from tests.integration.test_api import call
from tests.integration.test_operations import rflow
from tests.integration.test_runs import fire, run_row, run_status, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
workflows:
  greet:
    trigger: {{ manual: {{ inputs: [n] }} }}
    concurrency: {{ group: "all" }}
    steps:
      - id: hello
        http_call: {{ url: "{url}/hello", method: POST, body: {{ n: "${{{{ inputs.n }}}}" }} }}
  skipper:
    paused_firings: skip
    trigger: {{ manual: {{}} }}
    steps:
      - id: hello
        http_call: {{ url: "{url}/skipper", method: POST, body: {{}} }}
  lane:
    trigger: {{ manual: {{ inputs: [who] }} }}
    concurrency: {{ group: "${{{{ inputs.who }}}}" }}
    steps:
      - id: nap
        delay: {{ duration: 1h }}
  limited:
    trigger: {{ manual: {{}} }}
    rate_limit: {{ max: 1, per: 1h }}
    steps:
      - id: hello
        http_call: {{ url: "{url}/limited", method: POST, body: {{}} }}
"""


@pytest.fixture
async def worker(worker_factory, tmp_path, sink):
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT.format(url=sink.url))
    worker = worker_factory(project_path=path)
    worker.project_path = path
    await worker.wait_ready()
    return worker


def run_cli(settings, worker, *args: str):
    env = settings.model_copy(update={"project_path": worker.project_path})
    return rflow(env, *args)


async def test_a_paused_workflows_firings_are_held_and_start_in_order_on_resume(
    settings, worker, sink
):
    paused = run_cli(settings, worker, "workflow", "pause", "greet", "--reason", "audit")
    assert paused.returncode == 0, paused.stderr

    probes = []

    async def held_by_the_worker() -> bool:
        # Workers read pauses every second or so: the API says held once this one has.
        status, body = await call(worker, "POST", "/api/workflows/greet/runs", {"n": -1})
        assert status == 202, body
        probes.append(body["run_ids"][0])
        return body["status"] == "held"

    await wait_until(held_by_the_worker, timeout=30, what="the worker to see the pause")
    fired = []
    for n in range(5):
        result = run_cli(settings, worker, "run", "greet", "--input", f"n={n}", "--json")
        assert result.returncode == 0, result.stderr
        answer = json.loads(result.stdout)
        assert answer["status"] == "held" and "paused by operator: audit" in answer["held"]
        fired.append(answer["run_ids"][0])
    text = run_cli(settings, worker, "run", "greet", "--input", "n=5")
    assert "held: workflow greet is paused by operator: audit" in text.stdout, text
    for rid in fired:
        row = await run_status(settings, rid, "pending")
        assert row["pending_reason"] == "paused" and "resumed" in row["waiting_for"]
    listed = run_cli(settings, worker, "runs", "list", "-w", "greet", "-s", "pending", "--json")
    assert set(fired) <= {r["run_id"] for r in json.loads(listed.stdout)}
    assert not [r for r in sink.requests if r.path == "/hello" and r.body["n"] != -1]

    resumed = run_cli(settings, worker, "workflow", "resume", "greet")
    assert resumed.returncode == 0, resumed.stderr
    after = run_cli(settings, worker, "run", "greet", "--input", "n=6", "--json")
    late = json.loads(after.stdout)["run_ids"][0]
    for rid in [*probes, *fired, late]:
        assert (await settled_run(settings, rid))["status"] == "succeeded"
    order = [str(r.body["n"]) for r in sink.requests if r.path == "/hello"]
    # Every firing once; those held start in the order they arrived, before a later one.
    assert order == ["-1"] * len(probes) + ["0", "1", "2", "3", "4", "5", "6"], order


async def test_paused_firings_skip_records_a_skipped_run(settings, worker, sink):
    assert run_cli(settings, worker, "workflow", "pause", "skipper").returncode == 0

    async def skipped():
        result = run_cli(settings, worker, "run", "skipper", "--json")
        rid = json.loads(result.stdout)["run_ids"][0]
        row = await wait_until(lambda: run_row(settings, rid), what=f"the row of {rid}")
        return row if row["status"] == "skipped" else None

    row = await wait_until(skipped, timeout=30, what="a firing of the paused workflow skipped")
    assert "workflow paused" in row["error_message"]
    assert not [r for r in sink.requests if r.path == "/skipper"]


async def test_a_run_behind_its_lane_is_pending_and_a_parked_run_waiting(settings, worker):
    first = await fire(settings, worker.project_path, "lane", "manual:lane:1", {"who": "ann"})
    second = await fire(settings, worker.project_path, "lane", "manual:lane:2", {"who": "ann"})
    parked = await run_status(settings, first, "waiting")
    assert parked["waiting_for"].startswith("a delay at step nap until ")
    assert parked["source"] == "manual"
    behind = await run_status(settings, second, "pending")
    assert behind["pending_reason"] == "lane"
    assert behind["waiting_for"] == f"run {first} of concurrency group 'ann' to settle"
    shown = run_cli(settings, worker, "runs", "show", second)
    assert shown.returncode == 0 and "lane: run " in shown.stdout, shown.stdout
    listed = run_cli(settings, worker, "runs", "list", "-s", "waiting", "--json")
    assert [r["run_id"] for r in json.loads(listed.stdout)] == [first]
    by_source = run_cli(settings, worker, "runs", "list", "--source", "webhook", "--json")
    assert json.loads(by_source.stdout) == []

    # The metrics count them.
    async def counted():
        text = await worker_metrics(worker)
        return (
            'rflow_runs_backlog{reason="lane",status="pending",workflow="lane"} 1.0' in text
            and 'rflow_runs_backlog{reason="",status="waiting",workflow="lane"} 1.0' in text
        )

    await wait_until(counted, timeout=30, what="the backlog in the metrics")

    # The first leaves the lane (cancelled): the second starts, and parks in its turn.
    assert run_cli(settings, worker, "runs", "cancel", first).returncode == 0
    assert (await settled_run(settings, first))["status"] == "cancelled"
    started = await run_status(settings, second, "waiting")
    assert started["started_at"] is not None and started["pending_reason"] is None


async def worker_metrics(worker) -> str:
    import urllib.request

    def fetch() -> str:
        request = urllib.request.Request(worker.url + "/metrics", headers=worker.auth)
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.read().decode()

    import asyncio

    return await asyncio.to_thread(fetch)


async def test_a_start_deferred_by_its_rate_limit_is_pending(settings, worker, sink):
    first = await fire(settings, worker.project_path, "limited", "manual:limited:1", {})
    assert (await settled_run(settings, first))["status"] == "succeeded"
    second = await fire(settings, worker.project_path, "limited", "manual:limited:2", {})
    row = await run_status(settings, second, "pending")
    assert row["pending_reason"] == "rate_limit"
    assert row["waiting_for"] == "room in the rate limit (1 starts per 1h)"
    assert len([r for r in sink.requests if r.path == "/limited"]) == 1


async def test_commands_that_name_nothing_fail_with_the_reason(settings, worker):
    cases = [
        (("workflow", "pause", "nosuch"), "no workflow 'nosuch' is deployed"),
        (("workflow", "resume", "nosuch"), "no workflow 'nosuch' is deployed"),
        (("workflow", "resume", "greet"), "was not paused"),
        (("runs", "list", "-s", "bogus"), "unknown status 'bogus'"),
        (("runs", "list", "-w", "nosuch"), "no workflow 'nosuch'"),
        (("runs", "show", "rnope"), "no run rnope"),
        (("runs", "cancel", "rnope"), "no run rnope"),
        (("runs", "retry", "rnope"), "no run rnope"),
        (("approvals", "ls", "--workflow", "nosuch"), "no workflow 'nosuch'"),
        (("sends", "ls", "--relayer", "nosuch"), "no relayer 'nosuch'"),
        (("sends", "ls", "--network", "nosuch"), "no network 'nosuch'"),
    ]
    for args, reason in cases:
        result = run_cli(settings, worker, *args)
        assert result.returncode != 0, (args, result.stdout)
        assert reason in result.stderr, (args, result.stderr)
    # Without a project to check it against, an unknown workflow is refused too.
    bare = rflow(settings, "run", "nosuch", "--input", "n=1")
    assert bare.returncode != 0 and "no workflow 'nosuch' is deployed" in bare.stderr, bare
    status, body = await call(worker, "POST", "/api/workflows/greet/resume")
    assert (status, body["error"]) == (409, "workflow greet was not paused: nothing to resume")
    status, body = await call(worker, "GET", "/api/runs?status=bogus")
    assert status == 400 and "unknown status 'bogus'" in body["error"]
    status, body = await call(worker, "GET", "/api/runs?source=cron")
    assert status == 400 and "unknown source 'cron'" in body["error"]
    status, body = await call(worker, "GET", "/api/runs?workflow=nosuch")
    assert status == 404 and "no workflow 'nosuch'" in body["error"]
    status, body = await call(worker, "GET", "/api/runs?workflow=greet")
    assert status == 200  # a deployed workflow without runs is no error
