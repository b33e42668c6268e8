"""A scripted HTTP service on 127.0.0.1 for integration tests: per-path answers, held
paths, and every request recorded with its Idempotency-Key."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.integration.harness import free_port, wait_until


@dataclass
class Call:
    path: str
    key: str | None
    body: Any
    at: float


@dataclass
class Service:
    """Answers each path from its script of ``(status, json)`` (consumed in order), then
    from ``answers`` (``(status, json)``, kept), else ``200 {"ok": true}``. A path in
    ``held`` waits until :meth:`release` (requests are recorded as they arrive)."""

    scripts: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    answers: dict[str, tuple[int, Any]] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    port: int = field(default_factory=free_port)
    calls: list[Call] = field(default_factory=list)
    _released: dict[str, asyncio.Event] = field(default_factory=lambda: defaultdict(asyncio.Event))
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def to(self, path: str) -> list[Call]:
        return [call for call in self.calls if call.path == path]

    def hold(self, path: str) -> None:
        self.held.add(path)
        self._released[path].clear()

    def release(self, path: str) -> None:
        self.held.discard(path)
        self._released[path].set()

    async def seen(self, path: str, count: int = 1, timeout: float = 60) -> list[Call]:
        """The requests to ``path`` once there are ``count`` of them."""

        async def enough() -> list[Call] | None:
            found = self.to(path)
            return found if len(found) >= count else None

        return await wait_until(enough, timeout=timeout, what=f"{count} request(s) to {path}")

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        path = request.path
        self.calls.append(
            Call(path, request.headers.get("Idempotency-Key"), body, time.monotonic())
        )
        if path in self.held:
            await self._released[path].wait()
        script = self.scripts.get(path) or []
        status, answer = script.pop(0) if script else self.answers.get(path, (200, {"ok": True}))
        return web.json_response(answer, status=status)

    async def __aenter__(self) -> Service:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for event in self._released.values():
            event.set()
        assert self._runner is not None
        await self._runner.cleanup()
