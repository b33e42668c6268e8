"""The webhook ingress: one HTTP endpoint per webhook trigger, independent of any framework.

:meth:`WebhookIngress.handle` takes a request's path, headers, raw body and query and
answers with a :class:`~rflow.ingress.request.Reply`. Checks run in this order, each
answer saying why:

1. the path routes to a workflow's webhook trigger (404);
2. the body is within the size limit (413);
3. authentication: api_key or a ``sha256=<hex>`` HMAC signature, or a timestamped
   one whose time is within the tolerance (401; 500 when the secret variable is unset);
4. the body is a JSON object or array (400);
5. the event type at ``event_type_field`` is accepted (422 when missing; an unaccepted
   type is acknowledged with 202 and ignored);
6. a timestamped signature is taken, once (one seen before within the tolerance: 401,
   a replay), then the idempotency key is claimed (a duplicate within the TTL: 200; a
   delivery of the same key still being handled: 409);
7. the firing is produced to Kafka with ``acks=all`` (503 when Kafka refuses, after
   releasing the claim so the sender's retry works); only then 202.

Trigger keys: ``webhook:<workflow>:<idempotency key>:<generation>`` when the request
carries the idempotency header, else ``webhook:<workflow>:<uuid>`` (each such request
is a new firing). A workflow's webhook triggers after its first (or any with an id
other than ``webhook``) begin their keys with ``webhook@<id>`` instead, and keep their
idempotency keys apart: each trigger has a key space of its own.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from rflow.codecs import TriggerRecord
from rflow.deployment import Derived, ProjectAt, project_reader
from rflow.failures import RflowError
from rflow.ingress import jsonpath
from rflow.ingress.auth import Signed, auth_header, authenticate
from rflow.ingress.request import (
    DEFAULT_MAX_BODY_BYTES,
    BodyError,
    Reply,
    json_document,
    lower_keys,
    payload_headers,
    record_refusal,
    refuse,
    size_refusal,
)
from rflow.lang.model import Project, Workflow
from rflow.lang.model.triggers import WebhookSpec, key_prefix
from rflow.storage import StorageError
from rflow.storage.webhooks import Claim, ClaimOutcome
from rflow.streams.producer import ProduceError
from rflow.triggering import group_of, paused_answer, trigger_record

log = logging.getLogger(__name__)

MAX_IDEMPOTENCY_KEY = 200
"""Longest idempotency key accepted, in characters (the trigger key must stay short)."""

PRODUCE_TIMEOUT = 20.0
"""Seconds to wait for Kafka's acknowledgement; shorter than the claim's stale time."""

RETRY_AFTER = 5
"""Seconds a sender is asked to wait before retrying a 409 or 503."""

EVENT_TYPE_FIELD_INVALID = "webhook event_type_field is not a supported JSON path"


class Deliveries(Protocol):
    """The durable idempotency claims and the timestamped signatures accepted
    (:mod:`rflow.storage.webhooks` behind a pool).

    Methods raise :class:`~rflow.storage.StorageError` when the store cannot answer.
    """

    async def claim_signature(
        self,
        scope: str,
        signature: str,
        *,
        claim_id: uuid.UUID,
        expires_at: datetime,
        now: datetime,
    ) -> bool: ...

    async def release_signature(
        self, scope: str, signature: str, *, claim_id: uuid.UUID
    ) -> bool: ...

    async def claim(
        self, workflow: str, key: str, *, claim_id: uuid.UUID, ttl: timedelta
    ) -> Claim: ...

    async def accept(self, workflow: str, key: str, *, generation: int, ttl: timedelta) -> bool: ...

    async def release(self, workflow: str, key: str, *, claim_id: uuid.UUID) -> bool: ...


class TriggerProducer(Protocol):
    """Produces a firing with ``acks=all`` (:class:`~rflow.streams.producer.Producer`).

    Raises :class:`~rflow.streams.producer.ProduceError` when Kafka does not acknowledge.
    """

    async def trigger(self, record: TriggerRecord) -> tuple[int, int]: ...


@dataclass(frozen=True)
class Route:
    """The workflow behind one webhook path, and which of its triggers it is."""

    name: str
    workflow: Workflow
    spec: WebhookSpec
    trigger_id: str = "webhook"

    @property
    def prefix(self) -> str:
        """How the trigger keys of this webhook begin (``webhook`` or ``webhook@<id>``)."""
        return key_prefix("webhook", self.trigger_id)

    @property
    def scope(self) -> str:
        """Where its idempotency keys are claimed: the workflow's name for its ``webhook``
        trigger, ``<workflow>@<id>`` for another, so two triggers never share a key."""
        return self.name if self.trigger_id == "webhook" else f"{self.name}@{self.trigger_id}"


def webhook_routes(project: Project | None) -> dict[str, Route]:
    """Every webhook trigger of ``project``, by path (the validator keeps paths unique)."""
    routes: dict[str, Route] = {}
    for name, workflow in (project.workflows if project else {}).items():
        for trigger_id, trigger in workflow.triggers_of("webhook"):
            spec = trigger.webhook
            routes[spec.path] = Route(name, workflow, spec, trigger_id)
    return routes


def _checked_routes(project: Project | None) -> dict[str, Route]:
    routes = webhook_routes(project)
    for route in routes.values():
        # A path outside the dialect is the operator's error: say so now, in the log,
        # and answer that webhook's requests with 500 rather than stop the worker.
        try:
            if route.spec.event_type_field:
                jsonpath.parse(route.spec.event_type_field)
        except jsonpath.JsonPathError as exc:
            log.error("webhook of workflow %r: event_type_field: %s", route.name, exc)
    return routes


def event_type_of(doc: Any, field: str) -> str:
    """The event type at ``field`` in ``doc``: a string, or an integer as its digits.

    Raises :class:`ValueError` with the reason when there is none or it is not scalar.
    """
    try:
        value = jsonpath.extract(doc, field)
    except jsonpath.PathNotFound:
        raise ValueError(f"the body has no event type at {field}") from None
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"the event type at {field} must be a string, not {value!r}")


class WebhookIngress:
    """Turns webhook requests into trigger firings on Kafka, each acknowledged once durable."""

    def __init__(
        self,
        project: Project | ProjectAt | None,
        env: Mapping[str, str],
        producer: TriggerProducer,
        deliveries: Deliveries,
        clock: Callable[[], datetime],
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        new_id: Callable[[], uuid.UUID] = uuid.uuid4,
        paused: Callable[[str], str | None] = lambda name: None,
    ) -> None:
        self._routes = Derived(project_reader(project), _checked_routes)
        self._paused = paused
        self.max_body_bytes = max_body_bytes
        self._env = env
        self._producer = producer
        self._deliveries = deliveries
        self._clock = clock
        self._new_id = new_id

    @property
    def routes(self) -> dict[str, Route]:
        """The webhook triggers of the current project, by path (a deploy changes them)."""
        return self._routes()

    async def handle(
        self, path: str, headers: Mapping[str, str], body: bytes, query: Mapping[str, str]
    ) -> Reply:
        """Answer one POST to ``path``."""
        route = self.routes.get(path)  # read once: a deploy may change the routes meanwhile
        if route is None:
            return refuse(404, f"no webhook at {path}")
        headers = lower_keys(headers)
        spec = route.spec
        refusal = size_refusal(headers, body, self.max_body_bytes)
        if refusal is not None:
            return refusal
        passed = authenticate(
            spec.auth, headers, body, self._env, workflow=route.name, now=self._clock()
        )
        if isinstance(passed, Reply):
            return passed
        try:
            doc = json_document(body)
        except BodyError as exc:
            return refuse(400, str(exc))
        event_type = None
        if spec.event_type_field:
            try:
                event_type = event_type_of(doc, spec.event_type_field)
            except jsonpath.JsonPathError:
                return refuse(500, EVENT_TYPE_FIELD_INVALID)
            except ValueError as exc:
                return refuse(422, str(exc))
            if spec.accepted_event_types and event_type not in spec.accepted_event_types:
                ignored = f"event type {event_type!r} is not accepted"
                return Reply(202, {"accepted": False, "ignored": ignored})
        key = None
        if spec.idempotency_header:
            key = headers.get(spec.idempotency_header.lower(), "").strip() or None
            if key is not None and len(key) > MAX_IDEMPOTENCY_KEY:
                return refuse(
                    400,
                    f"the {spec.idempotency_header} header is longer than "
                    f"{MAX_IDEMPOTENCY_KEY} characters",
                )
        delivery = key or self._new_id().hex
        payload = {
            "path": path,
            "body": doc,
            "headers": payload_headers(headers, drop=filter(None, [auth_header(spec.auth)])),
            "query": dict(query.items()),
            "event_type": event_type,
            "delivery": delivery,
        }
        try:
            group_of(route.workflow, payload)
        except RflowError as exc:
            return refuse(422, exc.message)
        received_at = self._clock()

        def record(trigger_key: str) -> TriggerRecord:
            return trigger_record(
                route.name,
                route.workflow,
                source="webhook",
                trigger_key=trigger_key,
                payload=payload,
                received_at=received_at,
            )

        if key is None:
            firing = record(f"{route.prefix}:{route.name}:{delivery}")
            refusal = record_refusal(firing)
            fire = functools.partial(self._fire, firing, route.workflow)
        else:
            refusal = record_refusal(record(f"{route.prefix}:{route.name}:{key}:0"))
            fire = functools.partial(self._fire_once, route, key, record)
        if refusal is not None:
            return refusal
        if passed is None:
            return await fire()
        return await self._fire_signed(route, passed, received_at, fire)

    async def _fire_signed(
        self,
        route: Route,
        signed: Signed,
        now: datetime,
        fire: Callable[[], Awaitable[Reply]],
    ) -> Reply:
        """Take a timestamped signature once, then ``fire``; a signature seen before
        within the tolerance is a replay (401). A delivery that fired nothing gives its
        signature back, so the sender's retry of it is taken."""
        claim_id = self._new_id()
        try:
            fresh = await self._deliveries.claim_signature(
                route.scope,
                signed.signature,
                claim_id=claim_id,
                expires_at=signed.expires_at,
                now=now,
            )
        except StorageError as exc:
            log.warning("webhook %s: cannot record a signature: %s", route.name, exc)
            return refuse(
                503, "the replay store is unavailable; retry later", retry_after=RETRY_AFTER
            )
        if not fresh:
            return refuse(
                401,
                "this signature was used already: a replayed delivery is refused (each "
                "delivery is signed anew, with its own time)",
            )
        reply = await fire()
        if reply.status >= 300:
            try:
                await self._deliveries.release_signature(
                    route.scope, signed.signature, claim_id=claim_id
                )
            except StorageError as exc:
                # The sender's retry is refused as a replay until the tolerance passes.
                log.warning("webhook %s: cannot release a signature: %s", route.name, exc)
        return reply

    async def _fire_once(
        self, route: Route, key: str, record: Callable[[str], TriggerRecord]
    ) -> Reply:
        """Claim ``key``, produce its generation's firing, then accept (or release) it."""
        ttl = route.spec.idempotency_ttl
        claim_id = self._new_id()
        try:
            claim = await self._deliveries.claim(route.scope, key, claim_id=claim_id, ttl=ttl)
        except StorageError as exc:
            log.warning("webhook %s: cannot claim delivery %r: %s", route.name, key, exc)
            return refuse(
                503, "the idempotency store is unavailable; retry later", retry_after=RETRY_AFTER
            )
        trigger_key = f"{route.prefix}:{route.name}:{key}:{claim.generation}"
        if claim.outcome is ClaimOutcome.DUPLICATE:
            return Reply(200, {"accepted": True, "duplicate": True, "trigger_key": trigger_key})
        if claim.outcome is ClaimOutcome.BUSY:
            return refuse(
                409,
                f"a delivery with idempotency key {key!r} is being handled; retry later",
                retry_after=RETRY_AFTER,
            )
        reply = await self._fire(record(trigger_key), route.workflow)
        if reply.status != 202:
            try:
                await self._deliveries.release(route.scope, key, claim_id=claim_id)
            except StorageError as exc:
                # The claim goes stale instead and a retry takes it over then.
                log.warning("webhook %s: cannot release delivery %r: %s", route.name, key, exc)
            return reply
        try:
            await self._deliveries.accept(route.scope, key, generation=claim.generation, ttl=ttl)
        except StorageError as exc:
            # The firing is durable, so the answer stays 202. The claim stays pending; a
            # redelivery after it goes stale re-produces the same trigger key, which the
            # intake agent ignores.
            log.warning("webhook %s: cannot mark delivery %r accepted: %s", route.name, key, exc)
        return reply

    async def _fire(self, record: TriggerRecord, workflow: Workflow) -> Reply:
        """Produce ``record``; 202 once Kafka acknowledged it, 503 if it did not."""
        try:
            await asyncio.wait_for(self._producer.trigger(record), PRODUCE_TIMEOUT)
        except (ProduceError, TimeoutError) as exc:
            log.warning(
                "webhook %s: firing %s not produced: %s", record.workflow, record.trigger_key, exc
            )
            return refuse(
                503, "the firing could not be stored in Kafka; retry later", retry_after=RETRY_AFTER
            )
        body = {"accepted": True, "trigger_key": record.trigger_key, "duplicate": False}
        paused = self._paused(record.workflow)
        if paused is not None:
            # Held, not dropped (its run starts on resume), or skipped (paused_firings: skip).
            body.update(paused_answer(workflow, record.workflow, paused))
        return Reply(202, body)
