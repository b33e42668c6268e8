"""Concurrency lanes on two workers: one run per group at a time, each on_conflict mode."""

from __future__ import annotations

import pytest

from tests.integration.harness import wait_until
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
workflows:
{workflows}
"""

WORKFLOW = """
  {mode}:
    trigger: {{ manual: {{}} }}
    concurrency: {{ group: "${{{{ trigger.account }}}}", on_conflict: {mode} }}
    steps:
      - id: first
        http_call: {{ url: "{url}/{mode}/first", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
      - id: second
        http_call: {{ url: "{url}/{mode}/second", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
"""
MODES = ("queue", "skip", "cancel_in_progress", "replace")


@pytest.fixture
async def workers(worker_factory, tmp_path, sink):
    path = tmp_path / "project.yaml"
    workflows = "".join(WORKFLOW.format(mode=mode, url=sink.url) for mode in MODES)
    path.write_text(PROJECT.format(workflows=workflows))
    started = [worker_factory(project_path=path, data_dir=tmp_path / f"d{i}") for i in range(2)]
    for worker in started:
        await worker.wait_ready()
    return path


async def fired(settings, project, mode: str, account: str, n: int) -> str:
    return await fire(
        settings, project, mode, f"manual:{mode}:{account}:{n}", {"account": account, "n": n}
    )


def worker_logs(tmp_path) -> str:
    """The two workers' logs, for a failure's message."""
    return "\n".join(
        f"--- {log.name} ---\n{log.read_text(errors='replace')[-20000:]}"
        for log in sorted(tmp_path.glob("worker-*.log"))
    )


def arrivals(sink, path: str) -> list[int]:
    return [int(r.body["n"]) for r in sink.requests if r.path == path]


async def requested(sink, path: str, count: int) -> None:
    async def arrived():
        return len(arrivals(sink, path)) >= count

    await wait_until(arrived, timeout=60, what=f"{count} requests to {path}")


@pytest.mark.ordering
async def test_queue_runs_a_groups_runs_one_at_a_time_in_arrival_order(
    settings, workers, sink, tmp_path
):
    sink.held.add("/queue/first")
    rids = [await fired(settings, workers, "queue", "alice", n) for n in range(3)]
    other = await fired(settings, workers, "queue", "bob", 9)
    # Another group is not held up by alice's lane.
    await requested(sink, "/queue/first", 2)
    assert sorted(arrivals(sink, "/queue/first")) == [0, 9], worker_logs(tmp_path)
    sink.release()
    for rid in [*rids, other]:
        assert (await settled_run(settings, rid))["status"] == "succeeded"
    alice = [n for n in arrivals(sink, "/queue/first") if n != 9]
    assert alice == [0, 1, 2]
    # One at a time: each run's last step came before the next run's first.
    order = [(r.path, int(r.body["n"])) for r in sink.requests if r.body["n"] != 9]
    assert order == [(f"/queue/{step}", n) for n in range(3) for step in ("first", "second")]


async def test_skip_records_a_run_arriving_at_a_busy_group_as_skipped(settings, workers, sink):
    sink.held.add("/skip/first")
    running = await fired(settings, workers, "skip", "alice", 0)
    await requested(sink, "/skip/first", 1)
    skipped = await fired(settings, workers, "skip", "alice", 1)
    run = await settled_run(settings, skipped)
    assert (run["status"], run["error_kind"]) == ("skipped", "cancelled")
    assert run["error_message"] == f"concurrency group 'alice' busy with run {running}"
    assert run["steps"] == []
    sink.release()
    assert (await settled_run(settings, running))["status"] == "succeeded"
    # The group is free again: the next run starts.
    later = await fired(settings, workers, "skip", "alice", 2)
    assert (await settled_run(settings, later))["status"] == "succeeded"
    assert arrivals(sink, "/skip/first") == [0, 2]


@pytest.mark.ordering
async def test_cancel_in_progress_stops_the_running_run_at_its_next_step(settings, workers, sink):
    sink.held.add("/cancel_in_progress/first")
    old = await fired(settings, workers, "cancel_in_progress", "alice", 0)
    await requested(sink, "/cancel_in_progress/first", 1)
    new = await fired(settings, workers, "cancel_in_progress", "alice", 1)
    newest = await fired(settings, workers, "cancel_in_progress", "alice", 2)
    # The newest arrival supersedes the waiting one: both arrivals have been decided
    # while the old run's first step is still in flight.
    superseded = await settled_run(settings, new)
    assert (superseded["status"], superseded["steps"]) == ("cancelled", [])
    assert superseded["error_message"] == (
        f"superseded by run {newest} (on_conflict: cancel_in_progress)"
    )
    sink.release()
    cancelled = await settled_run(settings, old)
    assert (cancelled["status"], cancelled["error_kind"]) == ("cancelled", "cancelled")
    assert cancelled["error_message"] == (
        f"superseded by run {new} (on_conflict: cancel_in_progress)"
    )
    # The step in flight finished; the next one never started.
    assert [(s["path"], s["status"]) for s in cancelled["steps"]] == [("first", "succeeded")]
    assert (await settled_run(settings, newest))["status"] == "succeeded"
    assert arrivals(sink, "/cancel_in_progress/first") == [0, 2]
    assert arrivals(sink, "/cancel_in_progress/second") == [2]


@pytest.mark.ordering
async def test_replace_keeps_only_the_newest_waiting_run(settings, workers, sink):
    sink.held.add("/replace/first")
    running = await fired(settings, workers, "replace", "alice", 0)
    await requested(sink, "/replace/first", 1)
    replaced = await fired(settings, workers, "replace", "alice", 1)
    newest = await fired(settings, workers, "replace", "alice", 2)
    run = await settled_run(settings, replaced)
    assert (run["status"], run["error_message"]) == (
        "cancelled",
        f"superseded by run {newest} (on_conflict: replace)",
    )
    sink.release()
    assert (await settled_run(settings, running))["status"] == "succeeded"
    assert (await settled_run(settings, newest))["status"] == "succeeded"
    assert arrivals(sink, "/replace/first") == [0, 2]


async def test_max_concurrent_runs_bounds_the_runs_executing_across_groups(
    settings, worker_factory, tmp_path, sink
):
    path = tmp_path / "limited.yaml"
    path.write_text(
        f"""
config: {{ max_concurrent_runs: 2 }}
workflows:
  wide:
    trigger: {{ manual: {{}} }}
    concurrency: {{ group: "${{{{ trigger.account }}}}" }}
    steps:
      - id: call
        http_call: {{ url: "{sink.url}/wide", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
"""
    )
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    sink.held.add("/wide")
    rids = [
        await fire(settings, path, "wide", f"manual:wide:{n}", {"account": f"g{n}", "n": n})
        for n in range(5)
    ]
    await requested(sink, "/wide", 2)
    sink.release()
    for rid in rids:
        assert (await settled_run(settings, rid))["status"] == "succeeded"
    assert len(arrivals(sink, "/wide")) == 5
    assert sink.peak == 2  # five groups, never more than two runs executing at once
