"""Who owns what, in plain sight: two workers of one group, each named by its host and
web port in Kafka too; ``rflow workers`` lists the partitions each owns and the standby
copies it keeps, and agrees with what Kafka's own tool lists; ``rflow runs show --live``
asked on the worker that does not own a run finds the one that does and asks it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys

import pytest

from rflow import workers
from rflow.settings import Settings
from rflow.streams.topics import group_members
from tests.integration.harness import wait_until
from tests.integration.test_api import call
from tests.integration.test_kafka_tools import in_shell
from tests.integration.test_runs import fire, run_status

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
channels:
  ops: { type: log }
workflows:
  nap:
    trigger: { manual: { inputs: [account] } }
    concurrency: { group: "${{ inputs.account }}" }
    steps:
      - id: sleep
        delay: { duration: 10m }
"""


def cli(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rflow.cli", *args],
        env={**os.environ, **settings.to_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_two_workers_are_named_alike_by_rflow_and_kafka_and_a_run_finds_its_owner(
    settings, worker_factory, tmp_path
):
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT)
    one = worker_factory(project_path=path)
    await one.wait_ready()
    two = worker_factory(project_path=path)
    await two.wait_ready()
    host = socket.gethostname()
    names = {
        w.settings.web_port: workers.worker_name(host, w.settings.web_port) for w in (one, two)
    }
    runs_topic = settings.topic_prefix + "rflow.runs"
    state_topic = settings.topic_prefix + "rflow.state.runs"

    async def split() -> dict | None:
        done = await asyncio.to_thread(cli, settings, "workers", "--json")
        assert done.returncode == 0, done.stderr
        listed = json.loads(done.stdout)
        rows = {w["worker"]: w for w in listed["workers"]}
        if set(rows) != set(names.values()) or not all(w["in_group"] for w in rows.values()):
            return None
        owned = [rows[n]["owns"].get(runs_topic, []) for n in names.values()]
        if sorted(owned[0] + owned[1]) != list(range(8)) or not owned[0] or not owned[1]:
            return None
        return listed

    listed = await wait_until(split, timeout=60, what="the two workers to split the partitions")
    rows = {w["worker"]: w for w in listed["workers"]}
    assert listed["other_members"] == []
    for port, name in names.items():
        row, other = rows[name], next(r for n, r in rows.items() if n != name)
        assert row["client_id"] == f"rflow-{host}-{port}"
        # Its standby copies of the run table are the partitions the other owns.
        assert row["standby"].get(state_topic) == other["owns"][state_topic]
        assert row["owns"][state_topic] == row["owns"][runs_topic]
        assert runs_topic not in row["standby"]  # no standby of a topic that is not a table

    # Kafka lists the same members, by the same client ids...
    members = await group_members(settings, settings.app_id)
    assert {m["client_id"] for m in members} == {r["client_id"] for r in rows.values()}
    # ...and its own tool shows each one's partitions of rflow.runs as rflow does.
    described = await asyncio.to_thread(
        in_shell,
        'kafka-consumer-groups --bootstrap-server "$RFLOW_KAFKA_BROKERS" --describe '
        '--group "${RFLOW_APP_ID:-rflow}" --members --verbose',
        settings,
    )
    assert described.returncode == 0, described.stderr
    for row in rows.values():
        [line] = [line for line in described.stdout.splitlines() if f" {row['client_id']} " in line]
        [runs] = [part for part in line.split() if part.count(":") and runs_topic in part]
        held = dict(item.split(":") for item in runs.split(";") if item)
        assert sorted(int(p) for p in held[runs_topic].split(",")) == row["owns"][runs_topic]

    # A run parked on one worker, asked of the other.
    run = await fire(settings, path, "nap", "nap:1", {"account": "acct-7"})
    await run_status(settings, run, "waiting")
    partition = workers.partition_of("acct-7", 8)
    owner = next(
        w for w in (one, two) if partition in rows[names[w.settings.web_port]]["owns"][runs_topic]
    )
    stranger = two if owner is one else one
    owner_name = names[owner.settings.web_port]

    status, answer = await call(stranger, "GET", f"/api/runs/{run}")
    assert status == 200 and answer["live"] is None
    assert answer["owner"] == {
        "topic": runs_topic,
        "partition": partition,
        "worker": owner_name,
        "client_id": rows[owner_name]["client_id"],
    }
    shown = await asyncio.to_thread(
        cli, settings, "runs", "show", run, "--live", RFLOW_WEB_PORT=str(stranger.settings.web_port)
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(
        f"live state (from worker {owner_name}, which owns partition {partition} of {runs_topic}):"
    ), shown.stdout
    live = json.loads(shown.stdout.split(":\n", 1)[1].split("\n\n", 1)[0])
    assert (live["run_id"], live["status"]) == (run, "waiting")
    assert live["steps"]["sleep"]["status"] == "waiting"
    # The journal below says the same word for the parked step.
    [step_line] = [line for line in shown.stdout.splitlines() if line.startswith("sleep ")]
    assert step_line.split()[1] == "waiting"
