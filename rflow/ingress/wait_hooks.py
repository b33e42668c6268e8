"""Webhook requests that answer parked ``wait_for: { webhook: ... }`` steps.

A webhook wait is answered at its resume URL, ``<path>/<token>``: the token is made for
that wait alone (:mod:`rflow.waiturls`), and its row keeps only the token's hash, which a
request's last path segment is hashed and looked up by. Then the request must pass the
wait's own auth (none, an API key, an HMAC signature, or a timestamped one, whose
signature is taken once, so a replay is refused) and carry every ``match`` value; the
wait is answered once (the first answer wins) and its run resumes with the request as
output. A refused request is answered 401 with the reason, and the run keeps waiting.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from pydantic import TypeAdapter

from rflow import waiturls
from rflow.codecs import RunEvent
from rflow.engine import WaitResolved
from rflow.ingress import jsonpath
from rflow.ingress.auth import Signed, auth_header, authenticate
from rflow.ingress.request import (
    BodyError,
    Reply,
    json_document,
    lower_keys,
    payload_headers,
    refuse,
    size_refusal,
)
from rflow.lang.model.triggers import WebhookAuth
from rflow.storage import StorageError

_AUTH = TypeAdapter(WebhookAuth)

NO_OPEN_WAIT = (
    "no open wait has this URL's token: the token is wrong, or its wait was answered or "
    "timed out already"
)
REPLAYED = (
    "this signature was used already: a replayed delivery is refused (each delivery is "
    "signed anew, with its own time); the run keeps waiting"
)


class WaitStore(Protocol):
    """Where open webhook waits are found and answered."""

    async def webhook_waits(self, path: str) -> list[dict[str, Any]]: ...

    async def webhook_wait_by_token(self, token_hash: bytes) -> dict[str, Any] | None: ...

    async def resolve(self, wait_id: str, answer: Any, at: datetime) -> dict[str, Any] | None: ...


class SignatureStore(Protocol):
    """Where the timestamped signatures taken are kept (the webhook triggers' store)."""

    async def claim_signature(
        self,
        scope: str,
        signature: str,
        *,
        claim_id: uuid.UUID,
        expires_at: datetime,
        now: datetime,
    ) -> bool: ...


class EventSender(Protocol):
    async def send(self, topic: str, key: str, record: Any) -> tuple[int, int]: ...


def matches(doc: Any, match: Mapping[str, Any]) -> bool:
    """Whether the JSON document carries every ``path -> value`` of ``match``."""
    for path, expected in match.items():
        try:
            found = jsonpath.extract(doc, path if path.startswith("$") else f"$.{path}")
        except (jsonpath.JsonPathError, jsonpath.PathNotFound, ValueError, KeyError):
            return False
        if found != expected:
            return False
    return True


class WaitHooks:
    """Answers webhook waits; ``handle`` returns ``None`` when no wait is at the path."""

    def __init__(
        self,
        store: WaitStore,
        sender: EventSender,
        env: Mapping[str, str],
        now: Callable[[], datetime],
        *,
        max_body_bytes: int,
        signatures: SignatureStore | None = None,
    ) -> None:
        self.store = store
        self.sender = sender
        self.env = env
        self.now = now
        self.max_body_bytes = max_body_bytes
        self.signatures = signatures

    async def find(self, path: str) -> tuple[dict[str, Any] | None, Reply | None]:
        """The open wait whose resume URL is ``path``; else, for a path that is a wait's
        (a token no open wait has, or a wait's path without one), the refusal; else
        nothing (not a wait's path)."""
        prefix, token = waiturls.split(path)
        if waiturls.looks_like_token(token):
            # No trigger is at this path (the caller asked them first): a token's shape
            # says it is meant for a wait, open or not.
            wait = await self.store.webhook_wait_by_token(waiturls.token_hash(token))
            if wait is not None and waiturls.path_of(wait["spec"].get("webhook")) == prefix:
                return wait, None
            return None, refuse(401, NO_OPEN_WAIT)
        if path.rstrip("/") == waiturls.DEFAULT_PATH or await self.store.webhook_waits(path):
            return None, refuse(
                401,
                "a webhook wait is answered at its resume URL, <path>/<token> (rflow runs "
                "show, the console or ${{ wait.url }} give it): the path alone is refused",
            )
        return None, None

    async def handle(self, path: str, headers: Mapping[str, str], body: bytes) -> Reply | None:
        wait, refusal = await self.find(path)
        if wait is None:
            return refusal
        headers = lower_keys(headers)
        refusal = size_refusal(headers, body, self.max_body_bytes)
        if refusal is not None:
            return refusal
        spec = wait["spec"]["webhook"]
        auth = _AUTH.validate_python(spec.get("auth") or {"type": "none"})
        now = self.now()
        passed = authenticate(auth, headers, body, self.env, workflow=wait["workflow"], now=now)
        if isinstance(passed, Reply):
            return passed
        try:
            doc = json_document(body)
        except BodyError as exc:
            return refuse(400, str(exc))
        if isinstance(passed, Signed):
            refusal = await self._take(wait, passed, now)
            if refusal is not None:
                return refusal
        if not matches(doc, spec.get("match") or {}):
            ignored = "the request does not carry the wait's match values; the run keeps waiting"
            return Reply(202, {"accepted": False, "ignored": ignored})
        drop = [header] if (header := auth_header(auth)) else []
        answer = {"body": doc, "headers": payload_headers(headers, drop=drop)}
        resolved = await self.store.resolve(wait["wait_id"], answer, now)
        if resolved is None:
            return refuse(409, "the wait was answered already (the first answer wins)")
        event = WaitResolved(
            run_id=wait["run_id"], path=wait["path"], wait_id=wait["wait_id"], payload=answer
        )
        await self.sender.send("rflow.runs", wait["partition_key"], RunEvent(event=event))
        return Reply(202, {"accepted": True, "resumed": [wait["run_id"]]})

    async def _take(self, wait: dict[str, Any], signed: Signed, now: datetime) -> Reply | None:
        """Take a timestamped signature once per wait: a signature seen before within
        the tolerance is a replay (401)."""
        if self.signatures is None:
            return refuse(503, "the replay store is unavailable; retry later")
        try:
            fresh = await self.signatures.claim_signature(
                f"wait:{wait['wait_id']}",
                signed.signature,
                claim_id=uuid.uuid4(),
                expires_at=signed.expires_at,
                now=now,
            )
        except StorageError:
            return refuse(503, "the replay store is unavailable; retry later")
        return None if fresh else refuse(401, REPLAYED)
