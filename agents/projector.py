"""The projector: run journals into the Postgres read model, in batches.

It reads the events topic with a consumer of its own (group ``<app id>-projector``)
and commits a partition's offset only after the batch holding it is in Postgres. It
is not a Faust agent on purpose: a Faust stream acknowledges every event of a
``take()`` batch when the batch's handler ends, however it ends, and can drop records
around a rebalance; the read model must not depend on either. Every projection is
idempotent, so a batch read again after a crash or a rebalance changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata
from mode import Service

from rflow.agents.dead_letters import send_dead_letter
from rflow.codecs import DecodeError, RunJournal, decode
from rflow.storage import StorageError, runs

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)
BATCH = 500
WITHIN_MS = 100


class Projector(Service):
    """Projects the events topic into Postgres for the read model."""

    def __init__(self, app: RflowApp, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app = app
        self.runtime = app.rflow
        self.consumer: AIOKafkaConsumer | None = None

    async def on_start(self) -> None:
        settings = self.runtime.settings
        self.consumer = AIOKafkaConsumer(
            self.runtime.catalog.full_name("rflow.events"),
            bootstrap_servers=settings.kafka_brokers,
            group_id=f"{settings.app_id}-projector",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=int(settings.broker_session_timeout * 1000),
            heartbeat_interval_ms=int(settings.broker_heartbeat_interval * 1000),
            max_poll_records=BATCH,
        )
        await self.consumer.start()

    async def on_stop(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()

    @Service.task
    async def _project(self) -> None:
        assert self.consumer is not None
        while not self.should_stop:
            try:
                batches = await self.consumer.getmany(timeout_ms=WITHIN_MS, max_records=BATCH)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker away: the consumer reconnects by itself
                log.warning("reading run journals failed, retrying: %r", exc)
                await asyncio.sleep(0.5)
                continue
            records = [record for batch in batches.values() for record in batch]
            if not records:
                continue
            await self.project(records)
            offsets = {
                tp: OffsetAndMetadata(batch[-1].offset + 1, "")
                for tp, batch in batches.items()
                if batch
            }
            await self.commit(offsets)

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        assert self.consumer is not None
        try:
            await self.consumer.commit(offsets)
        except Exception as exc:  # a rebalance took the partitions: the owner reads again
            log.info("projector commit skipped (%r); the batch will be projected again", exc)

    async def project(self, records: list[Any]) -> None:
        decoded = []
        for record in records:
            try:
                decoded.append((record, decode(record.value, RunJournal).entry))
            except DecodeError as exc:
                await send_dead_letter(self.app, record, exc.reason)
        if not decoded:
            return
        database = self.runtime.database
        entries = [entry for _, entry in decoded]
        try:
            await database.run(lambda conn: runs.project(conn, entries), what="projection")
        except StorageError:
            # One entry the database refuses must not hold back the rest: project one by
            # one, dead-lettering what is refused.
            for record, entry in decoded:
                try:
                    await database.run(
                        lambda conn, entry=entry: runs.project(conn, [entry]), what="projection"
                    )
                except StorageError as exc:
                    await send_dead_letter(
                        self.app, record, f"the read model refused this entry: {exc}"
                    )


def attach(app: RflowApp) -> Projector:
    """Add the projector to ``app`` (after its database)."""
    return app.add_dependency(Projector(app))
