"""Producing rflow records from outside a worker (CLI, ingress), acknowledged by all replicas."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    KafkaError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    UnknownProducerId,
)

from rflow.codecs import PauseChanged, Record, TriggerRecord, TriggerRetracted, encode
from rflow.engine import provenance
from rflow.settings import Settings
from rflow.streams import kafka
from rflow.streams.topics import Catalog


class ProduceError(Exception):
    """The record was not acknowledged by Kafka; the caller must not report success."""


POISONED = (
    OutOfOrderSequenceNumber,
    UnknownProducerId,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    ProducerFenced,
)
"""Refusals after which an idempotent producer's sequence state is useless (a broker
restart can leave it behind): every later record would be refused the same way."""


VOUCHED_KINDS = frozenset({"trigger", "trigger_retracted", "retry"})
"""The records rflow's producers sign (:func:`rflow.engine.provenance.vouch`)."""


class Producer:
    """A started Kafka producer for declared topics; use ``async with Producer(settings)``.

    Idempotent and ``acks=all``: a record counts as delivered only once every in-sync
    replica has it, which is when an ingress may acknowledge its caller.

    Firings, retractions and retries go out with the proof of rflow's ingress, made with
    ``RFLOW_INGRESS_KEYS`` (the workers believe nothing else of a chain event, a webhook,
    a schedule, a retraction or a retry); without the keys they are refused here, before
    anything is produced. ``vouching=False`` produces firings as an outside producer
    would (``rflow trigger``).
    """

    def __init__(self, settings: Settings, *, vouching: bool = True) -> None:
        self.settings = settings
        self.vouching = vouching
        self.keyring = settings.ingress_keyring if vouching else None
        self.catalog = Catalog.from_settings(settings)
        try:
            self._producer = self._new()
        except kafka.KafkaSettingsError as exc:
            raise ProduceError(str(exc)) from None
        self._poisoned = False

    def _new(self) -> AIOKafkaProducer:
        return kafka.producer(
            self.settings, acks="all", enable_idempotence=True, request_timeout_ms=15000
        )

    async def _renew(self) -> None:
        """Replace a poisoned producer with a fresh one (a new producer id)."""
        old, self._producer = self._producer, self._new()
        with contextlib.suppress(KafkaError):
            await old.stop()
        await self._producer.start()
        self._poisoned = False

    async def __aenter__(self) -> Producer:
        try:
            await kafka.start(self._producer, self.settings)
        except kafka.KafkaUnavailable as exc:
            raise ProduceError(str(exc)) from None
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._producer.stop()

    def vouched(self, record: Record) -> Record:
        """``record`` as it goes out: a firing, retraction or retry with its proof."""
        if self.keyring is None or record.kind not in VOUCHED_KINDS:
            return record
        try:
            return provenance.vouch(record, self.keyring)  # type: ignore[arg-type]
        except provenance.KeyringError as exc:
            raise ProduceError(
                f"{exc}: a {record.kind} record of rflow's is believed only with its proof"
            ) from None

    async def send(self, topic: str, key: str, record: Record) -> tuple[int, int]:
        """Produce ``record`` to declared topic ``topic``; returns (partition, offset)."""
        value = encode(self.vouched(record))
        try:
            if self._poisoned:
                await self._renew()
            meta = await self._producer.send_and_wait(
                self.catalog.full_name(topic), value=value, key=key.encode()
            )
        except KafkaError as exc:
            # Refused, so not written: the next record goes out on a fresh producer.
            self._poisoned = self._poisoned or isinstance(exc, POISONED)
            raise ProduceError(
                f"Kafka at {self.settings.kafka_display} did not accept the record: {exc}"
            ) from None
        return meta.partition, meta.offset

    @property
    def topic_prefix(self) -> str:
        """The prefix of the topics it writes to (``RFLOW_TOPIC_PREFIX``)."""
        return self.settings.topic_prefix

    async def send_raw(self, topic: str, key: bytes | None, value: bytes) -> tuple[int, int]:
        """Produce ``value`` as it is under ``key`` to ``topic``, a full name (a dead letter's
        record going back where it came from); returns (partition, offset)."""
        try:
            if self._poisoned:
                await self._renew()
            meta = await self._producer.send_and_wait(topic, value=value, key=key)
        except KafkaError as exc:
            self._poisoned = self._poisoned or isinstance(exc, POISONED)
            raise ProduceError(
                f"Kafka at {self.settings.kafka_display} did not accept the record: {exc}"
            ) from None
        return meta.partition, meta.offset

    async def trigger(self, record: TriggerRecord | TriggerRetracted) -> tuple[int, int]:
        """Produce a firing (or its retraction) to the triggers topic, keyed by its group."""
        return await self.send("rflow.triggers", record.partition_key, record)

    async def broadcast(self, topic: str, key: str, record: Record) -> int:
        """Produce ``record`` to every partition of declared topic ``topic`` and wait until
        all have it; returns how many partitions there are."""
        count = self.catalog.spec(topic).partitions
        try:
            if self._poisoned:
                await self._renew()
            value = encode(record)
            sent = [
                await self._producer.send(
                    self.catalog.full_name(topic), value=value, key=key.encode(), partition=p
                )
                for p in range(count)
            ]
            await asyncio.gather(*sent)
        except KafkaError as exc:
            self._poisoned = self._poisoned or isinstance(exc, POISONED)
            raise ProduceError(
                f"Kafka at {self.settings.kafka_display} did not accept the record: {exc}"
            ) from None
        return count

    async def pause_changed(self, workflow: str, *, paused: bool) -> None:
        """Tell the workers, in every partition's order, that ``workflow`` was paused or
        resumed (:class:`~rflow.codecs.PauseChanged`)."""
        record = PauseChanged(workflow=workflow, paused=paused, at=datetime.now(UTC))
        await self.broadcast("rflow.triggers", workflow, record)


class LazyProducer:
    """A :class:`Producer` started on first use and stopped by :meth:`close` (or leaving
    ``async with``): a process that never produces holds no producer, and a failed
    start (Kafka away) is tried again by the next record."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._producer: Producer | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def __aenter__(self) -> LazyProducer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def send(self, topic: str, key: str, record: Record) -> tuple[int, int]:
        """:meth:`Producer.send`, starting the producer first if need be."""
        return await (await self._started()).send(topic, key, record)

    @property
    def topic_prefix(self) -> str:
        """The prefix of the topics it writes to (``RFLOW_TOPIC_PREFIX``)."""
        return self.settings.topic_prefix

    async def send_raw(self, topic: str, key: bytes | None, value: bytes) -> tuple[int, int]:
        """:meth:`Producer.send_raw`, starting the producer first if need be."""
        return await (await self._started()).send_raw(topic, key, value)

    async def trigger(self, record: TriggerRecord | TriggerRetracted) -> tuple[int, int]:
        """:meth:`Producer.trigger`, starting the producer first if need be."""
        return await (await self._started()).trigger(record)

    async def pause_changed(self, workflow: str, *, paused: bool) -> None:
        """:meth:`Producer.pause_changed`, starting the producer first if need be."""
        await (await self._started()).pause_changed(workflow, paused=paused)

    async def _started(self) -> Producer:
        if self._producer is None:
            async with self._lock:
                if self._closed:
                    # A record racing the shutdown must not start a producer nobody stops.
                    raise ProduceError("the producer is closed: the process is stopping")
                if self._producer is None:
                    self._producer = await Producer(self.settings).__aenter__()
        return self._producer

    async def close(self) -> None:
        """Stop the producer if it was started; later records are refused."""
        async with self._lock:
            self._closed = True
            if self._producer is not None:
                await self._producer.__aexit__(None, None, None)
                self._producer = None


async def produce_trigger(
    settings: Settings, record: TriggerRecord, *, vouching: bool = True
) -> tuple[int, int]:
    """Produce one firing with a short-lived producer (the CLI's case); ``vouching=False``
    as an outside producer would."""
    async with Producer(settings, vouching=vouching) as producer:
        return await producer.trigger(record)
