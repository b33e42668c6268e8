"""The webhook ingress without services: every answer, in the order the checks run."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest

from rflow.ingress import WebhookIngress, sign
from rflow.ingress.request import RECORD_LIMIT
from rflow.storage import Unavailable
from rflow.storage.webhooks import STALE_AFTER
from tests.unit.ingress.webhook_fakes import (
    NOW,
    Clock,
    FakeProducer,
    MemoryDeliveries,
    project,
)

SECRET = "It's a Secret to Everybody"
PROJECT = project(
    """
    workflows:
      withdrawals:
        concurrency: { group: "${{ trigger.body.account }}" }
        trigger:
          webhook:
            path: /hooks/withdrawals
            auth: { type: hmac, secret_env: HOOK_SECRET }
            idempotency_header: X-Request-Id
            idempotency_ttl: 1h
            event_type_field: $.type
            accepted_event_types: [withdrawal.requested]
        steps:
          - id: log
            command: { name: log, args: { message: "${{ trigger.body.account }}" } }
      keyed:
        trigger:
          webhook:
            path: /hooks/keyed
            auth: { type: api_key, secret_env: HOOK_SECRET }
        steps:
          - id: log
            command: { name: log, args: { message: hi } }
      open:
        trigger:
          webhook: { path: /open, event_type_field: "$.event.kind" }
        steps:
          - id: log
            command: { name: log, args: { message: hi } }
    """
)
BODY = json.dumps({"type": "withdrawal.requested", "account": "acct-7", "amount_wei": 10**30})


class Harness:
    def __init__(self, *, env=None, max_body_bytes=1 << 20, paused=lambda name: None):
        self.clock = Clock()
        self.producer = FakeProducer()
        self.deliveries = MemoryDeliveries(self.clock)
        self.ingress = WebhookIngress(
            PROJECT,
            {"HOOK_SECRET": SECRET} if env is None else env,
            self.producer,
            self.deliveries,
            self.clock,
            max_body_bytes=max_body_bytes,
            paused=paused,
        )

    async def post(self, path="/hooks/withdrawals", body=BODY, *, key=None, signed=True, **headers):
        raw = body.encode() if isinstance(body, str) else body
        sent = {"Content-Type": "application/json", **headers}
        if signed:
            sent["X-Hub-Signature-256"] = sign(SECRET, raw)
        if key is not None:
            sent["X-Request-Id"] = key
        return await self.ingress.handle(path, sent, raw, {"source": "test"})


@pytest.fixture
def hub() -> Harness:
    return Harness()


async def test_a_delivery_for_a_paused_workflow_is_produced_and_said_held():
    hub = Harness(paused=lambda name: "by operator: audit" if name == "withdrawals" else None)
    reply = await hub.post(key="d-9")
    assert (reply.status, reply.body["accepted"], reply.body["status"]) == (202, True, "held")
    assert reply.body["held"] == "workflow withdrawals is paused (by operator: audit)"
    assert [r.trigger_key for r in hub.producer.records] == ["webhook:withdrawals:d-9:1"]


async def test_a_signed_delivery_is_produced_then_acknowledged(hub):
    reply = await hub.post(key="d-1", **{"X-GitHub-Event": "withdrawal"})
    assert (reply.status, reply.body) == (
        202,
        {"accepted": True, "trigger_key": "webhook:withdrawals:d-1:1", "duplicate": False},
    )
    [record] = hub.producer.records
    assert record.workflow == "withdrawals"
    assert record.source == "webhook"
    assert record.trigger_key == "webhook:withdrawals:d-1:1"
    assert record.group == "acct-7"
    assert record.partition_key == "acct-7"
    assert record.received_at == NOW
    assert record.payload == {
        "path": "/hooks/withdrawals",
        "body": {"type": "withdrawal.requested", "account": "acct-7", "amount_wei": 10**30},
        "headers": {
            "content-type": "application/json",
            "x-github-event": "withdrawal",
            "x-request-id": "d-1",
        },
        "query": {"source": "test"},
        "event_type": "withdrawal.requested",
        "delivery": "d-1",
    }
    assert hub.deliveries.rows[("withdrawals", "d-1")].status == "accepted"


async def test_unknown_paths_are_404(hub):
    for path in ["/hooks/nope", "/hooks/withdrawals/", "/HOOKS/withdrawals"]:
        reply = await hub.post(path)
        assert (reply.status, reply.body) == (404, {"error": f"no webhook at {path}"})


async def test_size_limit_comes_before_authentication():
    hub = Harness(max_body_bytes=16)
    declared = await hub.post(signed=False, **{"Content-Length": str(len(BODY))})
    assert (declared.status, declared.body["error"]) == (
        413,
        f"request body of {len(BODY)} bytes is over the 16-byte limit",
    )
    actual = await hub.post(signed=False)
    assert (actual.status, actual.body["error"]) == (413, "request body is over the 16-byte limit")
    assert hub.producer.records == []


async def test_missing_and_invalid_signatures_are_401_and_produce_nothing(hub):
    missing = await hub.post(signed=False, key="d-1")
    assert (missing.status, missing.body) == (401, {"error": "missing X-Hub-Signature-256 header"})
    forged = await hub.post(
        signed=False, key="d-1", **{"X-Hub-Signature-256": sign("guess", BODY.encode())}
    )
    assert (forged.status, forged.body) == (401, {"error": "signature does not match"})
    assert hub.producer.records == []
    assert hub.deliveries.rows == {}


async def test_header_names_are_case_insensitive(hub):
    raw = BODY.encode()
    reply = await hub.ingress.handle(
        "/hooks/withdrawals",
        {"x-HUB-signature-256": sign(SECRET, raw), "X-REQUEST-ID": "d-9"},
        raw,
        {},
    )
    assert reply.body["trigger_key"] == "webhook:withdrawals:d-9:1"


async def test_an_unset_secret_is_a_server_error():
    hub = Harness(env={})
    reply = await hub.post()
    assert (reply.status, reply.body) == (500, {"error": "webhook secret not configured"})


async def test_api_key(hub):
    ok = await hub.post("/hooks/keyed", signed=False, **{"X-API-Key": SECRET})
    assert ok.status == 202
    assert "x-api-key" not in hub.producer.records[0].payload["headers"]
    missing = await hub.post("/hooks/keyed", signed=False)
    assert (missing.status, missing.body) == (401, {"error": "missing X-API-Key header"})
    wrong = await hub.post("/hooks/keyed", signed=False, **{"x-api-key": "guess"})
    assert (wrong.status, wrong.body) == (401, {"error": "API key does not match"})


async def test_bodies_that_are_not_json_objects_or_arrays_are_400(hub):
    reply = await hub.post(body="not json")
    assert reply.status == 400
    assert reply.body["error"].startswith("body is not JSON: ")
    scalar = await hub.post(body='"withdrawal"')
    assert (scalar.status, scalar.body) == (
        400,
        {"error": "body must be a JSON object or array, got a string"},
    )


async def test_event_type_filter(hub):
    ignored = await hub.post(body=json.dumps({"type": "deposit", "account": "a"}), key="d-2")
    assert (ignored.status, ignored.body) == (
        202,
        {"accepted": False, "ignored": "event type 'deposit' is not accepted"},
    )
    missing = await hub.post(body=json.dumps({"account": "a"}))
    assert (missing.status, missing.body) == (
        422,
        {"error": "the body has no event type at $.type"},
    )
    not_scalar = await hub.post(body=json.dumps({"type": {"a": 1}, "account": "a"}))
    assert (not_scalar.status, not_scalar.body) == (
        422,
        {"error": "the event type at $.type must be a string, not {'a': 1}"},
    )
    array = await hub.post(body="[1, 2]")
    assert array.status == 422
    assert hub.producer.records == []
    assert hub.deliveries.rows == {}  # an ignored delivery claims nothing


async def test_every_type_is_accepted_without_a_list(hub):
    reply = await hub.post("/open", json.dumps({"event": {"kind": 7}}), signed=False)
    assert reply.status == 202
    assert hub.producer.records[0].payload["event_type"] == "7"


async def test_a_duplicate_within_the_ttl_is_acknowledged_and_ignored(hub):
    first = await hub.post(key="d-1")
    hub.clock.advance(timedelta(minutes=59))
    again = await hub.post(key="d-1")
    assert (again.status, again.body) == (
        200,
        {"accepted": True, "duplicate": True, "trigger_key": first.body["trigger_key"]},
    )
    assert len(hub.producer.records) == 1


async def test_after_the_ttl_the_same_key_fires_a_new_generation(hub):
    await hub.post(key="d-1")
    hub.clock.advance(timedelta(hours=1, seconds=1))
    again = await hub.post(key="d-1")
    assert (again.status, again.body["trigger_key"]) == (202, "webhook:withdrawals:d-1:2")
    assert [r.trigger_key for r in hub.producer.records] == [
        "webhook:withdrawals:d-1:1",
        "webhook:withdrawals:d-1:2",
    ]


async def test_without_the_header_every_request_is_a_new_firing(hub):
    first = await hub.post()
    second = await hub.post()
    assert first.status == second.status == 202
    keys = [r.trigger_key for r in hub.producer.records]
    assert len(set(keys)) == 2
    for key in keys:
        prefix, _, tail = key.rpartition(":")
        assert prefix == "webhook:withdrawals"
        assert uuid.UUID(hex=tail)
    assert hub.deliveries.rows == {}


async def test_a_failed_produce_is_503_and_the_retry_keeps_the_generation(hub):
    hub.producer.fail_next = 1
    failed = await hub.post(key="d-1")
    assert (failed.status, failed.body) == (
        503,
        {"error": "the firing could not be stored in Kafka; retry later"},
    )
    assert failed.headers == {"Retry-After": "5"}
    retry = await hub.post(key="d-1")
    assert (retry.status, retry.body["trigger_key"]) == (202, "webhook:withdrawals:d-1:1")
    assert len(hub.producer.records) == 1


async def test_a_delivery_being_handled_is_409(hub):
    # A claim that was never answered (the worker is still producing, or died).
    await hub.deliveries.claim("withdrawals", "d-1", claim_id=uuid.uuid4(), ttl=timedelta(hours=1))
    busy = await hub.post(key="d-1")
    assert (busy.status, busy.body) == (
        409,
        {"error": "a delivery with idempotency key 'd-1' is being handled; retry later"},
    )
    assert busy.headers == {"Retry-After": "5"}
    # Once the claim is stale, a retry takes it over under the same generation.
    hub.clock.advance(STALE_AFTER + timedelta(seconds=1))
    taken = await hub.post(key="d-1")
    assert (taken.status, taken.body["trigger_key"]) == (202, "webhook:withdrawals:d-1:1")


async def test_an_unavailable_store_is_503(hub):
    hub.deliveries.down = True
    reply = await hub.post(key="d-1")
    assert (reply.status, reply.body) == (
        503,
        {"error": "the idempotency store is unavailable; retry later"},
    )
    assert hub.producer.records == []


async def test_a_store_failure_after_producing_still_acknowledges(hub):
    class FailingAccept(MemoryDeliveries):
        async def accept(self, *args, **kwargs):
            raise Unavailable("gone")

    hub.ingress._deliveries = FailingAccept(hub.clock)
    reply = await hub.post(key="d-1")
    assert reply.status == 202
    assert len(hub.producer.records) == 1


async def test_an_overlong_idempotency_key_is_400(hub):
    reply = await hub.post(key="k" * 201)
    assert (reply.status, reply.body) == (
        400,
        {"error": "the X-Request-Id header is longer than 200 characters"},
    )


async def test_an_empty_concurrency_group_is_422(hub):
    reply = await hub.post(body=json.dumps({"type": "withdrawal.requested", "account": ""}))
    assert reply.status == 422
    assert "concurrency group" in reply.body["error"]


async def test_a_body_that_would_make_an_oversized_record_is_413():
    hub = Harness(max_body_bytes=4 << 20)
    body = json.dumps({"event": {"kind": "x"}, "blob": "a" * RECORD_LIMIT})
    reply = await hub.post("/open", body, signed=False)
    assert reply.status == 413
    assert "record limit" in reply.body["error"]
    assert hub.producer.records == []


async def test_an_unsupported_event_type_path_is_a_server_error():
    bad = project(
        """
        workflows:
          w:
            trigger:
              webhook: { path: /hooks/w, event_type_field: "type" }
            steps:
              - id: log
                command: { name: log, args: { message: hi } }
        """
    )
    ingress = WebhookIngress(bad, {}, FakeProducer(), MemoryDeliveries(Clock()), Clock())
    reply = await ingress.handle("/hooks/w", {}, b'{"type": "x"}', {})
    assert (reply.status, reply.body) == (
        500,
        {"error": "webhook event_type_field is not a supported JSON path"},
    )


async def test_the_routes_are_the_current_projects_so_a_deploy_adds_and_removes_webhooks():
    keyed_only = PROJECT.model_copy(update={"workflows": {"keyed": PROJECT.workflows["keyed"]}})
    current = {"project": keyed_only}
    producer = FakeProducer()
    ingress = WebhookIngress(
        lambda: current["project"],
        {"HOOK_SECRET": SECRET},
        producer,
        MemoryDeliveries(Clock()),
        Clock(),
    )
    assert set(ingress.routes) == {"/hooks/keyed"}
    assert (await ingress.handle("/open", {}, b"{}", {})).status == 404

    current["project"] = PROJECT  # deployed: /open and /hooks/withdrawals are added
    assert set(ingress.routes) == {"/hooks/withdrawals", "/hooks/keyed", "/open"}
    reply = await ingress.handle("/open", {}, b'{"event": {"kind": "k"}}', {})
    assert reply.status == 202, reply.body
    assert [r.workflow for r in producer.records] == ["open"]

    current["project"] = keyed_only  # and removed again
    reply = await ingress.handle("/open", {}, b'{"event": {"kind": "k"}}', {})
    assert (reply.status, reply.body) == (404, {"error": "no webhook at /open"})
    assert len(producer.records) == 1
