"""Webhook waits at the door: found by the token in their resume URL, then checked by
their own auth (none, an API key, an HMAC, a timestamped HMAC taken once), with every
refusal a 401 that says why and leaves the run waiting."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from rflow import waiturls
from rflow.ingress.auth import sign, sign_timestamped
from rflow.ingress.wait_hooks import WaitHooks

KEY = b"k" * 32
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SECRET = "wait-secret"


class Store:
    """Open waits in memory, looked up by token hash (as the waits table)."""

    def __init__(self) -> None:
        self.waits: dict[str, dict[str, Any]] = {}
        self.answers: dict[str, Any] = {}

    def park(self, wait_id: str, webhook: dict[str, Any]) -> str:
        self.waits[wait_id] = {
            "wait_id": wait_id,
            "run_id": "r" + wait_id,
            "workflow": "w",
            "path": "confirm",
            "partition_key": "g",
            "spec": {"webhook": webhook},
            "token_hash": waiturls.token_hash(waiturls.token(KEY, wait_id)),
        }
        path = waiturls.path_of(webhook)
        return waiturls.resume_path(path, waiturls.token(KEY, wait_id))

    async def webhook_waits(self, path: str) -> list[dict[str, Any]]:
        return [
            w
            for w in self.waits.values()
            if w["spec"]["webhook"].get("path") == path and w["wait_id"] not in self.answers
        ]

    async def webhook_wait_by_token(self, token_hash: bytes) -> dict[str, Any] | None:
        for wait in self.waits.values():
            if wait["token_hash"] == token_hash and wait["wait_id"] not in self.answers:
                return wait
        return None

    async def resolve(self, wait_id: str, answer: Any, at: datetime) -> dict[str, Any] | None:
        if wait_id in self.answers:
            return None
        self.answers[wait_id] = answer
        return self.waits[wait_id]


class Signatures:
    def __init__(self) -> None:
        self.taken: set[tuple[str, str]] = set()

    async def claim_signature(self, scope, signature, *, claim_id, expires_at, now) -> bool:
        if (scope, signature) in self.taken:
            return False
        self.taken.add((scope, signature))
        return True


class Sender:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, topic: str, key: str, record: Any) -> tuple[int, int]:
        self.sent.append(record)
        return 0, len(self.sent)


@pytest.fixture
def door() -> tuple[WaitHooks, Store, Sender]:
    store, sender = Store(), Sender()
    hooks = WaitHooks(
        store,
        sender,
        {"WAIT_SECRET": SECRET},
        lambda: NOW,
        max_body_bytes=1 << 16,
        signatures=Signatures(),
    )
    return hooks, store, sender


def post(hooks: WaitHooks, path: str, body: dict[str, Any], **headers: str):
    return asyncio.run(hooks.handle(path, headers, orjson.dumps(body)))


BODY = {"status": "ok", "who": "carol"}
RAW = orjson.dumps(BODY)
STAMP = int(NOW.timestamp())


@pytest.mark.parametrize(
    ("auth", "headers"),
    [
        ({"type": "none"}, {}),
        ({"type": "api_key", "secret_env": "WAIT_SECRET"}, {"X-API-Key": SECRET}),
        ({"type": "hmac", "secret_env": "WAIT_SECRET"}, {"X-Hub-Signature-256": sign(SECRET, RAW)}),
        (
            {"type": "hmac", "secret_env": "WAIT_SECRET", "timestamp_header": "X-Timestamp"},
            {
                "X-Timestamp": str(STAMP),
                "X-Hub-Signature-256": "sha256=" + sign_timestamped(SECRET, RAW, STAMP),
            },
        ),
    ],
    ids=["none", "api_key", "hmac", "timestamped"],
)
def test_every_auth_type_answers_the_wait_at_its_resume_url(door, auth, headers):
    hooks, store, sender = door
    url = store.park("w:k:confirm", {"auth": auth, "match": {"status": "ok"}})
    assert url.startswith(waiturls.DEFAULT_PATH + "/")
    reply = post(hooks, url, BODY, **headers)
    assert (reply.status, reply.body) == (202, {"accepted": True, "resumed": ["rw:k:confirm"]})
    [event] = sender.sent
    assert event.event.payload["body"] == BODY
    # The credential is not kept in the run's output.
    kept = {k.lower() for k in store.answers["w:k:confirm"]["headers"]}
    assert not kept & {"x-api-key", "x-hub-signature-256"}
    # Answered: the URL answers nothing more.
    again = post(hooks, url, BODY, **headers)
    assert again.status == 401 and "no open wait has this URL's token" in again.body["error"]


def test_a_wrong_token_or_the_path_alone_is_refused_and_the_run_keeps_waiting(door):
    hooks, store, sender = door
    url = store.park("w:k:confirm", {"path": "/hooks/confirm/r1", "auth": {"type": "none"}})
    assert url.startswith("/hooks/confirm/r1/")
    forged = waiturls.resume_path("/hooks/confirm/r1", waiturls.token(b"x" * 32, "w:k:confirm"))
    for path in (forged, "/hooks/confirm/r1", waiturls.DEFAULT_PATH + "/" + "A" * 43):
        reply = post(hooks, path, BODY)
        assert reply.status == 401, path
    assert "the path alone is refused" in post(hooks, "/hooks/confirm/r1", BODY).body["error"]
    # A token of this wait under another path is not its URL either.
    token = url.rsplit("/", 1)[1]
    assert post(hooks, f"/hooks/elsewhere/{token}", BODY).status == 401
    assert sender.sent == [] and store.answers == {}
    assert post(hooks, url, BODY).status == 202


@pytest.mark.parametrize(
    ("auth", "headers", "why"),
    [
        (
            {"type": "api_key", "secret_env": "WAIT_SECRET"},
            {"X-API-Key": "nope"},
            "API key does not match",
        ),
        ({"type": "api_key", "secret_env": "WAIT_SECRET"}, {}, "missing X-API-Key header"),
        (
            {"type": "hmac", "secret_env": "WAIT_SECRET"},
            {"X-Hub-Signature-256": sign("other", RAW)},
            "signature does not match",
        ),
        (
            {"type": "hmac", "secret_env": "WAIT_SECRET", "timestamp_header": "X-Timestamp"},
            {
                "X-Timestamp": str(STAMP - 3600),
                "X-Hub-Signature-256": "sha256=" + sign_timestamped(SECRET, RAW, STAMP - 3600),
            },
            "outside the tolerance of 5m",
        ),
    ],
    ids=["wrong-key", "no-key", "wrong-signature", "stale"],
)
def test_a_wrong_or_stale_credential_is_refused_with_the_reason(door, auth, headers, why):
    hooks, store, sender = door
    url = store.park("w:k:confirm", {"auth": auth})
    reply = post(hooks, url, BODY, **headers)
    assert reply.status == 401 and why in reply.body["error"]
    assert sender.sent == [] and store.answers == {}


def test_a_timestamped_signature_is_taken_once_even_when_the_request_was_ignored(door):
    hooks, store, _ = door
    auth = {"type": "hmac", "secret_env": "WAIT_SECRET", "timestamp_header": "X-Timestamp"}
    url = store.park("w:k:confirm", {"auth": auth, "match": {"status": "ok"}})
    pending = orjson.dumps({"status": "pending"})
    headers = {
        "X-Timestamp": str(STAMP),
        "X-Hub-Signature-256": "sha256=" + sign_timestamped(SECRET, pending, STAMP),
    }
    first = asyncio.run(hooks.handle(url, headers, pending))
    assert (first.status, first.body["accepted"]) == (202, False)
    replay = asyncio.run(hooks.handle(url, headers, pending))
    assert replay.status == 401 and "used already" in replay.body["error"]
    assert store.answers == {}
    fresh = {
        "X-Timestamp": str(STAMP + 1),
        "X-Hub-Signature-256": "sha256=" + sign_timestamped(SECRET, RAW, STAMP + 1),
    }
    assert asyncio.run(hooks.handle(url, fresh, RAW)).status == 202


def test_a_path_no_wait_uses_is_left_to_the_webhook_triggers(door):
    hooks, _, _ = door
    assert post(hooks, "/hooks/payouts", BODY) is None
    assert post(hooks, "/hooks/payouts/nightly", BODY) is None


def test_tokens_are_made_per_wait_and_never_from_the_run():
    one, two = waiturls.token(KEY, "w:k:confirm"), waiturls.token(KEY, "w:k:confirm#2")
    assert one != two and waiturls.looks_like_token(one) and waiturls.looks_like_token(two)
    assert waiturls.token(b"other-key" * 4, "w:k:confirm") != one
    assert one not in ("w:k:confirm", "rw:k:confirm")
    assert waiturls.url("https://rflow.example.com/", {"path": "/hooks/c"}, KEY, "w:k:confirm") == (
        f"https://rflow.example.com/hooks/c/{one}"
    )
