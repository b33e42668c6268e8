"""The JSON-RPC client's messages show its URL as scheme and host only: a refused
connection, an HTTP error whose body quotes the key back, a batch left unanswered."""

from __future__ import annotations

import base64

import pytest
from aiohttp import web

from rflow.ingress.rpc import JsonRpc, RpcUnavailable
from tests.integration.harness import free_port

KEY, PASSWORD, USER = "0123456789abcdef0123456789abcdef", "pa55-w0rd", "rpcuser"


def keyed(port: int) -> str:
    return f"http://{USER}:{PASSWORD}@127.0.0.1:{port}/v3/{KEY}?apikey=q1"


def assert_shown_only(message: str, port: int) -> None:
    assert f"http://127.0.0.1:{port}/…" in message, message
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    for secret in (KEY, PASSWORD, USER, basic, "apikey=q1"):
        assert secret not in message, (secret, message)


async def test_a_refused_connection_names_scheme_and_host_only() -> None:
    port = free_port()  # nothing listens there
    async with JsonRpc(keyed(port), timeout=2) as rpc:
        with pytest.raises(RpcUnavailable) as caught:
            await rpc.block_number()
    assert_shown_only(str(caught.value), port)
    assert rpc.shown == f"http://127.0.0.1:{port}/…"


async def test_an_error_page_quoting_the_key_back_is_scrubbed() -> None:
    async def refuse(request: web.Request) -> web.Response:
        quoted = f"{request.path_qs} {request.headers.get('Authorization')}"
        return web.Response(status=401, text=f"bad key for {quoted}")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with JsonRpc(keyed(port)) as rpc:
            with pytest.raises(RpcUnavailable) as caught:
                await rpc.chain_id()
    finally:
        await runner.cleanup()
    message = str(caught.value)
    assert message.startswith(f"http://127.0.0.1:{port}/… answered HTTP 401: bad key for /v3/")
    assert_shown_only(message, port)
