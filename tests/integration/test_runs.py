"""Workflows end to end on the real stack: trigger in, steps carried out, read model out."""

from __future__ import annotations

import pytest

from rflow import storage
from rflow.codecs import RunEvent, decode
from rflow.engine import StepResult
from rflow.engine.keys import run_id
from rflow.lang import load_project
from rflow.settings import Settings
from rflow.storage import runs
from rflow.streams.producer import produce_trigger
from rflow.triggering import trigger_record
from tests.integration.harness import topic_messages, wait_until

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")


def write_project(tmp_path, sink_url: str, steps: str, name: str = "flow") -> object:
    path = tmp_path / "project.yaml"
    path.write_text(
        f"""
channels:
  ops: {{ type: log }}
  hook: {{ type: webhook, url: "{sink_url}/notify" }}
workflows:
  {name}:
    trigger: {{ manual: {{}} }}
{steps}
"""
    )
    return path


async def fire(settings: Settings, project_path, workflow: str, key: str, payload: dict) -> str:
    project = load_project(project_path, {})
    record = trigger_record(
        workflow,
        project.workflows[workflow],
        source="manual",
        trigger_key=key,
        payload=payload,
        received_at=__import__("datetime").datetime.now(__import__("datetime").UTC),
    )
    await produce_trigger(settings, record)
    return run_id(workflow, key)


async def run_row(settings: Settings, rid: str) -> dict | None:
    """Run ``rid`` as the read model has it now (``None`` before it has a row)."""
    conn = await storage.connect(settings)
    async with conn:
        return await runs.get_run(conn, rid)


async def run_status(settings: Settings, rid: str, status: str, timeout: float = 60) -> dict:
    """Run ``rid``'s row once it has ``status``."""

    async def reached():
        run = await run_row(settings, rid)
        return run if run is not None and run["status"] == status else None

    return await wait_until(reached, timeout=timeout, what=f"run {rid} to be {status}")


async def settled_run(settings: Settings, rid: str, timeout: float = 60):
    async def settled():
        conn = await storage.connect(settings)
        async with conn:
            run = await runs.get_run(conn, rid)
        return run if run and run["settled_at"] is not None else None

    return await wait_until(settled, timeout=timeout, what=f"run {rid} to settle in the read model")


THREE_STEPS = """
    steps:
      - id: call
        http_call:
          url: "{url}/call"
          method: POST
          body: {{ amount: "${{{{ trigger.amount }}}}" }}
      - id: remember
        state_set: {{ last_amount: "${{{{ steps.call.output.json.echo.amount }}}}" }}
      - id: route
        choose:
          branches:
            - when: {{ value: "${{{{ trigger.amount }}}}", op: greater_than, to: 100 }}
              goto: big
          default: continue
      - id: small
        notify: {{ channel: hook, message: "small ${{{{ trigger.amount }}}}" }}
      - id: big
        notify: {{ channel: ops, message: "done ${{{{ state.last_amount }}}}" }}
"""


async def test_a_manual_run_goes_end_to_end(settings, worker_factory, tmp_path, sink):
    project = write_project(tmp_path, sink.url, THREE_STEPS.format(url=sink.url))
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    rid = await fire(settings, project, "flow", "manual:flow:1", {"amount": 7})
    run = await settled_run(settings, rid)
    assert run["status"] == "succeeded", run
    steps = {s["path"]: s for s in run["steps"]}
    assert steps["call"]["output"] is not None, steps["call"]
    assert steps["call"]["output"]["json"]["echo"] == {"amount": 7}, steps["call"]
    assert steps["remember"]["output"] == {"state": {"last_amount": 7}}
    assert steps["route"]["output"] == {"branch": "default", "goto": None}
    assert steps["small"]["status"] == "succeeded"
    assert sink.keys("/call") == {"flow:manual:flow:1:call": 1}
    assert [r.body["message"] for r in sink.requests if r.path == "/notify"] == ["small 7"]


async def test_a_workers_own_results_are_decided_where_the_actions_ran(
    settings, worker_factory, tmp_path, sink
):
    project = write_project(tmp_path, sink.url, THREE_STEPS.format(url=sink.url))
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    rids = [
        await fire(settings, project, "flow", f"manual:flow:{n}", {"amount": n}) for n in (7, 700)
    ]
    for rid in rids:
        run = await settled_run(settings, rid)
        assert run["status"] == "succeeded", run
    # The one worker owns every partition: no action's result went round the runs topic
    # (the starts did: a run that reads durable state is started once it is loaded).
    events = [decode(m.value) for m in await topic_messages(settings, "rflow.runs")]
    assert all(isinstance(e, RunEvent) for e in events), events
    assert [type(e.event).__name__ for e in events] == ["Start", "Start"]
    assert not any(isinstance(e.event, StepResult) for e in events)


async def test_foreach_with_max_parallel_4_over_50_items(settings, worker_factory, tmp_path, sink):
    sink.delay = 0.05
    steps = f"""
    steps:
      - id: pay
        foreach: "${{{{ trigger.items }}}}"
        max_parallel: 4
        http_call: {{ url: "{sink.url}/pay", method: POST, body: {{ n: "${{{{ item }}}}" }} }}
"""
    project = write_project(tmp_path, sink.url, steps)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    rid = await fire(settings, project, "flow", "manual:flow:fan", {"items": list(range(50))})
    run = await settled_run(settings, rid, timeout=120)
    assert run["status"] == "succeeded"
    parent = next(s for s in run["steps"] if s["path"] == "pay")
    assert [o["json"]["echo"]["n"] for o in parent["output"]] == list(range(50))
    keys = sink.keys("/pay")
    assert len(keys) == 50 and set(keys.values()) == {1}
    assert sink.peak == 4


async def test_a_failed_run_is_dead_lettered_with_its_journal(
    settings, worker_factory, tmp_path, sink
):
    steps = """
    steps:
      - id: check
        command: { name: assert, args: { that: "${{ trigger.ok }}", message: "not ok" } }
"""
    project = write_project(tmp_path, sink.url, steps)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    rid = await fire(settings, project, "flow", "manual:flow:bad", {"ok": False})
    run = await settled_run(settings, rid)
    assert run["status"] == "failed"
    assert run["error_kind"] == "assert_failed"
    assert run["dead"]["journal"]["steps"]["check"]["error"]["message"] == "not ok"


async def test_a_step_without_a_result_in_time_fails_with_kind_timeout(
    settings, worker_factory, tmp_path, sink
):
    sink.held.add("/slow")
    steps = f"""
    steps:
      - id: slow
        timeout: 1s
        http_call: {{ url: "{sink.url}/slow", method: POST }}
"""
    project = write_project(tmp_path, sink.url, steps)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    rid = await fire(settings, project, "flow", "manual:flow:slow", {})
    try:
        run = await settled_run(settings, rid)
    finally:
        sink.release()
    assert (run["status"], run["error_kind"]) == ("failed", "timeout")
    [step] = run["steps"]
    assert (step["error_kind"], step["error_message"]) == ("timeout", "no result within 1s")
    assert sink.keys("/slow") == {"flow:manual:flow:slow:slow": 1}


async def test_an_http_call_gives_up_after_its_own_timeout(
    settings, worker_factory, tmp_path, sink
):
    sink.held.add("/slow")
    steps = f"""
    steps:
      - id: slow
        http_call: {{ url: "{sink.url}/slow", method: POST, timeout: 500ms }}
"""
    project = write_project(tmp_path, sink.url, steps)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    rid = await fire(settings, project, "flow", "manual:flow:slow-call", {})
    try:
        run = await settled_run(settings, rid, timeout=20)
    finally:
        sink.release()
    [step] = run["steps"]
    assert (step["error_kind"], step["error_message"]) == (
        "timeout",
        f"no answer from {sink.url}/slow within 500ms",
    )


async def test_a_killed_worker_successor_finishes_every_run_without_rerunning_steps(
    settings, worker_factory, tmp_path, sink
):
    sink.held.add("/b")
    steps = f"""
    steps:
      - id: a
        http_call: {{ url: "{sink.url}/a", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
      - id: b
        http_call: {{ url: "{sink.url}/b", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
      - id: c
        http_call: {{ url: "{sink.url}/c", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
"""
    project = write_project(tmp_path, sink.url, steps)
    first = worker_factory(project_path=project)
    await first.wait_ready()
    rids = [await fire(settings, project, "flow", f"manual:flow:k{n}", {"n": n}) for n in range(5)]

    async def all_at_b():
        return len(sink.keys("/b")) == 5

    await wait_until(all_at_b, timeout=60, what="every run to reach step b")
    first.kill()
    sink.release()
    second = worker_factory(project_path=project, data_dir=settings.data_dir.parent / "second")
    await second.wait_ready()
    for rid in rids:
        run = await settled_run(settings, rid, timeout=90)
        assert run["status"] == "succeeded", run
        assert {s["path"]: s["attempt"] for s in run["steps"]} == {"a": 1, "b": 1, "c": 1}
    # Every step has its own key; a step re-run after the crash reuses its key, so the
    # receiver can tell. Steps settled before the crash never run again... except where
    # the crash lost the record of their settlement, which again reuses the same key.
    for step in ("a", "b", "c"):
        keys = sink.keys(f"/{step}")
        assert set(keys) == {f"flow:manual:flow:k{n}:{step}" for n in range(5)}
    assert all(count == 1 for count in sink.keys("/c").values())


async def test_a_command_runs_without_a_shell_with_json_in_and_out(
    settings, worker_factory, tmp_path, sink, monkeypatch
):
    import sys

    script = tmp_path / "double.py"
    script.write_text(
        "import json, os, sys\n"
        "data = json.load(sys.stdin)\n"
        "print(json.dumps({'double': data['n'] * 2, 'key': os.environ['RFLOW_IDEMPOTENCY_KEY'],\n"
        "                  'allowed': os.environ.get('CMD_ALLOWED'), 'hidden': os.environ.get('CMD_HIDDEN'),\n"
        "                  'argv': sys.argv[1:]}))\n"
    )
    monkeypatch.setenv("CMD_ALLOWED", "yes")
    monkeypatch.setenv("CMD_HIDDEN", "no")
    path = tmp_path / "project.yaml"
    path.write_text(
        f"""
commands:
  double:
    path: {sys.executable}
    args: ["{script}", "; rm -rf /"]
    env: [CMD_ALLOWED]
    timeout: 20s
workflows:
  flow:
    trigger: {{ manual: {{}} }}
    steps:
      - id: run
        command: {{ name: double, args: {{ n: "${{{{ trigger.n }}}}" }} }}
"""
    )
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    rid = await fire(settings, path, "flow", "manual:flow:cmd", {"n": 21})
    run = await settled_run(settings, rid)
    assert run["status"] == "succeeded", (run["error_kind"], run["error_message"])
    [step] = run["steps"]
    assert step["output"] == {
        "double": 42,
        "key": "flow:manual:flow:cmd:run",
        # The command saw "yes"; the journal shows its placeholder (a value passed to a
        # command is a secret, short as it is).
        "allowed": "${CMD_ALLOWED}",
        "hidden": None,
        "argv": ["; rm -rf /"],  # one literal argument: no shell ever sees it
    }


async def test_a_matrix_runs_one_run_per_combination_within_max_parallel(
    settings, worker_factory, tmp_path, sink
):
    sink.delay = 0.2
    path = tmp_path / "project.yaml"
    path.write_text(
        f"""
workflows:
  flow:
    strategy:
      matrix: {{ n: [1, 2, 3, 4] }}
      max_parallel: 2
    trigger: {{ manual: {{}} }}
    steps:
      - id: call
        http_call: {{ url: "{sink.url}/m", method: POST, body: {{ n: "${{{{ matrix.n }}}}" }} }}
"""
    )
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    await fire(settings, path, "flow", "manual:flow:m", {})
    rids = [run_id("flow", "manual:flow:m", {"n": n}) for n in (1, 2, 3, 4)]
    for rid in rids:
        assert (await settled_run(settings, rid))["status"] == "succeeded"
    assert set(sink.keys("/m")) == {f"flow:manual:flow:m:matrix:n={n}:call" for n in (1, 2, 3, 4)}
    assert sink.peak == 2


@pytest.mark.parametrize("fail_fast", [True, False])
async def test_fail_fast_stops_the_remaining_combinations(
    settings, worker_factory, tmp_path, sink, fail_fast
):
    path = tmp_path / "project.yaml"
    path.write_text(
        f"""
workflows:
  flow:
    strategy:
      matrix: {{ n: [1, 2, 3] }}
      max_parallel: 1
      fail_fast: {str(fail_fast).lower()}
    trigger: {{ manual: {{}} }}
    steps:
      - id: check
        command: {{ name: assert, args: {{ that: "${{{{ matrix.n != 1 }}}}", message: "one fails" }} }}
"""
    )
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    await fire(settings, path, "flow", "manual:flow:ff", {})
    first = await settled_run(settings, run_id("flow", "manual:flow:ff", {"n": 1}))
    assert first["status"] == "failed"
    if not fail_fast:
        for n in (2, 3):
            assert (await settled_run(settings, run_id("flow", "manual:flow:ff", {"n": n})))[
                "status"
            ] == "succeeded"
        return

    # Once every combination has settled or is recorded as never started, the firing keeps
    # only what de-duplication needs: its runs.
    async def firing():
        status, body = await worker.get("/rflow/triggers/flow:manual:flow:ff/")
        return body if status == 200 and "matrix" not in body else None

    entry = await wait_until(firing, timeout=30, what="the firing's matrix to be over")
    assert entry["runs"] == [run_id("flow", "manual:flow:ff", {"n": n}) for n in (1, 2, 3)]
    conn = await storage.connect(settings)
    async with conn:
        listed = {r["run_id"]: r for r in await runs.list_runs(conn, workflow="flow")}
    # The two that never started are recorded so, with why (they were pending until then).
    assert {rid: r["status"] for rid, r in listed.items()} == {
        run_id("flow", "manual:flow:ff", {"n": 1}): "failed",
        run_id("flow", "manual:flow:ff", {"n": 2}): "cancelled",
        run_id("flow", "manual:flow:ff", {"n": 3}): "cancelled",
    }
    for n in (2, 3):
        never = listed[run_id("flow", "manual:flow:ff", {"n": n})]
        assert never["error_message"].startswith("fail_fast: ") and never["started_at"] is None


FAILING = """
workflows:
  lettered:
    trigger: { manual: {} }
    steps:
      - id: check
        command: { name: fail, args: { message: "no" } }
  dropped:
    trigger: { manual: {} }
    on_failure: drop
    steps:
      - id: check
        command: { name: fail, args: { message: "no" } }
"""


async def test_runs_list_failed_is_the_dead_letter_queue(settings, worker_factory, tmp_path):
    import json

    from tests.integration.test_api import call
    from tests.integration.test_operations import rflow

    path = tmp_path / "project.yaml"
    path.write_text(FAILING)
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    dead = await fire(settings, path, "lettered", "manual:lettered:1", {})
    dropped = await fire(settings, path, "dropped", "manual:dropped:1", {})
    assert (await settled_run(settings, dead))["status"] == "failed"
    assert (await settled_run(settings, dropped))["status"] == "failed"

    listing = rflow(settings, "runs", "list", "--failed", "--json")
    assert [r["run_id"] for r in json.loads(listing.stdout)] == [dead], listing.stderr
    every = rflow(settings, "runs", "list", "--status", "failed", "--json")
    assert sorted(r["run_id"] for r in json.loads(every.stdout)) == sorted([dead, dropped])
    status, body = await call(worker, "GET", "/api/runs?failed=true")
    assert (status, [r["run_id"] for r in body["runs"]]) == (200, [dead])
