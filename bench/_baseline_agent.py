"""The baseline of bench_pipeline.py: a bare Faust agent doing one table update per event.

Started by the benchmark as its own process, configured by environment variables:

    RFLOW_KAFKA_*     the Kafka connection, as rflow's settings read it (brokers, TLS, SASL)
    BENCH_APP_ID      the Faust app id (consumer group)
    BENCH_TOPIC       the source topic (created beforehand, like rflow's)
    BENCH_CHANGELOG   the table's changelog topic (created beforehand, compacted)
    BENCH_PARTITIONS  partition count of both (the count of rflow.triggers)
    BENCH_OUT         file that receives one line per processed event
    BENCH_WEB_PORT    Faust's web server port
    BENCH_DATA_DIR    Faust's data directory
    BENCH_JOURNAL     (optional) a topic for the run-shaped variant below

Set up like rflow's app (memory store, acks=all producer, same stream buffer, own
changelog topic acknowledged by the broker), with none of rflow's work: the agent reads
the record's JSON, adds one to a counter per key in a table, and notes
``<key> <sent> <done>`` (wall-clock seconds; ``sent`` from the record's payload).
Notes are buffered and written every 20 ms, off the agent's path.

With BENCH_JOURNAL, the agent moves as many Kafka records per event as rflow moves per
run of the benchmark's workflow, and does nothing else: four table updates (the firing's
gate and the run's three states) and three records to the journal topic (one per
decision), which a second agent reads in batches (as the projector does); the note is
written when an event's third journal record has been read.
"""

from __future__ import annotations

import os
import time

import faust
import orjson
from faust.worker import Worker

from rflow.settings import Settings
from rflow.streams import kafka


def main() -> None:
    env = os.environ
    partitions = int(env["BENCH_PARTITIONS"])
    app = faust.App(
        env["BENCH_APP_ID"],
        **kafka.faust_options(Settings.from_env()),
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

    journal_name = env.get("BENCH_JOURNAL")
    if journal_name is None:

        @app.agent(source, name="bench.baseline", concurrency=1)
        async def count(stream):
            async for event in stream.events():
                sent = orjson.loads(event.value)["payload"].get("sent", 0.0)
                counts[event.key] += 1
                pending.append(f"{event.key.decode()} {sent:.6f} {time.time():.6f}\n")

    else:
        journal = app.topic(
            journal_name,
            partitions=partitions,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )

        @app.agent(source, name="bench.baseline", concurrency=1)
        async def run_shaped(stream):
            async for event in stream.events():
                sent = orjson.loads(event.value)["payload"].get("sent", 0.0)
                for i in range(4):
                    counts[event.key + b"/%d" % i] += 1
                for i in range(3):
                    await journal.send(key=event.key, value=orjson.dumps([i, sent]))

        @app.agent(journal, name="bench.journal", concurrency=1)
        async def read_journal(stream):
            async for events in stream.take_events(500, within=0.1):
                for event in events:
                    index, sent = orjson.loads(event.value)
                    if index == 2:
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
