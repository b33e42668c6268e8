"""The benchmark's workflow as a Restate service: a virtual object per concurrency group.

    PEERS_PORT=<port> PEERS_SINK_URL=http://127.0.0.1:<port> python restate_service.py

Started by bench/peers/engines.py in the benchmark's virtualenv, served by Hypercorn in
this one process (HTTP/2, as Restate connects) on 127.0.0.1, and registered with
restate-server. An exclusive handler of the object ``Bench`` keyed by the group runs one
invocation per group at a time, in order, as rflow's concurrency lane does.
"""

from __future__ import annotations

import asyncio
import os

import aiohttp
import hypercorn.asyncio
import hypercorn.config
import restate

SINK_URL = os.environ["PEERS_SINK_URL"]
bench = restate.VirtualObject("Bench")
_http: dict[str, aiohttp.ClientSession] = {}


async def notify(key: str, message: str, run_id: str) -> None:
    """POST the message to the sink, as rflow's webhook channel does; raise on non-2xx so
    Restate retries the step."""
    if "session" not in _http:
        _http["session"] = aiohttp.ClientSession()
    body = {"message": message, "severity": "info", "workflow": "bench", "run_id": run_id}
    headers = {"Idempotency-Key": key}
    async with _http["session"].post(f"{SINK_URL}/notify", json=body, headers=headers) as response:
        if not 200 <= response.status < 300:
            raise RuntimeError(f"sink answered HTTP {response.status}")


@bench.handler()
async def run(ctx: restate.ObjectContext, trigger: dict) -> None:
    # state_set: the group's durable state, journaled by Restate.
    ctx.set("last_seq", trigger["seq"])
    # choose: "high" jumps to tell and anything else continues to the next step, which is
    # tell: both branches reach the notify, so there is nothing to branch on here.
    message = f"run {trigger['seq']} ({trigger['priority']})"
    key = f"bench:{trigger['trigger_key']}:tell"
    await ctx.run_typed("tell", notify, restate.RunOptions(), key, message, ctx.request().id)


app = restate.app(services=[bench])


def main() -> None:
    config = hypercorn.config.Config()
    config.bind = [f"127.0.0.1:{os.environ['PEERS_PORT']}"]
    # Restate's recommended Hypercorn settings for long-lived HTTP/2 connections.
    config.h2_max_concurrent_streams = 2147483647
    config.keep_alive_max_requests = 2147483647
    config.keep_alive_timeout = 2147483647
    config.accesslog = None
    asyncio.run(hypercorn.asyncio.serve(app, config))


if __name__ == "__main__":
    main()
