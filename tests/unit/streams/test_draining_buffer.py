"""The producer buffer's flush returns only once every table write is handed to Kafka."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from rflow.streams.app import DrainingBuffer


class Channel:
    """Takes 0.15 s to accept each message: longer than Faust's own flush waits."""

    def __init__(self) -> None:
        self.published: list[int] = []

    async def publish_message(self, fut, wait: bool = False) -> None:
        await asyncio.sleep(0.15)
        self.published.append(fut.n)


def message(channel: Channel, n: int) -> SimpleNamespace:
    return SimpleNamespace(n=n, message=SimpleNamespace(channel=channel))


def buffer() -> DrainingBuffer:
    made = DrainingBuffer()
    made.app = SimpleNamespace(conf=SimpleNamespace(producer_threaded=False))
    return made


async def test_flush_waits_for_every_message_however_slow_the_hand_over():
    channel, pending = Channel(), buffer()
    await pending.start()
    try:
        for n in range(4):
            pending.put(message(channel, n))
        await pending.flush()
        assert channel.published == [0, 1, 2, 3]
        assert pending.size == 0 and pending.handing_over == 0
    finally:
        await pending.stop()


async def test_a_stopped_buffer_hands_over_what_is_left_in_order():
    channel, pending = Channel(), buffer()
    await pending.start()
    await pending.stop()
    for n in range(3):
        pending.put(message(channel, n))
    await pending.flush()
    assert channel.published == [0, 1, 2]
