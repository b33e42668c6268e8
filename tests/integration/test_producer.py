"""The ingress producer after the broker refuses its sequence numbers.

After a broker restart an idempotent producer can be left with sequence numbers the
broker no longer accepts (OutOfOrderSequenceNumber): every later record is refused the
same way. The chain follower kept failing on that until its worker was restarted.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from aiokafka.errors import OutOfOrderSequenceNumber

from rflow.codecs import TriggerRecord
from rflow.streams.producer import ProduceError, Producer
from tests.integration.test_webhooks import triggers_on_topic

pytestmark = pytest.mark.usefixtures("applied_topics")


def firing(n: int) -> TriggerRecord:
    return TriggerRecord(
        workflow="w",
        trigger_key=f"manual:w:{n}",
        source="manual",
        payload={"n": n},
        received_at=datetime.now(UTC),
    )


async def test_a_producer_refused_for_its_sequence_goes_on_with_a_fresh_one(settings):
    async with Producer(settings) as producer:
        await producer.trigger(firing(1))
        poisoned = producer._producer

        async def refused(*args, **kwargs):
            raise OutOfOrderSequenceNumber()

        poisoned.send_and_wait = refused  # what the broker answers after its restart
        with pytest.raises(ProduceError, match="OutOfOrderSequenceNumber"):
            await producer.trigger(firing(2))
        await producer.trigger(firing(3))
        assert producer._producer is not poisoned
    keys = sorted(record.trigger_key for _, record in await triggers_on_topic(settings))
    assert keys == ["manual:w:1", "manual:w:3"]
