"""Trigger records from producers outside rflow (kcat, aiokafka, the faust CLI, `rflow
trigger`), their refusals on the dead-letter path, and Faust's own listing commands."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest
from aiokafka.partitioner import DefaultPartitioner

from rflow import storage
from rflow.engine.keys import run_id
from rflow.settings import Settings
from rflow.storage import dead_letters, runs
from rflow.streams import kafka
from rflow.streams.app import create_app
from tests.integration.harness import wait_until
from tests.integration.test_runs import settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

WORKFLOW = "order-paid"
PROJECT = """
workflows:
  order-paid:
    trigger:
      manual: {{ inputs: [account, order, amount] }}
    concurrency:
      group: "${{{{ trigger.account }}}}"
    steps:
      - id: pay
        http_call:
          url: "{sink}/paid"
          method: POST
          body: {{ order: "${{{{ trigger.order }}}}", amount: "${{{{ trigger.amount }}}}" }}
"""
TIMEOUT = 90.0


@pytest.fixture
def project(tmp_path, sink):
    path = tmp_path / "orders.yaml"
    path.write_text(PROJECT.format(sink=sink.url))
    return path


@pytest.fixture
async def worker(worker_factory, project):
    started = worker_factory(project_path=project)
    await started.wait_ready()
    return started


def record(order: int, account: str = "acct-42", **overrides: Any) -> dict[str, Any]:
    """A trigger record as an outside producer writes it (a plain JSON document)."""
    return {
        "kind": "trigger",
        "v": 1,
        "workflow": WORKFLOW,
        "trigger_key": f"orders:{order}",
        "group": account,
        "source": "manual",
        # An amount beyond 64 bits, as a JSON number: it must survive exactly.
        "payload": {"account": account, "order": order, "amount": 1250 * 10**18 + order},
        "received_at": "2026-05-06T07:08:09Z",
        **overrides,
    }


def env_of(settings: Settings, project) -> dict[str, str]:
    return {**os.environ, **settings.to_env(), "RFLOW_PROJECT": str(project)}


async def run_command(args: list[str], env: dict[str, str], stdin: bytes | None = None):
    result = await asyncio.to_thread(
        subprocess.run, args, input=stdin, env=env, capture_output=True, timeout=TIMEOUT
    )
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def kcat_connection(settings: Settings) -> list[str]:
    """The connection (TLS, SASL) as the settings say, as a producer configures kcat.

    librdkafka before 2.6.1 (Debian 12's kcat links 2.0.2) answers Kafka 4's SCRAM with a
    proof the broker refuses; it authenticates with PLAIN over TLS instead, which the
    secured stack offers for the same users.
    """
    config = kafka.librdkafka_config(settings)
    if config.get("sasl.mechanisms", "").startswith("SCRAM"):
        version = subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout
        found = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", version)
        if found and tuple(map(int, found.groups())) < (2, 6, 1):
            config["sasl.mechanisms"] = "PLAIN"
    return [arg for name, setting in config.items() for arg in ("-X", f"{name}={setting}")]


async def kcat(settings: Settings, key: str, value: dict[str, Any]) -> None:
    """Produce with kcat exactly as docs/producing-triggers.md shows (murmur2, one record per
    line)."""
    connection = kcat_connection(settings)
    await run_command(
        [
            "kcat",
            "-P",
            *connection,
            "-t",
            settings.topic_prefix + "rflow.triggers",
            "-k",
            key,
            "-X",
            "topic.partitioner=murmur2_random",
        ],
        dict(os.environ),
        stdin=json.dumps(value).encode() + b"\n",
    )


async def aiokafka_send(
    settings: Settings, key: str | None, value: bytes, partition: int | None = None
) -> None:
    """Produce with aiokafka as docs/producing-triggers.md shows (idempotent, acknowledged by
    all)."""
    producer = kafka.producer(settings, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(
            settings.topic_prefix + "rflow.triggers",
            key=None if key is None else key.encode(),
            value=value,
            partition=partition,
        )
    finally:
        await producer.stop()


async def succeeded(settings: Settings, order: int) -> dict[str, Any]:
    run = await settled_run(settings, run_id(WORKFLOW, f"orders:{order}"), timeout=TIMEOUT)
    assert run["status"] == "succeeded", run
    [step] = run["steps"]
    assert step["output"]["json"]["echo"]["order"] == order
    return run


async def runs_of_workflow(settings: Settings) -> list[dict[str, Any]]:
    conn = await storage.connect(settings)
    async with conn:
        return await runs.list_runs(conn, workflow=WORKFLOW, limit=1000)


async def test_a_kcat_record_starts_one_run_however_often_it_is_delivered(settings, worker, sink):
    first = record(4711)
    await kcat(settings, "acct-42", first)
    run = await succeeded(settings, 4711)
    assert run["group_key"] == "acct-42"
    [step] = run["steps"]
    assert int(step["output"]["json"]["echo"]["amount"]) == 1250 * 10**18 + 4711

    # The same firing again, twice by kcat and once by aiokafka; then a later firing of
    # the same group, which its partition admits only after the repeats.
    await kcat(settings, "acct-42", first)
    await kcat(settings, "acct-42", first)
    await aiokafka_send(settings, "acct-42", json.dumps(first).encode())
    await kcat(settings, "acct-42", record(4712))
    await succeeded(settings, 4712)

    assert sink.keys("/paid") == {
        f"{WORKFLOW}:orders:4711:pay": 1,
        f"{WORKFLOW}:orders:4712:pay": 1,
    }
    assert len(await runs_of_workflow(settings)) == 2


async def test_an_aiokafka_record_starts_a_run(settings, worker):
    await aiokafka_send(settings, "acct-7", json.dumps(record(7, "acct-7")).encode())
    await succeeded(settings, 7)


async def test_rflow_trigger_computes_the_group_and_starts_a_run(settings, worker, project):
    result = await run_command(
        [
            sys.executable,
            "-m",
            "rflow.cli",
            "trigger",
            WORKFLOW,
            "--input",
            '{"account": "acct-9", "order": 9, "amount": 1}',
            "--key",
            "orders:9",
            "--json",
        ],
        env_of(settings, project),
    )
    printed = json.loads(result.stdout)
    assert printed["run_ids"] == [run_id(WORKFLOW, "orders:9")]
    assert (printed["group"], printed["key"]) == ("acct-9", "acct-9")
    partitions = list(range(8))
    assert printed["partition"] == DefaultPartitioner()(b"acct-9", partitions, partitions)
    await succeeded(settings, 9)


async def test_faust_send_starts_a_run(settings, worker, project):
    result = await run_command(
        [
            sys.executable,
            "-m",
            "faust",
            "-A",
            "rflow.streams.app",
            "send",
            settings.topic_prefix + "rflow.triggers",
            "--key",
            "acct-5",
            "--value-serializer",
            "raw",
            json.dumps(record(5, "acct-5")),
        ],
        env_of(settings, project),
    )
    assert json.loads(result.stdout.splitlines()[-1])["topic"].endswith("rflow.triggers")
    await succeeded(settings, 5)


async def test_refused_records_are_dead_lettered_with_the_reason_and_the_worker_carries_on(
    settings, worker, sink
):
    partitions = list(range(8))
    home = DefaultPartitioner()(b"acct-3", partitions, partitions)
    refused = {
        # trigger key -> (Kafka key, record, partition or None, reason)
        "orders:101": (
            "acct-1",
            record(101, "acct-1", source="fax"),
            None,
            "invalid 'trigger' record: \"source\" is 'fax': expected 'event', 'webhook', "
            "'schedule' or 'manual'",
        ),
        "orders:102": (
            "acct-1",
            record(102, "acct-1", workflow="nope"),
            None,
            "unknown workflow 'nope'",
        ),
        "orders:103": (
            "acct-1",
            record(103, "acct-2"),
            None,
            "key 'acct-1' disagrees with the concurrency group 'acct-2' of workflow order-paid",
        ),
        "orders:104": (
            "acct-2",
            record(104, "acct-2", group="acct-9"),
            None,
            "group 'acct-9' disagrees with the concurrency group 'acct-2' of workflow order-paid",
        ),
        "orders:105": (
            "acct-3",
            record(105, "acct-3"),
            (home + 1) % 8,
            f"key 'acct-3' belongs on partition {home} of 8",
        ),
        "orders:106": (
            "acct-4",
            record(106, "acct-4", payload={"order": 106}),
            None,
            "invalid_input: payload: missing input(s) 'account', 'amount' for 'order-paid'; "
            "it takes: account, order, amount",
        ),
        "orders:108": (
            "acct-5",
            record(108, "acct-5", source="event"),
            None,
            "unauthenticated_source: a record claiming source 'event' is believed only with "
            "the proof of rflow's ingress, and it carries no proof",
        ),
        "event:31337:0xab:1": (
            "acct-6",
            record(109, "acct-6", trigger_key="event:31337:0xab:1"),
            None,
            "reserved_key: trigger_key 'event:31337:0xab:1' starts with 'event:'",
        ),
    }
    for key, value, partition, _ in refused.values():
        await aiokafka_send(settings, key, json.dumps(value).encode(), partition)

    async def letters():
        conn = await storage.connect(settings)
        async with conn:
            rows = await dead_letters.recent(conn)
        return rows if len(rows) >= len(refused) else None

    rows = await wait_until(letters, timeout=TIMEOUT, what="every refused record in Postgres")
    reasons = {json.loads(row["raw"])["trigger_key"]: row["reason"] for row in rows}
    assert set(reasons) == set(refused)
    for trigger_key, (_, _, _, reason) in refused.items():
        assert reason in reasons[trigger_key], (trigger_key, reasons[trigger_key])
    assert {row["topic"] for row in rows} == {settings.topic_prefix + "rflow.triggers"}

    await kcat(settings, "acct-1", record(107, "acct-1"))
    await succeeded(settings, 107)
    assert [r["trigger_key"] for r in await runs_of_workflow(settings)] == ["orders:107"]
    assert set(sink.keys("/paid")) == {f"{WORKFLOW}:orders:107:pay"}


def normalized(text: str) -> str:
    return " ".join(text.split())


async def test_faust_tables_and_agents_list_everything_with_its_help(settings, project):
    app = create_app(settings.model_copy(update={"project_path": project}))
    env = env_of(settings, project)
    faust = [sys.executable, "-m", "faust", "-A", "rflow.streams.app"]

    tables = normalized((await run_command([*faust, "tables"], env)).stdout.decode())
    assert set(app.tables) == {"triggers", "runs", "settled", "lanes"}
    for name, table in app.tables.items():
        assert f"| {name} | {normalized(table.help)} |" in tables
    assert "keyed by <workflow>:<trigger key>" in tables
    assert "keyed by run id" in tables

    agents = normalized((await run_command([*faust, "agents"], env)).stdout.decode())
    assert {agent.name for agent in app.agents.values()} == {
        "rflow.runner",
        "rflow.projector",
        "rflow.dead-letters",
    }
    for agent in app.agents.values():
        assert f"@{agent.name} |" in agents
        assert normalized(agent.help) in agents
    prefix = settings.topic_prefix
    assert f"{prefix}rflow.triggers, {prefix}rflow.runs" in agents
