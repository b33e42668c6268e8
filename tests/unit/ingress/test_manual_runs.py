"""Manual runs over HTTP without services: checks, keys and answers."""

from __future__ import annotations

import json

import pytest

from rflow.engine.keys import run_id
from rflow.ingress import ManualIngress, ManualRunError, manual_record, manual_workflow
from tests.unit.ingress.webhook_fakes import NOW, Clock, FakeProducer, project

PROJECT = project(
    """
    workflows:
      payout:
        concurrency: { group: "${{ inputs.account }}" }
        trigger:
          manual: { inputs: [account, amount] }
        steps:
          - id: log
            command: { name: log, args: { message: "${{ inputs.amount }}" } }
      bare:
        trigger: { manual: }
        steps:
          - id: log
            command: { name: log, args: { message: hi } }
      hook:
        trigger:
          webhook: { path: /hooks/x }
        steps:
          - id: log
            command: { name: log, args: { message: hi } }
    """
)


@pytest.fixture
def producer() -> FakeProducer:
    return FakeProducer()


@pytest.fixture
def runs(producer) -> ManualIngress:
    return ManualIngress(PROJECT, producer, Clock(), max_body_bytes=1024)


async def test_a_run_is_produced_keyed_by_its_group(runs, producer):
    body = json.dumps({"account": "acct-1", "amount": 5}).encode()
    reply = await runs.handle("payout", {"Idempotency-Key": "req-1"}, body)
    assert (reply.status, reply.body) == (
        202,
        {
            "accepted": True,
            "workflow": "payout",
            "trigger_key": "manual:payout:req-1",
            "run_ids": [run_id("payout", "manual:payout:req-1")],
            "status": "accepted",
        },
    )
    [record] = producer.records
    assert (record.source, record.group, record.payload) == (
        "manual",
        "acct-1",
        {"account": "acct-1", "amount": 5},
    )
    assert record.received_at == NOW


async def test_without_a_key_each_request_is_a_new_run(runs, producer):
    await runs.handle("bare", {}, b"")
    await runs.handle("bare", {}, b"{}")
    keys = {r.trigger_key for r in producer.records}
    assert len(keys) == 2
    assert all(k.startswith("manual:bare:") for k in keys)


@pytest.mark.parametrize(
    ("name", "body", "status", "reason"),
    [
        ("nope", b"{}", 404, "no workflow 'nope'"),
        ("hook", b"{}", 422, "workflow 'hook' has no manual trigger (it starts on webhook)"),
        (
            "payout",
            b'{"account": "a"}',
            422,
            "missing input(s) 'amount' for 'payout'; it takes: account, amount",
        ),
        (
            "payout",
            b'{"account": "a", "amount": 1, "memo": "x"}',
            422,
            "unknown input(s) 'memo' for 'payout'; it takes: account, amount",
        ),
        ("bare", b'{"x": 1}', 422, "unknown input(s) 'x' for 'bare'; it takes no inputs"),
        ("bare", b"[1]", 400, "the inputs must be a JSON object, got an array"),
        ("payout", b"x" * 1025, 413, "request body is over the 1024-byte limit"),
        (
            "payout",
            b'{"account": "", "amount": 1}',
            422,
            "concurrency group '${{ inputs.account }}' is empty for this trigger",
        ),
    ],
)
async def test_refusals(runs, producer, name, body, status, reason):
    reply = await runs.handle(name, {}, body)
    assert (reply.status, reply.body) == (status, {"error": reason})
    assert producer.records == []


async def test_a_body_that_is_not_json(runs):
    reply = await runs.handle("bare", {}, b"{")
    assert reply.status == 400
    assert reply.body["error"].startswith("body is not JSON: ")


async def test_kafka_refusing_is_503(runs, producer):
    producer.fail_next = 1
    reply = await runs.handle("bare", {}, b"")
    assert reply.status == 503
    assert reply.headers == {"Retry-After": "5"}


def test_records_without_a_project_are_keyed_by_trigger_key():
    record = manual_record("any", None, {"x": 1}, run_id="r", received_at=NOW)
    assert (record.trigger_key, record.group, record.partition_key) == (
        "manual:any:r",
        None,
        "manual:any:r",
    )


def test_no_project_means_no_workflow():
    with pytest.raises(ManualRunError) as err:
        manual_workflow(None, "payout")
    assert err.value.status == 404


def test_a_workflow_with_several_triggers_runs_by_hand_through_its_manual_one():
    several = project(
        """
        workflows:
          mixed:
            triggers:
              - schedule: { cron: "@daily" }
              - manual: { inputs: [note] }
            steps: [{ id: a, command: { name: log, args: { message: "${{ inputs.note }}" } } }]
          timed:
            triggers:
              - schedule: { cron: "@daily" }
              - webhook: { path: /hooks/timed }
            steps: [{ id: a, command: { name: log, args: { message: hi } } }]
        """
    )
    workflow = manual_workflow(several, "mixed")
    record = manual_record("mixed", workflow, {"note": "x"}, run_id="r1", received_at=NOW)
    assert (record.trigger_key, record.source) == ("manual:mixed:r1", "manual")
    with pytest.raises(ManualRunError) as err:
        manual_record("mixed", workflow, {}, run_id="r2", received_at=NOW)
    assert err.value.reason == "missing input(s) 'note' for 'mixed'; it takes: note"
    with pytest.raises(ManualRunError) as err:
        manual_workflow(several, "timed")
    assert (err.value.status, err.value.reason) == (
        422,
        "workflow 'timed' has no manual trigger (it starts on schedule, webhook)",
    )
