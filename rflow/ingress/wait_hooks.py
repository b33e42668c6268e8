"""Webhook requests that answer parked ``wait_for: { webhook: ... }`` steps.

A request to a path that no trigger declares is offered to the runs waiting there: it
must pass the wait's own auth and carry every ``match`` value; each matching wait is
answered once (the first answer wins) and its run resumes with the request as output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from pydantic import TypeAdapter

from rflow.codecs import RunEvent
from rflow.engine import WaitResolved
from rflow.ingress import jsonpath
from rflow.ingress.auth import authenticate
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

_AUTH = TypeAdapter(WebhookAuth)


class WaitStore(Protocol):
    """Where open webhook waits are found and answered."""

    async def webhook_waits(self, path: str) -> list[dict[str, Any]]: ...

    async def resolve(self, wait_id: str, answer: Any, at: datetime) -> dict[str, Any] | None: ...


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
    """Answers webhook waits; ``handle`` returns ``None`` when nothing waits at the path."""

    def __init__(
        self,
        store: WaitStore,
        sender: EventSender,
        env: Mapping[str, str],
        now: Callable[[], datetime],
        *,
        max_body_bytes: int,
    ) -> None:
        self.store = store
        self.sender = sender
        self.env = env
        self.now = now
        self.max_body_bytes = max_body_bytes

    async def handle(self, path: str, headers: Mapping[str, str], body: bytes) -> Reply | None:
        waiting = await self.store.webhook_waits(path)
        if not waiting:
            return None
        headers = lower_keys(headers)
        refusal = size_refusal(headers, body, self.max_body_bytes)
        if refusal is not None:
            return refusal
        try:
            doc = json_document(body)
        except BodyError as exc:
            return refuse(400, str(exc))
        resumed: list[str] = []
        refused: Reply | None = None
        for wait in waiting:
            spec = wait["spec"]["webhook"]
            auth = _AUTH.validate_python(spec.get("auth") or {"type": "none"})
            refusal = authenticate(auth, headers, body, self.env, workflow=wait["workflow"])
            if refusal is not None:
                refused = refused or refusal
                continue
            if not matches(doc, spec.get("match") or {}):
                continue
            answer = {"body": doc, "headers": payload_headers(headers)}
            if await self.store.resolve(wait["wait_id"], answer, self.now()) is None:
                continue  # answered by a concurrent request
            event = WaitResolved(
                run_id=wait["run_id"], path=wait["path"], wait_id=wait["wait_id"], payload=answer
            )
            await self.sender.send("rflow.runs", wait["partition_key"], RunEvent(event=event))
            resumed.append(wait["run_id"])
        if resumed:
            return Reply(202, {"accepted": True, "resumed": resumed})
        if refused is not None:
            return refused
        return Reply(202, {"accepted": False, "ignored": "no waiting run matches this request"})
