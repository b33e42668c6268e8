"""A JSON-RPC endpoint of our own in front of anvil that wants an API key, as a provider's
does: ``http://USER:PASSWORD@127.0.0.1:<port>/v3/<PATH_KEY>``.

It can be down (nothing listens on its port), failing (every request answered 503 with
a body that quotes the request's path and ``Authorization`` header back, as some
providers' error pages do), or up (a request with the right key is forwarded to anvil;
one without it answered 401, quoting what it got).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import aiohttp
from aiohttp import BasicAuth, web

from tests.integration.harness import free_port

Mode = Literal["down", "failing", "up"]


@dataclass
class KeyedRpc:
    upstream: str
    user: str
    password: str
    path_key: str
    port: int = field(default_factory=free_port)
    forwarded: int = 0
    refused: int = 0
    failed: int = 0

    def __post_init__(self) -> None:
        self.mode: Mode = "down"
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        """The URL a workflow's network is given: user, password and path key in it."""
        return f"http://{self.user}:{self.password}@127.0.0.1:{self.port}/v3/{self.path_key}"

    @property
    def shown(self) -> str:
        """How rflow must show :attr:`url`: scheme and host only."""
        return f"http://127.0.0.1:{self.port}/…"

    async def set(self, mode: Mode) -> None:
        """Go ``down`` (stop listening), ``failing`` or ``up``."""
        if mode == "down":
            await self._stop()
        elif self._runner is None:
            await self._start()
        self.mode = mode

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession()
        app = web.Application(client_max_size=8 << 20)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def close(self) -> None:
        await self._stop()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        quoted = f"path {request.path_qs}, Authorization {request.headers.get('Authorization')}"
        if self.mode == "failing":
            self.failed += 1
            return web.Response(status=503, text=f"upstream unavailable for {quoted}")
        try:
            auth = BasicAuth.decode(request.headers.get("Authorization", ""))
        except ValueError:
            auth = None
        if (
            request.method != "POST"
            or request.path != f"/v3/{self.path_key}"
            or auth is None
            or (auth.login, auth.password) != (self.user, self.password)
        ):
            self.refused += 1
            return web.Response(status=401, text=f"invalid key: {quoted}")
        assert self._session is not None
        async with self._session.post(
            self.upstream, data=body, headers={"Content-Type": "application/json"}
        ) as upstream:
            answer = await upstream.read()
            status = upstream.status
        self.forwarded += 1
        return web.Response(body=answer, status=status, content_type="application/json")
