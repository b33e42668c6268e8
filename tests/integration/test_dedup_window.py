"""The de-duplication window on the real stack: what a worker remembers, for how long,
what its tables hold on disk, and what a restart or a move to another host reads.

Windows are shortened to seconds; every wait is for a condition (a run settled, an
entry gone, a count reached)."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from typing import Any

import pytest

from rflow.codecs import json
from rflow.settings import Settings
from rflow.streams.topics import Catalog
from tests.integration.harness import WorkerProcess, topic_messages, wait_until
from tests.integration.test_api import call
from tests.integration.test_operations import parked
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
workflows:
  kept:
    dedup_window: 1h
    trigger: {{ manual: {{}} }}
    steps:
      - id: call
        http_call: {{ url: "{url}/kept", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
  paid:
    dedup_window: 2s
    trigger: {{ manual: {{}} }}
    steps:
      - id: call
        http_call: {{ url: "{url}/paid", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
  gated:
    dedup_window: 2s
    trigger: {{ manual: {{}} }}
    steps:
      - id: ok
        wait_for: {{ approval: {{ prompt: "go?" }}, timeout: 1h }}
      - id: call
        http_call: {{ url: "{url}/gated", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
"""


@pytest.fixture
def project(tmp_path, sink):
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT.format(url=sink.url))
    return path


async def entry(worker: WorkerProcess, gate: str) -> dict[str, Any] | None:
    """The gate entry of ``gate`` on ``worker`` (``None``: not remembered there)."""
    status, body = await worker.get(f"/rflow/triggers/{gate}/")
    return body if status == 200 else None


async def forgotten(worker: WorkerProcess, gate: str) -> None:
    async def gone() -> bool:
        return await entry(worker, gate) is None

    await wait_until(gone, timeout=30, what=f"{gate} to be forgotten")


async def live_of(worker: WorkerProcess, rid: str) -> Any:
    """What ``worker``'s tables hold of run ``rid``: its state, its settled marker, or None."""
    status, body = await call(worker, "GET", f"/api/runs/{rid}")
    return body.get("live") if status == 200 else None


def scrape(worker: WorkerProcess) -> dict[str, float]:
    """``name{labels}`` -> value of every sample on the worker's /metrics."""
    request = urllib.request.Request(worker.url + "/metrics", headers=worker.auth)
    with urllib.request.urlopen(request, timeout=10) as resp:
        text = resp.read().decode()
    found = {}
    for line in text.splitlines():
        match = re.match(r"^(rflow_[a-z_]+(?:\{[^}]*\})?) (\S+)$", line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


async def metric(worker: WorkerProcess, sample: str) -> float | None:
    return (await asyncio.to_thread(scrape, worker)).get(sample)


async def changelog(settings: Settings, name: str, key: str) -> list[Any]:
    """Every record of ``key`` on changelog ``name``, in order: its values, ``None`` for
    a tombstone."""
    raw = json.dumps(key)
    return [
        None if message.value is None else json.loads(message.value)
        for message in await topic_messages(settings, name)
        if message.key == raw
    ]


async def test_a_repeat_inside_the_window_starts_nothing_and_after_it_is_admitted_again(
    settings, worker_factory, project, sink
):
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    rid = await fire(settings, project, "kept", "manual:kept:k1", {"n": 1})
    assert (await settled_run(settings, rid))["status"] == "succeeded"
    # Inside the window (an hour): a repeat starts nothing, whatever it carries.
    await fire(settings, project, "kept", "manual:kept:k1", {"n": 1})
    await fire(settings, project, "kept", "manual:kept:k1", {"n": 2})
    after = await fire(settings, project, "kept", "manual:kept:after", {"n": 3})
    await settled_run(settings, after)
    assert sink.keys("/kept") == {"kept:manual:kept:k1:call": 1, "kept:manual:kept:after:call": 1}

    # A two-second window: the firing and its settled run are forgotten after it ...
    gate = "paid:manual:paid:p1"
    rid = await fire(settings, project, "paid", "manual:paid:p1", {"n": 1})
    assert (await settled_run(settings, rid))["status"] == "succeeded"
    admitted = (await wait_until(lambda: entry(worker, gate), what=f"{gate} remembered"))["at"]
    await forgotten(worker, gate)
    assert time.time() - admitted >= 2.0  # never before the window ended

    async def marker_gone() -> bool:
        return await live_of(worker, rid) is None

    await wait_until(marker_gone, timeout=30, what=f"run {rid}'s marker to be forgotten")

    # ... with a tombstone on each changelog (written by the next checkpoint), after the
    # entry it deletes.
    async def tombstoned(name: str, key: str) -> list[Any] | None:
        records = await changelog(settings, name, key)
        return records if records and records[-1] is None else None

    gates = await wait_until(lambda: tombstoned("rflow.state.triggers", gate), what="tombstone")
    assert gates[-2]["runs"] == [rid], gates
    markers = await wait_until(lambda: tombstoned("rflow.state.settled", rid), what="tombstone")
    assert markers[-2]["settled"] == "succeeded", markers
    assert await metric(worker, 'rflow_forgotten_total{table="triggers"}') >= 1

    # Repeated now, it is admitted again: its run runs again, under the same run id and
    # idempotency keys (the sink sees the same key twice).
    await fire(settings, project, "paid", "manual:paid:p1", {"n": 1})

    async def called_twice() -> bool:
        return sink.keys("/paid")["paid:manual:paid:p1:call"] == 2

    await wait_until(called_twice, timeout=30, what="the repeated firing's run to call again")
    again = await wait_until(lambda: entry(worker, gate), what=f"{gate} remembered again")
    assert again["at"] > admitted


async def test_a_run_waiting_longer_than_the_window_is_remembered_and_resumes(
    settings, worker_factory, project, sink
):
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    rid = await fire(settings, project, "gated", "manual:gated:g1", {"n": 1})
    await parked(settings, rid)
    # Its window goes by: a firing of the same window admitted after it is forgotten ...
    later = await fire(settings, project, "paid", "manual:paid:meanwhile", {"n": 2})
    await settled_run(settings, later)
    await forgotten(worker, "paid:manual:paid:meanwhile")
    # ... and two more sweeps of every partition come and go.
    swept = await metric(worker, "rflow_sweeps_total")

    async def two_more() -> bool:
        return (await metric(worker, "rflow_sweeps_total") or 0) >= swept + 2

    await wait_until(two_more, timeout=30, what="two more sweeps")
    # A run that has not settled is remembered however long it waits: its firing and its
    # state are there, and it resumes.
    assert await entry(worker, "gated:manual:gated:g1") is not None
    assert (await live_of(worker, rid))["status"] == "waiting"
    status, _ = await call(worker, "POST", f"/api/runs/{rid}/approve", {})
    assert status == 200
    assert (await settled_run(settings, rid))["status"] == "succeeded"
    assert sink.keys("/gated") == {"gated:manual:gated:g1:call": 1}


async def test_a_restart_with_its_data_directory_reads_only_what_it_had_not_seen(
    settings, worker_factory, project, tmp_path
):
    data = tmp_path / "host-a"
    worker = worker_factory(project_path=project, data_dir=data)
    await worker.wait_ready()
    rids = [await fire(settings, project, "kept", f"manual:kept:r{i}", {"n": i}) for i in range(60)]
    for rid in rids:
        await settled_run(settings, rid)
    worker.stop()

    # The same host, its data directory kept: only the changelog records past what the
    # directory holds are read (Faust reads the last one again: one per partition at most).
    restarted = worker_factory(project_path=project, data_dir=data)
    await restarted.wait_ready()

    async def read(worker: WorkerProcess, table: str) -> float | None:
        return await metric(worker, f'rflow_changelog_records_read{{table="{table}"}}')

    async def counted(worker: WorkerProcess, table: str) -> float:
        """What ``worker`` read of ``table``'s changelog (0 counts: a tuple is truthy)."""

        async def present() -> tuple[float] | None:
            value = await read(worker, table)
            return None if value is None else (value,)

        return (await wait_until(present, what=f"the {table} records read"))[0]

    partitions = Catalog.from_settings(settings).spec("rflow.state.triggers").partitions
    assert await counted(restarted, "triggers") <= partitions
    assert await counted(restarted, "settled") <= partitions
    # It remembers every firing all the same: a repeat starts nothing.
    assert (await entry(restarted, "kept:manual:kept:r7"))["runs"] == [rids[7]]
    await fire(settings, project, "kept", "manual:kept:r7", {"n": 7})
    last = await fire(settings, project, "kept", "manual:kept:last", {"n": 99})
    await settled_run(settings, last)
    restarted.stop()

    # A new host (an empty data directory) reads every record of the changelogs.
    fresh = worker_factory(project_path=project, data_dir=tmp_path / "host-b")
    await fresh.wait_ready()
    assert await counted(fresh, "triggers") >= 61
    assert (await entry(fresh, "kept:manual:kept:r7"))["runs"] == [rids[7]]


async def test_a_worker_moved_to_a_new_host_recovers_exactly_the_live_keys(
    settings, worker_factory, project, tmp_path
):
    worker = worker_factory(project_path=project, data_dir=tmp_path / "host-a")
    await worker.wait_ready()
    settled = [
        await fire(settings, project, "paid", f"manual:paid:s{i}", {"n": i}) for i in range(5)
    ]
    waiting = [
        await fire(settings, project, "gated", f"manual:gated:w{i}", {"n": i}) for i in range(2)
    ]
    for rid in settled:
        await settled_run(settings, rid)
    for rid in waiting:
        await parked(settings, rid)
    for i, rid in enumerate(settled):
        await forgotten(worker, f"paid:manual:paid:s{i}")

        async def marker_gone(rid: str = rid) -> bool:
            return await live_of(worker, rid) is None

        await wait_until(marker_gone, timeout=30, what=f"run {rid}'s marker to be forgotten")
    worker.stop()

    moved = worker_factory(project_path=project, data_dir=tmp_path / "host-b")
    await moved.wait_ready()

    async def counts() -> dict[str, float] | None:
        found = await asyncio.to_thread(scrape, moved)
        tables = {
            name: found.get(f'rflow_remembered{{table="{name}"}}')
            for name in ("triggers", "runs", "settled")
        }
        return tables if None not in tables.values() else None

    # Its sweep counts what its tables hold: the two waiting firings and their runs, and
    # nothing of the five that were forgotten before it came.
    remembered = await wait_until(counts, timeout=30, what="the new host's first sweep")
    assert remembered == {"triggers": 2, "runs": 2, "settled": 0}
    for i, rid in enumerate(settled):
        assert await entry(moved, f"paid:manual:paid:s{i}") is None
        assert await live_of(moved, rid) is None
    for i, rid in enumerate(waiting):
        assert (await entry(moved, f"gated:manual:gated:w{i}"))["runs"] == [rid]
        assert (await live_of(moved, rid))["status"] == "waiting"
    # ... and they go on there.
    for rid in waiting:
        assert (await call(moved, "POST", f"/api/runs/{rid}/approve", {}))[0] == 200
        assert (await settled_run(settings, rid))["status"] == "succeeded"


async def test_an_event_for_a_forgotten_run_is_counted_and_dropped(
    settings, worker_factory, project
):
    from rflow.codecs import RunEvent, encode
    from rflow.engine import CancelRequested
    from tests.integration.harness import produce

    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    rid = await fire(settings, project, "paid", "manual:paid:late", {"n": 1})
    await settled_run(settings, rid)
    await forgotten(worker, "paid:manual:paid:late")

    async def marker_gone() -> bool:
        return await live_of(worker, rid) is None

    await wait_until(marker_gone, timeout=30, what="the settled run to be forgotten")
    late = RunEvent(event=CancelRequested(run_id=rid, reason="too late"))
    await produce(settings, "rflow.runs", b"manual:paid:late", encode(late))

    async def dropped() -> float | None:
        return await metric(worker, 'rflow_run_events_dropped_total{reason="unknown_run"}')

    assert await wait_until(dropped, timeout=30, what="the dropped event counted") == 1
    assert "CancelRequested of run " + rid + " dropped: the run is neither live" in worker.tail(200)
    assert await live_of(worker, rid) is None  # nothing was restarted
