"""Producing rflow records from outside a worker (CLI, ingress), acknowledged by all replicas."""

from __future__ import annotations

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from rflow.codecs import TriggerRecord, encode
from rflow.settings import Settings
from rflow.streams.topics import Catalog


class ProduceError(Exception):
    """The record was not acknowledged by Kafka; the caller must not report success."""


async def produce_trigger(settings: Settings, record: TriggerRecord) -> tuple[int, int]:
    """Produce ``record`` to the triggers topic keyed by its group; returns (partition, offset)."""
    topic = Catalog.from_settings(settings).full_name("rflow.triggers")
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_brokers,
        acks="all",
        enable_idempotence=True,
        request_timeout_ms=15000,
    )
    try:
        await producer.start()
        meta = await producer.send_and_wait(
            topic, value=encode(record), key=record.partition_key.encode()
        )
    except KafkaError as exc:
        raise ProduceError(
            f"Kafka at {settings.kafka_brokers} did not accept the trigger: {exc}"
        ) from None
    finally:
        await producer.stop()
    return meta.partition, meta.offset
