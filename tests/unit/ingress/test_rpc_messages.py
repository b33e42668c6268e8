"""The JSON-RPC client's messages show its URL as scheme and host only: a refused
connection, an HTTP error whose body quotes the key back, a batch left unanswered."""

from __future__ import annotations

import base64

import pytest
from aiohttp import web

from rflow.ingress.pool import EndpointUrl, RpcPool
from rflow.ingress.rpc import JsonRpc, RpcError, RpcUnavailable
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


async def _quoting_node(status: int = 200) -> tuple[web.AppRunner, int]:
    """A node that answers every call (one or a batch) with a JSON-RPC error quoting the
    request's path and Authorization header back."""

    async def answer(request: web.Request) -> web.Response:
        quoted = f"{request.path_qs} {request.headers.get('Authorization')}"
        body = await request.json()

        def one(call: dict) -> dict:
            error = {"code": -32000, "message": f"bad key for {quoted}", "data": quoted}
            return {"jsonrpc": "2.0", "id": call["id"], "error": error}

        found = [one(c) for c in body] if isinstance(body, list) else one(body)
        return web.json_response(found, status=status)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


async def test_an_error_answer_quoting_the_key_back_is_scrubbed_alone_and_in_a_batch() -> None:
    runner, port = await _quoting_node()
    try:
        async with JsonRpc(keyed(port)) as rpc:
            with pytest.raises(RpcError) as caught:
                await rpc.call("eth_call", {}, "latest")
            answers = await rpc.answers([("eth_call", ({}, "latest")), ("eth_chainId", ())])
    finally:
        await runner.cleanup()
    errors = [caught.value, *answers]
    assert all(isinstance(e, RpcError) for e in errors), errors
    for error in errors:
        assert error.message.startswith("bad key for /v3/"), error.message
        for secret in (KEY, PASSWORD, USER, "apikey=q1"):
            assert secret not in f"{error} {error.data}", (secret, error)


async def test_a_pool_names_its_endpoints_and_shows_no_key_of_any() -> None:
    failing, failing_port = await _quoting_node(status=500)
    erring, erring_port = await _quoting_node()
    down = free_port()
    try:
        urls = [EndpointUrl("primary", keyed(down)), EndpointUrl("backup", keyed(failing_port))]
        async with RpcPool("mainnet", urls, timeout=2) as pool:
            with pytest.raises(RpcUnavailable) as unavailable:
                await pool.block_number()
            found = await pool.each([("eth_chainId", ())])
        urls = [EndpointUrl("primary", keyed(down)), EndpointUrl("backup", keyed(erring_port))]
        async with RpcPool("mainnet", urls, timeout=2) as pool:
            with pytest.raises(RpcError) as answered:
                await pool.block_number()
    finally:
        await failing.cleanup()
        await erring.cleanup()
    message = str(unavailable.value)
    assert message.startswith("no endpoint of mainnet answered: "), message
    assert f"primary: http://127.0.0.1:{down}/…" in message, message
    assert f"backup: http://127.0.0.1:{failing_port}/… answered HTTP 500" in message, message
    assert "bad key for /v3/" in str(answered.value)
    shown = " ".join(
        [message, str(answered.value), repr(pool.endpoints), *(f"{n} {a!r}" for n, a in found)]
    )
    for secret in (KEY, PASSWORD, USER, "apikey=q1"):
        assert secret not in shown, secret
