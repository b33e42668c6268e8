"""A JSON-RPC endpoint of a test's own on 127.0.0.1, in front of a real node: what the
project's RPC proxies (the chaos soak's faulty one, the lagging one) are built on."""

from __future__ import annotations

from typing import Any, Self

import aiohttp
from aiohttp import web


class RpcFront:
    """Serves POSTs to any path on ``127.0.0.1:port`` with :meth:`handle`, and keeps an
    HTTP session to forward to the node with. Subclasses set ``port`` and ``handle``."""

    port: int

    def _open(self) -> None:
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    async def start(self) -> Self:
        self._session = aiohttp.ClientSession()
        app = web.Application(client_max_size=8 << 20)
        app.router.add_post("/", self.handle)
        app.router.add_post("/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "start() the proxy first"
        return self._session

    async def post(self, upstream: str, body: Any) -> tuple[int, bytes]:
        """Forward a JSON-RPC body to ``upstream``: its status and raw answer."""
        async with self.session.post(
            upstream, data=body, headers={"Content-Type": "application/json"}
        ) as answer:
            return answer.status, await answer.read()
