"""Circuit breakers on a real worker: trip, pause and alert, survive a restart while open,
admit one probe when half-open, close on its success or trip again on its failure."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest

from rflow import storage
from rflow.storage import circuits, controls
from tests.integration.harness import wait_until
from tests.integration.test_operations import rflow
from tests.integration.test_runs import fire, run_status, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
channels:
  alerts: {{ type: webhook, url: "{url}/alerts" }}
workflows:
  fragile:
    trigger: {{ manual: {{}} }}
    on_failure: drop
    circuit_breaker:
      max_failures: 2
      window: 3s
      on_trip: [pause, notify: {{ channel: alerts }}]
    steps:
      - id: check
        command: {{ name: assert, args: {{ that: "${{{{ trigger.ok }}}}", message: "not ok" }} }}
      - id: hit
        http_call: {{ url: "{url}/hit", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
"""


@pytest.fixture
def project(tmp_path, sink):
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT.format(url=sink.url))
    return path


async def circuit(settings) -> object:
    conn = await storage.connect(settings)
    async with conn:
        return (await circuits.circuits(conn)).get("fragile")


async def pause_of(settings) -> tuple[str, str] | None:
    conn = await storage.connect(settings)
    async with conn:
        return (await controls.paused(conn)).get("fragile")


async def state_is(settings, state: str):
    async def reached():
        found = await circuit(settings)
        return found if found is not None and found.state == state else None

    return await wait_until(reached, timeout=30, what=f"the circuit to be {state}")


async def run(settings, project, n: int, ok: bool) -> str:
    return await fire(settings, project, "fragile", f"manual:fragile:{n}", {"ok": ok, "n": n})


async def trip(settings, project, first: int = 0) -> None:
    for n in (first, first + 1):
        assert (await settled_run(settings, await run(settings, project, n, False)))[
            "status"
        ] == "failed"
    await state_is(settings, "open")


async def test_trip_restart_while_open_then_one_probe_closes_it(
    settings, worker_factory, project, sink
):
    first = worker_factory(project_path=project)
    await first.wait_ready()
    await trip(settings, project)

    async def alerted():
        return [r for r in sink.requests if r.path == "/alerts"]

    [alert] = await wait_until(alerted, what="the trip alert")
    assert alert.body["severity"] == "critical"
    assert "circuit breaker tripped: 2 failed runs" in alert.body["message"]
    by, _ = await wait_until(lambda: pause_of(settings), what="the breaker's pause")
    assert by == "breaker"

    # While open and paused, a firing is held, not started (nor dropped).
    held = await run(settings, project, 10, True)
    row = await run_status(settings, held, "pending")
    assert row["pending_reason"] == "paused" and "by breaker" in row["waiting_for"], row
    sink.held.add("/hit")

    # A restart forgets nothing: the circuit is in Postgres.
    assert first.stop() == 0
    second = worker_factory(project_path=project)
    await second.wait_ready()
    assert (await circuit(settings)).state in ("open", "half_open")
    await state_is(settings, "half_open")
    assert await pause_of(settings) is None  # the breaker lifted its own pause

    # Half-open: the held firing starts, as the probe; the next waits behind it.
    waiting = await run(settings, project, 21, True)

    async def probing():
        found = await circuit(settings)
        hits = [str(r.body["n"]) for r in sink.requests if r.path == "/hit"]
        return found.probe == held and hits == ["10"]

    await wait_until(probing, what="the probe to be in flight alone")
    # The run behind the probe has its row, saying what it waits for.
    behind = await run_status(settings, waiting, "pending")
    assert behind["pending_reason"] == "probe" and "probe run" in behind["waiting_for"]
    sink.release()
    assert (await settled_run(settings, held))["status"] == "succeeded"
    assert (await settled_run(settings, waiting))["status"] == "succeeded"
    closed = await state_is(settings, "closed")
    assert closed.failures == () and closed.probe is None


async def test_a_failed_probe_trips_again_and_an_operators_pause_survives(
    settings, worker_factory, project
):
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    await trip(settings, project)
    await state_is(settings, "half_open")
    probe = await run(settings, project, 5, False)
    assert (await settled_run(settings, probe))["status"] == "failed"
    await state_is(settings, "open")
    assert (await wait_until(lambda: pause_of(settings), what="the pause"))[0] == "breaker"

    # An operator pauses during the incident: the breaker does not lift that pause.
    conn = await storage.connect(settings)
    async with conn:
        await controls.pause(conn, "fragile", by="operator", reason="investigating")
    await state_is(settings, "half_open")
    assert await pause_of(settings) == ("operator", "investigating")


async def test_an_operators_resume_closes_the_circuit_it_lets_runs_through(
    settings, worker_factory, tmp_path, sink
):
    # A window of an hour: the circuit cannot turn half-open by itself during the test.
    path = tmp_path / "slow.yaml"
    path.write_text(PROJECT.format(url=sink.url).replace("window: 3s", "window: 1h"))
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    await trip(settings, path)
    assert (await wait_until(lambda: pause_of(settings), what="the pause"))[0] == "breaker"

    resumed = rflow(settings, "workflow", "resume", "fragile")
    assert resumed.returncode == 0, resumed.stderr
    closed = await circuit(settings)
    assert (closed.state, closed.failures, closed.probe) == ("closed", (), None)
    assert (await settled_run(settings, await run(settings, path, 3, True)))["status"] == (
        "succeeded"
    )
    assert (await circuit(settings)).state == "closed"

    async def metric_says_closed():
        text = await asyncio.to_thread(metrics_of, worker)
        return 'rflow_circuit_state{state="closed",workflow="fragile"} 1.0' in text

    await wait_until(metric_says_closed, timeout=30, what="rflow_circuit_state to say closed")


def metrics_of(worker) -> str:
    request = urllib.request.Request(worker.url + "/metrics", headers=worker.auth)
    with urllib.request.urlopen(request, timeout=5) as resp:
        return resp.read().decode()
