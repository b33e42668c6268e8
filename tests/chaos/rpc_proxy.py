"""A JSON-RPC proxy of our own in front of anvil that misbehaves on demand.

While faults are on, each request draws (from a seeded generator) whether and how it
fails: a timeout (held, then the connection dropped), a 429, a 5xx, the connection
dropped before the node saw the request, dropped after the node answered (the caller
cannot know whether a transaction went out), or a slow answer. Everything else is
forwarded as it is.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field

from aiohttp import web

from tests.integration.harness import free_port
from tests.integration.rpc_front import RpcFront

FAULTS = ("timeout", "429", "5xx", "drop_before", "drop_after", "slow")


@dataclass
class FaultyRpc(RpcFront):
    upstream: str
    seed: int
    rate: float = 0.0
    """The share of requests that fail while faults are on (0: a plain proxy)."""
    hold: float = 3.0
    """Seconds a ``timeout`` request is held before its connection is dropped."""
    port: int = field(default_factory=free_port)
    injected: Counter = field(default_factory=Counter)
    forwarded: int = 0

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)
        self._open()

    def draw(self) -> str | None:
        if self.rate <= 0 or self.random.random() >= self.rate:
            return None
        return self.random.choice(FAULTS)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        fault = self.draw()
        if fault is not None:
            self.injected[fault] += 1
        if fault == "429":
            return web.Response(status=429, text="Too Many Requests")
        if fault == "5xx":
            return web.Response(status=self.random.choice((500, 502, 503)), text="upstream error")
        if fault in ("timeout", "drop_before"):
            if fault == "timeout":
                await asyncio.sleep(self.hold)
            return self._drop(request)
        if fault == "slow":
            await asyncio.sleep(self.random.uniform(0.2, 1.5))
        status, answer = await self.post(self.upstream, body)
        self.forwarded += 1
        if fault == "drop_after":
            return self._drop(request)
        return web.Response(body=answer, status=status, content_type="application/json")

    @staticmethod
    def _drop(request: web.Request) -> web.Response:
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=204)
