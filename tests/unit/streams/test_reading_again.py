"""Records the fetcher skipped around a rebalance are read again, in order, not counted
as read (the consumer's side; the seek itself is Kafka's)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from faust.types import TP

from rflow.settings import Settings
from rflow.streams.app import create_app

TRIGGERS = TP("rflow.triggers", 0)


def consumer_with_records():
    app = create_app(Settings(api_token="t"))
    consumer = app.consumer
    delivered: list[int] = []
    seeks: list[int] = []

    async def deliver(message):
        delivered.append(message.offset)

    async def perform_seek():
        seeks.append(len(delivered))

    consumer.deliver = deliver
    consumer.perform_seek = perform_seek
    return consumer, delivered, seeks


def record(offset: int, tp: TP = TRIGGERS) -> SimpleNamespace:
    return SimpleNamespace(tp=tp, offset=offset)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_skipped_stretch_is_read_again_before_anything_after_it():
    consumer, delivered, seeks = consumer_with_records()
    await consumer.in_order(record(26))
    # The fetcher jumped from 26 to 29: 27 and 28 were dropped around a rebalance.
    await consumer._add_gap(TRIGGERS, 27, 29)
    assert consumer.rereading == {TRIGGERS: 27}
    assert not consumer._gap.get(TRIGGERS)  # not counted as read
    await consumer.in_order(record(29))  # ahead of the skipped ones: held back
    await settle()
    assert delivered == [26] and seeks  # positions went back to the committed offsets
    for offset in (26, 27, 28, 29):  # read again from the committed offset
        await consumer.in_order(record(offset))
    assert delivered == [26, 26, 27, 28, 29]
    assert consumer.rereading == {}


async def test_other_partitions_flow_and_a_commit_past_the_stretch_ends_the_wait():
    consumer, delivered, _ = consumer_with_records()
    other = TP("rflow.triggers", 1)
    await consumer._add_gap(TRIGGERS, 27, 29)
    await consumer.in_order(record(5, other))
    assert delivered == [5]
    consumer._committed_offset[TRIGGERS] = 30  # the group got past it meanwhile
    consumer.read_again()
    await settle()
    assert consumer.rereading == {}
    await consumer.in_order(record(30))
    assert delivered == [5, 30]


async def test_no_commit_passes_a_record_never_acknowledged():
    consumer, _, seeks = consumer_with_records()
    # Faust would commit 51..52 past 50 (it allows one missing record at the head), and
    # anything at all while the committed offset is 0.
    for committed, acked in ((50, [51, 52]), (0, [3, 4])):
        consumer._committed_offset[TRIGGERS] = committed
        consumer._acked[TRIGGERS] = list(acked)
        consumer._acked_index[TRIGGERS] = set(acked)
        assert consumer._new_offset(TRIGGERS) is None
        assert consumer.rereading == {TRIGGERS: committed}
        await settle()
        consumer.rereading.clear()
    assert len(seeks) == 2  # read again from the committed offset each time
    consumer._committed_offset[TRIGGERS] = 50
    consumer._acked[TRIGGERS] = [50, 51, 52]
    consumer._acked_index[TRIGGERS] = {50, 51, 52}
    assert consumer._new_offset(TRIGGERS) == 53


def queued(offset: int, tp: TP = TRIGGERS) -> SimpleNamespace:
    """An event in a stream's queue, as the conductor puts it there."""
    return SimpleNamespace(message=SimpleNamespace(tp=tp, topic=tp.topic, offset=offset))


async def test_records_a_flow_resume_throws_away_are_read_again_in_order():
    consumer, delivered, seeks = consumer_with_records()
    app = consumer.app
    consumer.assignment = lambda: {TRIGGERS}
    queue = app.FlowControlQueue(maxsize=16, clear_on_resume=True)
    # Faust resumed the flow after seeking to the committed offset 29: 29 and 30 were
    # fetched and queued, and a later resume empties the queue (Faust's fetcher counts
    # them as read and goes on with 31).
    for offset in (29, 30):
        queue.put_nowait(queued(offset))
    app.flow_control.resume()
    assert queue.empty()
    assert consumer.rereading == {TRIGGERS: 29}
    await consumer.in_order(record(31))  # ahead of the dropped ones: held back
    await settle()
    assert delivered == [] and seeks
    for offset in (29, 30, 31):  # read again from the committed offset
        await consumer.in_order(record(offset))
    assert delivered == [29, 30, 31]
    assert consumer.rereading == {}


async def test_changelog_records_survive_a_flow_resume():
    consumer, _, _ = consumer_with_records()
    app = consumer.app
    changelog = TP(next(iter(app.tables.changelog_topics)), 0)
    queue = app.tables.changelog_queue
    # Recovery has sought this partition back to its start and reads it to its end once;
    # a resume that threw its records away would leave it waiting for them forever.
    queue.put_nowait(queued(3, changelog))
    app.flow_control.resume()
    assert queue.qsize() == 1
    assert consumer.rereading == {}
