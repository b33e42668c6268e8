"""The baseline of bench_pipeline.py: a bare Faust agent doing one table update per event.

Started by the benchmark as its own process, configured by environment variables:

    BENCH_BROKERS     bootstrap servers (host:port)
    BENCH_APP_ID      the Faust app id (consumer group)
    BENCH_TOPIC       the source topic (created beforehand, like rflow's)
    BENCH_CHANGELOG   the table's changelog topic (created beforehand, compacted)
    BENCH_PARTITIONS  partition count of both (the count of rflow.triggers)
    BENCH_OUT         file that receives one line per processed event
    BENCH_WEB_PORT    Faust's web server port
    BENCH_DATA_DIR    Faust's data directory

Set up like rflow's app (memory store, acks=all producer, same stream buffer, own
changelog topic acknowledged by the broker), with none of rflow's work: the agent reads
the record's JSON, adds one to a counter per key in a table, and notes
``<key> <sent> <done>`` (wall-clock seconds; ``sent`` from the record's payload).
Notes are buffered and written every 20 ms, off the agent's path.
"""

from __future__ import annotations

import os
import time

import faust
import orjson
from faust.worker import Worker


def main() -> None:
    env = os.environ
    partitions = int(env["BENCH_PARTITIONS"])
    app = faust.App(
        env["BENCH_APP_ID"],
        broker=[f"kafka://{host}" for host in env["BENCH_BROKERS"].split(",")],
        store="memory://",
        autodiscover=False,
        topic_partitions=partitions,
        topic_replication_factor=1,
        key_serializer="raw",
        value_serializer="json",
        broker_session_timeout=6.0,
        broker_heartbeat_interval=0.5,
        producer_acks=-1,
        web_host="127.0.0.1",
        web_port=int(env["BENCH_WEB_PORT"]),
        web_bind="127.0.0.1",
        datadir=env["BENCH_DATA_DIR"],
        stream_buffer_maxsize=1024,
    )
    source = app.topic(
        env["BENCH_TOPIC"],
        partitions=partitions,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )
    changelog = app.topic(
        env["BENCH_CHANGELOG"],
        partitions=partitions,
        internal=True,
        allow_empty=True,
        config={"cleanup.policy": "compact"},
    )
    counts = app.Table(
        "counts", default=int, partitions=partitions, changelog_topic=changelog, key_type=bytes
    )
    pending: list[str] = []
    out = open(env["BENCH_OUT"], "a", buffering=1 << 16)  # noqa: SIM115 - lives with the process

    @app.agent(source, name="bench.baseline", concurrency=1)
    async def count(stream):
        async for event in stream.events():
            sent = orjson.loads(event.value)["payload"].get("sent", 0.0)
            counts[event.key] += 1
            pending.append(f"{event.key.decode()} {sent:.6f} {time.time():.6f}\n")

    @app.timer(interval=0.02, name="bench.flush")
    async def flush() -> None:
        if pending:
            lines = "".join(pending)
            pending.clear()
            out.write(lines)
            out.flush()

    Worker(app, loglevel=env.get("BENCH_LOGLEVEL", "info")).execute_from_commandline()


if __name__ == "__main__":
    main()
