"""An HTTP sink on 127.0.0.1 for integration tests: records requests, can hold them."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.integration.harness import free_port


@dataclass
class Request:
    path: str
    key: str | None
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    query: str = ""


@dataclass
class Sink:
    """Answers 200 with ``{"ok": true, "echo": <body>, "path": <path>}`` (and the request's
    headers, with ``echo_headers``), or the status ``statuses`` gives the path; paths in
    ``held`` wait for ``release``."""

    port: int = field(default_factory=free_port)
    requests: list[Request] = field(default_factory=list)
    held: set[str] = field(default_factory=set)
    in_flight: int = 0
    peak: int = 0
    delay: float = 0.0
    echo_headers: bool = False
    statuses: dict[str, int] = field(default_factory=dict)
    _release: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def keys(self, prefix: str = "") -> Counter[str]:
        return Counter(r.key for r in self.requests if r.key and r.path.startswith(prefix))

    def release(self) -> None:
        self._release.set()

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.requests.append(
            Request(
                request.path,
                request.headers.get("Idempotency-Key"),
                body,
                dict(request.headers),
                request.query_string,
            )
        )
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if request.path in self.held:
                await self._release.wait()
            if self.delay:
                await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        answer = {"ok": True, "echo": body, "path": request.path}
        if self.echo_headers:
            answer["headers"] = dict(request.headers)
        return web.json_response(answer, status=self.statuses.get(request.path, 200))

    async def start(self) -> Sink:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        self.release()
        if self._runner is not None:
            await self._runner.cleanup()
