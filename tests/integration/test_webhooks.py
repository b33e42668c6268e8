"""Webhook and manual-run ingress on a real worker, against the real Kafka and Postgres.

Every acknowledged request must have its record on the triggers topic (keyed by the
workflow's concurrency group); every refused one must have produced nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from rflow import storage
from rflow.codecs import TriggerRecord, decode
from rflow.engine import memory
from rflow.engine.keys import run_id
from rflow.ingress import sign
from rflow.settings import Settings
from rflow.storage import runs
from rflow.streams import kafka
from rflow.streams.topics import Catalog
from tests.integration.harness import WorkerProcess, wait_until

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

SECRET = "It's a Secret to Everybody"
PROJECT = """
workflows:
  payouts:
    concurrency: { group: "${{ trigger.body.account }}" }
    trigger:
      webhook:
        path: /hooks/payouts
        auth: { type: hmac, algorithm: sha256, secret_env: RFLOW_TEST_HOOK_SECRET }
        idempotency_header: X-Request-Id
        idempotency_ttl: 1h
        event_type_field: $.type
        accepted_event_types: [payout.requested]
    steps:
      - id: log
        command: { name: log, args: { message: "${{ trigger.body.account }}" } }
  partner:
    trigger:
      webhook:
        path: /partners/acme
        auth: { type: api_key, secret_env: RFLOW_TEST_HOOK_SECRET }
    steps:
      - id: log
        command: { name: log, args: { message: partner } }
  payout-by-hand:
    concurrency: { group: "${{ inputs.account }}" }
    trigger:
      manual: { inputs: [account, amount] }
    steps:
      - id: log
        command: { name: log, args: { message: "${{ inputs.amount }}" } }
"""


@pytest.fixture
async def worker(worker_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WorkerProcess:
    """A worker running :data:`PROJECT`, its webhook secret in its environment."""
    path = tmp_path / "project.yaml"
    path.write_text(textwrap.dedent(PROJECT))
    monkeypatch.setenv("RFLOW_TEST_HOOK_SECRET", SECRET)
    started = worker_factory(project_path=path)
    await started.wait_ready()
    return started


async def post(
    worker: WorkerProcess, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    """POST ``body`` to the worker: (status, JSON body, response headers)."""

    def send() -> tuple[int, Any, dict[str, str]]:
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
                return resp.status, parsed(resp.read()), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, parsed(exc.read()), dict(exc.headers)

    return await asyncio.to_thread(send)


def parsed(data: bytes) -> Any:
    """A JSON answer, or the text of one that is not JSON (so a failure shows it)."""
    try:
        return json.loads(data)
    except ValueError:
        return data.decode(errors="replace")


def signed(body: bytes, **headers: str) -> dict[str, str]:
    return {"X-Hub-Signature-256": sign(SECRET, body), **headers}


async def triggers_on_topic(settings: Settings) -> list[tuple[str, TriggerRecord]]:
    """Every record on the triggers topic so far, as (Kafka key, record)."""
    catalog = Catalog.from_settings(settings)
    name = catalog.full_name("rflow.triggers")
    partitions = [TopicPartition(name, p) for p in range(catalog.spec("rflow.triggers").partitions)]
    consumer = kafka.consumer(settings, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        found = []
        for tp in partitions:
            while await consumer.position(tp) < ends[tp]:
                batch = await consumer.getmany(tp, timeout_ms=2000)
                for message in batch.get(tp, []):
                    found.append((message.key.decode(), decode(message.value, TriggerRecord)))
        return found
    finally:
        await consumer.stop()


async def in_table(worker: WorkerProcess, workflow: str, key: str) -> dict[str, Any]:
    """Firing ``key`` of ``workflow`` once the worker has admitted it."""

    async def present():
        status, body = await worker.get(f"/rflow/triggers/{workflow}:{key}/")
        if status == 200 and not memory.is_remembered(body):
            return None  # its runs are beginning
        return body if status == 200 else None

    return await wait_until(present, timeout=30, what=f"trigger {key} in the table")


async def test_signatures_duplicates_and_ttl_expiry(settings, worker):
    body = json.dumps({"type": "payout.requested", "account": "acct-7", "amount": 10**24})
    raw = body.encode()

    missing = await post(worker, "/hooks/payouts", raw, {"X-Request-Id": "d-1"})
    assert missing[:2] == (401, {"error": "missing X-Hub-Signature-256 header"})
    forged = {"X-Hub-Signature-256": sign("guess", raw), "X-Request-Id": "d-1"}
    assert (await post(worker, "/hooks/payouts", raw, forged))[:2] == (
        401,
        {"error": "signature does not match"},
    )

    status, reply, _ = await post(
        worker, "/hooks/payouts", raw, signed(raw, **{"X-Request-Id": "d-1", "X-Extra": "e"})
    )
    assert (status, reply) == (
        202,
        {"accepted": True, "trigger_key": "webhook:payouts:d-1:1", "duplicate": False},
    )
    duplicate = await post(worker, "/hooks/payouts", raw, signed(raw, **{"x-request-id": "d-1"}))
    assert duplicate[:2] == (
        200,
        {"accepted": True, "duplicate": True, "trigger_key": "webhook:payouts:d-1:1"},
    )

    # Acknowledged means durable: the record is on the topic already, keyed by the group,
    # and it is the only one (the refused and the duplicate deliveries produced nothing).
    [(kafka_key, record)] = await triggers_on_topic(settings)
    assert kafka_key == "acct-7"
    assert (record.workflow, record.trigger_key, record.source) == (
        "payouts",
        "webhook:payouts:d-1:1",
        "webhook",
    )
    assert record.payload["body"]["account"] == "acct-7"
    assert int(record.payload["body"]["amount"]) == 10**24
    assert record.payload["event_type"] == "payout.requested"
    assert record.payload["headers"]["x-extra"] == "e"
    assert "x-hub-signature-256" not in record.payload["headers"]
    # The worker remembers the firing by the digest of that record (its record is on the topic).
    remembered = await in_table(worker, "payouts", "webhook:payouts:d-1:1")
    assert remembered["digest"] == memory.digest(record.model_dump(mode="json"))

    # After the TTL the same idempotency key is a new firing, under the next generation.
    conn = await storage.connect(settings)
    async with conn:
        await conn.execute("UPDATE webhook_deliveries SET expires_at = now() - interval '1 second'")
    status, reply, _ = await post(
        worker, "/hooks/payouts", raw, signed(raw, **{"X-Request-Id": "d-1"})
    )
    assert (status, reply["trigger_key"]) == (202, "webhook:payouts:d-1:2")
    keys = sorted(r.trigger_key for _, r in await triggers_on_topic(settings))
    assert keys == ["webhook:payouts:d-1:1", "webhook:payouts:d-1:2"]


async def test_limits_filters_and_paths(settings, worker):
    too_big = b'{"type": "payout.requested", "pad": "' + b"a" * (1 << 20) + b'"}'
    status, reply, _ = await post(worker, "/hooks/payouts", too_big, signed(too_big))
    assert (status, reply) == (
        413,
        {"error": f"request body of {len(too_big)} bytes is over the 1048576-byte limit"},
    )

    other = json.dumps({"type": "payout.cancelled", "account": "a"}).encode()
    assert (await post(worker, "/hooks/payouts", other, signed(other)))[:2] == (
        202,
        {"accepted": False, "ignored": "event type 'payout.cancelled' is not accepted"},
    )
    untyped = json.dumps({"account": "a"}).encode()
    assert (await post(worker, "/hooks/payouts", untyped, signed(untyped)))[:2] == (
        422,
        {"error": "the body has no event type at $.type"},
    )
    status, reply, _ = await post(worker, "/hooks/payouts", b"{nope", signed(b"{nope"))
    assert status == 400
    assert reply["error"].startswith("body is not JSON: ")
    assert (await post(worker, "/hooks/unknown", b"{}"))[:2] == (
        404,
        {"error": "no webhook at /hooks/unknown"},
    )

    # A declared path outside /hooks/ is mounted as it is.
    assert (await post(worker, "/partners/acme", b"{}"))[:2] == (
        401,
        {"error": "missing X-API-Key header"},
    )
    status, reply, _ = await post(worker, "/partners/acme", b"[1, 2]", {"X-API-Key": SECRET})
    assert status == 202
    [(kafka_key, record)] = await triggers_on_topic(settings)
    assert kafka_key == record.trigger_key == reply["trigger_key"]
    assert record.payload["body"] == [1, 2]
    assert "x-api-key" not in record.payload["headers"]


async def test_manual_runs_over_http(settings, worker):
    inputs = json.dumps({"account": "acct-9", "amount": 3}).encode()
    status, reply, _ = await post(
        worker, "/api/workflows/payout-by-hand/runs", inputs, {"Idempotency-Key": "req-1"}
    )
    assert (status, reply) == (
        202,
        {
            "accepted": True,
            "workflow": "payout-by-hand",
            "trigger_key": "manual:payout-by-hand:req-1",
            "run_ids": [run_id("payout-by-hand", "manual:payout-by-hand:req-1")],
            "status": "accepted",
        },
    )
    # A repeated request with the same key produces the same firing, which intake keeps once.
    again = await post(
        worker, "/api/workflows/payout-by-hand/runs", inputs, {"Idempotency-Key": "req-1"}
    )
    assert again[:2] == (status, reply)
    stored = await in_table(worker, "payout-by-hand", "manual:payout-by-hand:req-1")
    assert stored["runs"] == reply["run_ids"]

    async def projected():
        conn = await storage.connect(settings)
        async with conn:
            return await runs.get_run(conn, reply["run_ids"][0])

    run = await wait_until(projected, timeout=30, what="the manual run in the read model")
    assert (run["group_key"], run["trigger"]) == ("acct-9", {"account": "acct-9", "amount": 3})

    missing = await post(worker, "/api/workflows/payout-by-hand/runs", b'{"account": "a"}')
    assert missing[:2] == (
        422,
        {"error": "missing input(s) 'amount' for 'payout-by-hand'; it takes: account, amount"},
    )
    assert (await post(worker, "/api/workflows/payouts/runs", b"{}"))[:2] == (
        422,
        {"error": "workflow 'payouts' has no manual trigger (it starts on webhook)"},
    )
    assert (await post(worker, "/api/workflows/nope/runs", b"{}"))[0] == 404

    records = await triggers_on_topic(settings)
    assert {(key, r.trigger_key) for key, r in records} == {
        ("acct-9", "manual:payout-by-hand:req-1")
    }


async def test_the_ingress_producer_stops_with_the_worker(worker):
    raw = json.dumps({"type": "payout.requested", "account": "a"}).encode()
    assert (await post(worker, "/hooks/payouts", raw, signed(raw)))[0] == 202
    assert worker.stop() == 0
    assert "Unclosed AIOKafkaProducer" not in worker.tail(400)


async def test_rflow_run_produces_a_checked_firing(settings, tmp_path):
    path = tmp_path / "project.yaml"
    path.write_text(textwrap.dedent(PROJECT))
    env = {**os.environ, **settings.to_env()}
    env.pop("RFLOW_PROJECT", None)
    command = [sys.executable, "-m", "rflow.cli", "run", "payout-by-hand"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *args], env=env, capture_output=True, text=True, timeout=60
        )

    done = await asyncio.to_thread(
        run,
        "--input",
        '{"amount": 5}',
        "--input",
        "account=acct-3",
        "--key",
        "cli-1",
        "--project",
        str(path),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["trigger_key"], result["group"]) == ("manual:payout-by-hand:cli-1", "acct-3")

    refused = await asyncio.to_thread(run, "--input", "account=a", "--project", str(path))
    assert refused.returncode == 2
    assert "missing input(s) 'amount'" in refused.stderr

    [(kafka_key, record)] = await triggers_on_topic(settings)
    assert (kafka_key, record.trigger_key, record.payload) == (
        "acct-3",
        "manual:payout-by-hand:cli-1",
        {"amount": 5, "account": "acct-3"},
    )


async def test_rflow_run_wait_follows_the_run_step_by_step(settings, worker, tmp_path):
    path = tmp_path / "project.yaml"  # the worker's project
    env = {**os.environ, **settings.to_env()}
    done = await asyncio.to_thread(
        subprocess.run,
        [
            *(sys.executable, "-m", "rflow.cli", "run", "payout-by-hand"),
            *("--input", "account=acct-1", "--input", "amount=3", "--key", "wait-1"),
            *("--project", str(path), "--wait", "--timeout", "60"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    rid = run_id("payout-by-hand", "manual:payout-by-hand:wait-1")
    assert done.stdout.strip() == f"run {rid} succeeded"
    progress = done.stderr.splitlines()
    assert progress[0] == f"manual:payout-by-hand:wait-1 -> run {rid}"
    assert progress[1].split()[:2] == ["log", "succeeded"]


LIMIT = 1 << 20


def body_of(size: int) -> bytes:
    """A JSON array of exactly ``size`` bytes (empty for 0, ``[]`` for 2)."""
    if size < 4:
        return {0: b"", 2: b"[]"}[size]
    return b'["' + b"a" * (size - 4) + b'"]'


async def test_bodies_of_every_size_up_to_and_over_the_limit(settings, worker):
    """Up to the limit a body is taken (or refused as too big for one record), over it
    refused before anything is read into a record; the worker answers throughout."""
    sizes = [0, 2, 10, 100, 1000, 10_000, 100_000, 500_000, 1_000_000, LIMIT - 600]
    sizes += [LIMIT - 1, LIMIT, LIMIT + 1, 2 * LIMIT, 8 * LIMIT]
    taken = 0
    for size in sizes:
        body = body_of(size)
        assert len(body) == size
        status, reply, _ = await post(worker, "/partners/acme", body, {"X-API-Key": SECRET})
        if size == 0:
            assert status == 400 and reply["error"], (size, reply)
        elif size > LIMIT:
            assert (status, reply) == (
                413,
                {"error": f"request body of {size} bytes is over the {LIMIT}-byte limit"},
            ), size
        elif status == 413:  # the body fits, its record (body, headers, envelope) does not
            assert size > LIMIT - 1000 and "record limit" in reply["error"], (size, reply)
        else:
            assert status == 202, (size, status, reply)
            taken += 1
    assert taken >= 8
    records = await triggers_on_topic(settings)
    assert len(records) == taken
    assert sorted(len(json.dumps(r.payload["body"])) for _, r in records) == sorted(
        s for s in sizes[1 : taken + 1]
    )


STRIPE_LIKE = """
workflows:
  invoices:
    trigger:
      webhook:
        path: /hooks/invoices
        auth:
          type: hmac
          secret_env: RFLOW_TEST_HOOK_SECRET
          header: Stripe-Signature
          timestamp_header: Stripe-Signature
          signature_prefix: "v1="
          tolerance: 5m
    steps:
      - id: log
        command: { name: log, args: { message: "${{ trigger.body.id }}" } }
"""


async def test_a_replayed_timestamped_webhook_is_refused(
    settings, worker_factory, tmp_path, monkeypatch
):
    import time

    from rflow.ingress.auth import sign_timestamped

    path = tmp_path / "project.yaml"
    path.write_text(STRIPE_LIKE)
    monkeypatch.setenv("RFLOW_TEST_HOOK_SECRET", SECRET)
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    body = json.dumps({"id": "in_1", "type": "invoice.paid"}).encode()

    def stripe(at: int) -> dict[str, str]:
        return {"Stripe-Signature": f"t={at},v1={sign_timestamped(SECRET, body, at)}"}

    now = int(time.time())
    first = await post(worker, "/hooks/invoices", body, stripe(now))
    assert (first[0], first[1]["accepted"]) == (202, True), first
    replay = await post(worker, "/hooks/invoices", body, stripe(now))
    assert replay[:2] == (
        401,
        {
            "error": "this signature was used already: a replayed delivery is refused (each "
            "delivery is signed anew, with its own time)"
        },
    )
    stale = await post(worker, "/hooks/invoices", body, stripe(now - 600))
    assert stale[0] == 401 and "outside the tolerance of 5m" in stale[1]["error"], stale
    forged = {"Stripe-Signature": f"t={now},v1={sign_timestamped('guess', body, now)}"}
    assert (await post(worker, "/hooks/invoices", body, forged))[:2] == (
        401,
        {"error": "signature does not match"},
    )
    # Signed anew, with its own time, the same event is a new delivery.
    resent = await post(worker, "/hooks/invoices", body, stripe(now + 1))
    assert resent[0] == 202, resent

    records = await triggers_on_topic(settings)
    assert sorted(r.trigger_key == first[1]["trigger_key"] for _, r in records) == [False, True]
    assert len(records) == 2
