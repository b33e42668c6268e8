"""The HTTP ingress on the worker's web server: webhooks and manual runs.

- ``POST /hooks/...`` and every other declared webhook path: :class:`WebhookIngress`
  (the request path is matched against the current project's triggers' ``path``
  exactly, so a deploy adds and removes webhooks without a restart);
- ``POST /api/workflows/{name}/runs``: :class:`ManualIngress`, the body being the inputs.

The worker has one ingress producer, started on the first request and stopped with the
app, and keeps idempotency claims in Postgres through the app's :class:`Database`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import psycopg
from aiohttp import web as aiohttp_web
from faust.web import Request, Response, View
from mode import Service

from rflow.codecs import TriggerRecord, json
from rflow.ingress import DEFAULT_MAX_BODY_BYTES, ManualIngress, Reply, WebhookIngress
from rflow.ingress.wait_hooks import WaitHooks
from rflow.settings import Settings
from rflow.storage import Unavailable, waits, webhooks
from rflow.streams.database import Database
from rflow.streams.producer import LazyProducer

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

T = TypeVar("T")

WEBHOOK_PREFIX = "/hooks/"
"""Every path under this prefix is answered by the webhook ingress (404 with a reason
for paths no trigger declares); declared paths outside it are mounted one by one."""

STORE_TIMEOUT = 10.0
"""Seconds a request waits for Postgres before answering 503 (senders time out too)."""

_READ_CHUNK = 64 * 1024


class IngressProducer(Service):
    """The worker's one Kafka producer for ingress: started on first use, stopped with the app.

    Starting lazily keeps workers that never receive a request from holding a producer,
    and a failed start (Kafka away) is retried by the next request.
    """

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._kafka = LazyProducer(settings)

    async def trigger(self, record: TriggerRecord) -> tuple[int, int]:
        """Produce ``record`` to the triggers topic, acknowledged by all in-sync replicas."""
        return await self._kafka.trigger(record)

    async def send(self, topic: str, key: str, record: Any) -> tuple[int, int]:
        """Produce ``record`` to declared topic ``topic``, acknowledged by all in-sync replicas."""
        return await self._kafka.send(topic, key, record)

    async def pause_changed(self, workflow: str, *, paused: bool) -> None:
        """Tell every partition of the triggers topic that ``workflow`` was (un)paused."""
        await self._kafka.pause_changed(workflow, paused=paused)

    async def send_raw(self, topic: str, key: bytes | None, value: bytes) -> tuple[int, int]:
        """Produce ``value`` as it is to ``topic`` (a full name): a dead letter replayed."""
        return await self._kafka.send_raw(topic, key, value)

    @property
    def topic_prefix(self) -> str:
        """The prefix of the topics it writes to."""
        return self._kafka.settings.topic_prefix

    async def on_stop(self) -> None:
        await self._kafka.close()


class PostgresDeliveries:
    """Webhook idempotency claims in Postgres, each call bounded by :data:`STORE_TIMEOUT`."""

    def __init__(self, database: Database, *, timeout: float = STORE_TIMEOUT) -> None:
        self._database = database
        self._timeout = timeout

    async def claim(
        self, workflow: str, key: str, *, claim_id: UUID, ttl: timedelta
    ) -> webhooks.Claim:
        return await self._run(
            lambda conn: webhooks.claim(conn, workflow, key, claim_id=claim_id, ttl=ttl),
            "claiming a webhook delivery",
        )

    async def accept(self, workflow: str, key: str, *, generation: int, ttl: timedelta) -> bool:
        return await self._run(
            lambda conn: webhooks.accept(conn, workflow, key, generation=generation, ttl=ttl),
            "accepting a webhook delivery",
        )

    async def release(self, workflow: str, key: str, *, claim_id: UUID) -> bool:
        return await self._run(
            lambda conn: webhooks.release(conn, workflow, key, claim_id=claim_id),
            "releasing a webhook delivery",
        )

    async def claim_signature(
        self, scope: str, signature: str, *, claim_id: UUID, expires_at: datetime, now: datetime
    ) -> bool:
        return await self._run(
            lambda conn: webhooks.claim_signature(
                conn, scope, signature, claim_id=claim_id, expires_at=expires_at, now=now
            ),
            "claiming a webhook signature",
        )

    async def release_signature(self, scope: str, signature: str, *, claim_id: UUID) -> bool:
        return await self._run(
            lambda conn: webhooks.release_signature(conn, scope, signature, claim_id=claim_id),
            "releasing a webhook signature",
        )

    async def _run(self, work: Callable[[psycopg.AsyncConnection], Awaitable[T]], what: str) -> T:
        # Database.run retries for as long as Postgres is away; a request cannot wait that
        # long, and every claim operation is safe to abandon (a claim goes stale).
        try:
            return await asyncio.wait_for(self._database.run(work, what=what), self._timeout)
        except TimeoutError:
            raise Unavailable(f"no answer from Postgres within {self._timeout}s {what}") from None


class PostgresWaits:
    """Open webhook waits in Postgres, behind the same time limit as the deliveries."""

    def __init__(self, database: Database, *, timeout: float = STORE_TIMEOUT) -> None:
        self._database = database
        self._timeout = timeout

    async def webhook_waits(self, path: str) -> list[dict[str, Any]]:
        return await asyncio.wait_for(
            self._database.run(lambda conn: waits.webhook_waits(conn, path), what="webhook waits"),
            self._timeout,
        )

    async def webhook_wait_by_token(self, token_hash: bytes) -> dict[str, Any] | None:
        return await asyncio.wait_for(
            self._database.run(
                lambda conn: waits.webhook_wait_by_token(conn, token_hash), what="webhook wait"
            ),
            self._timeout,
        )

    async def resolve(self, wait_id: str, answer: Any, at: datetime) -> dict[str, Any] | None:
        return await asyncio.wait_for(
            self._database.run(
                lambda conn: waits.resolve(conn, wait_id, answer, at), what="answer a wait"
            ),
            self._timeout,
        )


def _now() -> datetime:
    return datetime.now(UTC)


async def read_body(request: aiohttp_web.Request, limit: int) -> bytes:
    """The request body, read no further than ``limit + 1`` bytes.

    The ingress answers 413 for anything longer; a declared Content-Length over the
    limit is refused before any byte is read. aiohttp's own ``client_max_size`` does not
    apply to the raw stream read here, so the limit is the ingress's alone.
    """
    if request.content_length is not None and request.content_length > limit:
        return b""
    body = bytearray()
    while len(body) <= limit:
        chunk = await request.content.read(min(_READ_CHUNK, limit + 1 - len(body)))
        if not chunk:
            break
        body += chunk
    return bytes(body)


class Webhooks:
    """The web server's webhook endpoints: trigger paths of the current project, and the
    paths of runs parked in a webhook wait."""

    def __init__(self, hooks: WebhookIngress, waits: WaitHooks) -> None:
        self.hooks = hooks
        self.waits = waits

    @property
    def routes(self) -> dict[str, Any]:
        """The current webhook triggers, by path."""
        return self.hooks.routes

    async def answer(self, request: aiohttp_web.Request) -> Reply:
        """Answer one POST to a webhook path."""
        body = await read_body(request, self.hooks.max_body_bytes)
        if request.path not in self.hooks.routes:
            # No trigger here: a run parked in wait_for may be waiting for this request.
            answered = await self.waits.handle(request.path, request.headers, body)
            if answered is not None:
                return answered
        return await self.hooks.handle(request.path, request.headers, body, request.query)


def attach(app: RflowApp, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> IngressProducer:
    """Mount the webhook and manual-run endpoints on ``app``'s web server; returns the
    producer they share (the API's operator actions use it too)."""
    runtime = app.rflow
    assert runtime.database is not None, "attach the database before the ingress"
    producer = app.add_dependency(IngressProducer(runtime.settings))

    def paused(name: str) -> str | None:
        runner = runtime.runner
        project = runtime.current_project()
        workflow = project.workflows.get(name) if project else None
        if workflow is not None and workflow.paused:
            return "in its definition"
        return runner.paused.get(name) if runner is not None else None

    deliveries = PostgresDeliveries(runtime.database)
    hooks = WebhookIngress(
        runtime.current_project,
        runtime.env,
        producer,
        deliveries,
        _now,
        max_body_bytes=max_body_bytes,
        paused=paused,
    )

    runs = ManualIngress(
        runtime.current_project, producer, _now, max_body_bytes=max_body_bytes, paused=paused
    )
    wait_hooks = WaitHooks(
        PostgresWaits(runtime.database),
        producer,
        runtime.env,
        _now,
        max_body_bytes=max_body_bytes,
        signatures=deliveries,
    )
    runtime.webhooks = endpoints = Webhooks(hooks, wait_hooks)

    def respond(view: View, reply: Reply) -> Response:
        return view.json(reply.body, status=reply.status, headers=dict(reply.headers))

    @app.page("/api/workflows/{name}/runs", name="rflow.manual_runs")
    class ManualRunView(View):
        """Start a run of a workflow with a manual trigger; the JSON body holds its inputs."""

        async def post(self, request: Request, name: str) -> Response:
            body = await read_body(request, runs.max_body_bytes)
            return respond(self, await runs.handle(name, request.headers, body))

    @app.page(WEBHOOK_PREFIX + "{tail:.*}", name="rflow.webhooks")
    class WebhookView(View):
        """Deliver a webhook to the workflow whose trigger declares this path."""

        async def post(self, request: Request, **_match: str) -> Response:
            return respond(self, await endpoints.answer(request))

    return producer


def declared_paths(current: Callable[[], Webhooks | None]) -> Any:
    """The aiohttp middleware that answers POSTs to the webhook paths a project declares
    outside ``/hooks/``. It looks them up in the current project on every request: a
    deploy adds and removes them, which routes mounted when the server started could not."""

    @aiohttp_web.middleware
    async def route(request: aiohttp_web.Request, handler: Any) -> aiohttp_web.StreamResponse:
        endpoints = current()
        path = request.path
        if (
            endpoints is None
            or request.method != "POST"
            or path.startswith(WEBHOOK_PREFIX)
            or path not in endpoints.routes
        ):
            return await handler(request)
        reply = await endpoints.answer(request)
        return aiohttp_web.Response(
            body=json.dumps(reply.body),
            status=reply.status,
            content_type="application/json",
            headers=dict(reply.headers),
        )

    return route


def is_webhook(path: str, declared: Collection[str]) -> bool:
    """Whether ``path`` is a webhook endpoint (they authenticate requests their own way)."""
    return path.startswith(WEBHOOK_PREFIX) or path in declared
