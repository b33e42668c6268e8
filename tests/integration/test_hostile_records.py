"""Hostile records written straight to every topic a worker reads.

Malformed, oversized, deeply nested, wrong-type, wrong-version and wrong-kind records,
and a tombstone, on the triggers, runs, sends, events and dead-letter topics: each must
end on the dead-letter path with a reason, and the worker must go on running workflows.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from rflow import storage
from rflow.engine.keys import run_id
from rflow.storage import dead_letters
from rflow.streams import kafka
from tests.integration.chain import Account
from tests.integration.harness import wait_until
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
networks:
  local: {{ chain_id: 31337 }}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
workflows:
  echo:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout] }}
    steps:
      - id: call
        http_call: {{ url: "{sink}/echo", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
"""
TOPICS = ("rflow.triggers", "rflow.runs", "rflow.sends", "rflow.events", "rflow.dlq")
BIG = 1_000_000


def hostile() -> dict[str, tuple[bytes | None, str]]:
    """Name -> (value, a part of the reason the dead letter must give)."""
    trigger = {
        "kind": "trigger",
        "v": 1,
        "workflow": "echo",
        "trigger_key": "hostile",
        "source": "manual",
        "payload": {},
        "received_at": "2026-05-06T07:08:09Z",
    }
    return {
        "garbage": (b"\x00\xff\xfe not json at all", "not JSON"),
        "big": (b"x" * BIG, "not JSON"),
        "nested": (b"[" * 20_000 + b"]" * 20_000, "depth limit exceeded"),
        "array": (b"[1, 2, 3]", "not a JSON object: the record is a list"),
        "number": (b"42", "not a JSON object: the record is a number"),
        "kindless": (b'{"v": 1}', 'no "kind" (record type): expected one of'),
        "unknown-kind": (
            b'{"kind": "launch", "v": 1}',
            "\"kind\" (record type) is 'launch', which no rflow record is",
        ),
        "future": (json.dumps({**trigger, "v": 99}).encode(), '"v" (record version) is 99'),
        "wrong-type": (
            json.dumps({**trigger, "payload": "not an object", "received_at": 5}).encode(),
            "invalid 'trigger' record",
        ),
        "tombstone": (None, "empty record"),
    }


async def produce(settings, topic: str, key: bytes, value: bytes | None) -> None:
    producer = kafka.producer(settings, max_request_size=2 * BIG, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(settings.topic_prefix + topic, key=key, value=value)
    finally:
        await producer.stop()


async def test_hostile_records_on_every_topic_are_dead_lettered_and_the_worker_goes_on(
    settings, worker_factory, tmp_path, sink
):
    project = tmp_path / "echo.yaml"
    project.write_text(PROJECT.format(sink=sink.url))
    worker = worker_factory(project_path=project, env={"PAYOUT_KEY": Account.create().key.hex()})
    await worker.wait_ready()

    records = hostile()
    # A record of a kind that belongs elsewhere: a firing on every topic but its own.
    misplaced = fire_record()
    expected: dict[tuple[str, str], str] = {}
    for topic in TOPICS:
        for name, (value, reason) in records.items():
            key = f"{topic}:{name}"
            await produce(settings, topic, key.encode(), value)
            expected[(settings.topic_prefix + topic, key)] = reason
        if topic != "rflow.triggers":
            key = f"{topic}:misplaced"
            await produce(settings, topic, key.encode(), misplaced)
            expected[(settings.topic_prefix + topic, key)] = "trigger"

    found: dict[tuple[str, str], str] = {}

    async def letters() -> bool:
        conn = await storage.connect(settings)
        async with conn:
            rows = await dead_letters.recent(conn, limit=1000)
        found.update({(row["topic"], row["record_key"]): row["reason"] for row in rows})
        return set(expected) <= set(found)

    try:
        await wait_until(letters, timeout=60, what="a dead letter for every hostile record")
    except AssertionError:
        missing = sorted(set(expected) - set(found))
        raise AssertionError(f"no dead letter for {missing}\n{worker.tail(60)}") from None
    for where, reason in expected.items():
        assert reason in found[where], (where, found[where])
    assert worker.proc.poll() is None, worker.tail()

    # The worker goes on: a run fired afterwards completes, and one whose input holds a
    # NUL (which Postgres text and jsonb cannot) is in the read model all the same.
    rid = await fire(settings, project, "echo", "manual:echo:after", {"n": 7})
    assert rid == run_id("echo", "manual:echo:after")
    run = await settled_run(settings, rid, timeout=60)
    assert run["status"] == "succeeded", (run, worker.tail())
    rid = await fire(settings, project, "echo", "manual:echo:\x00nul", {"n": "a\x00b"})
    run = await settled_run(settings, rid, timeout=60)
    assert run["status"] == "succeeded", (run, worker.tail())
    assert run["trigger"]["n"] == "a\ufffdb"
    assert worker.proc.poll() is None, worker.tail()


def fire_record() -> bytes:
    record: dict[str, Any] = {
        "kind": "trigger",
        "v": 1,
        "workflow": "echo",
        "trigger_key": "misplaced",
        "source": "manual",
        "payload": {},  # what echo's manual trigger takes: refused for where it is
        "received_at": "2026-05-06T07:08:09Z",
    }
    return json.dumps(record).encode()
