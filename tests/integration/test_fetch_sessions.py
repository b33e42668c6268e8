"""The worker's consumer fetches in incremental sessions (KIP-227) on the real broker.

Each fetch after the first names only the partitions whose position moved, and the
broker answers only for partitions with records or news; every record still arrives
once and in order, and a session the broker refuses (an epoch out of step, as after an
answer that never came) is opened again with a fetch naming every partition.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from aiokafka.admin import NewTopic

from rflow.settings import Settings
from rflow.streams import consumption, kafka

PARTITIONS = 6


async def fresh_topic(settings: Settings, name: str) -> str:
    topic = f"{settings.topic_prefix}{name}"
    admin = kafka.admin(settings)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    return topic


class Watched:
    """A consumer reading ``topic`` with the worker's fetcher: its fetches in sessions,
    each fetch's named partitions noted."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.consumer = kafka.consumer(
            settings,
            topic,
            group_id=None,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            fetch_max_wait_ms=100,
        )
        self.named: list[int] = []
        """How many partitions each fetch named, in order (every broker's)."""
        self.by_session: dict[consumption.FetchSession, list[tuple[int, set[int]]]] = {}
        """Each broker's session: each fetch's epoch and the partitions it named."""

    async def start(self) -> Any:
        await self.consumer.start()
        fetcher = self.consumer._fetcher
        original = fetcher._proc_fetch_request
        consumption.hand_over_at_once(fetcher)
        assert fetcher._proc_fetch_request is not original

        # What went to the broker: the session fetches the wrapper made.
        real_fetch = consumption.FetchSession.fetch
        watched = self

        def fetch(session: consumption.FetchSession, request: Any, assignment: Any = None) -> Any:
            made = real_fetch(session, request, assignment)
            partitions = {part[0] for _, parts in made.named for part in parts}
            watched.named.append(len(partitions))
            watched.by_session.setdefault(session, []).append((made.epoch, partitions))
            return made

        self._restore = lambda: setattr(consumption.FetchSession, "fetch", real_fetch)
        consumption.FetchSession.fetch = fetch  # type: ignore[method-assign]
        return fetcher

    async def read(self, count: int, timeout: float = 30.0) -> dict[int, list[int]]:
        got: dict[int, list[int]] = defaultdict(list)
        deadline = time.monotonic() + timeout
        while sum(len(v) for v in got.values()) < count:
            assert time.monotonic() < deadline, f"read {dict(got)} of {count} records"
            batch = await self.consumer.getmany(timeout_ms=500)
            for tp, records in batch.items():
                got[tp.partition].extend(int(r.value) for r in records)
        return got

    async def stop(self) -> None:
        self._restore()
        await self.consumer.stop()


async def waited(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        await asyncio.sleep(0.01)


async def produce(settings: Settings, topic: str, values: Iterable[int]) -> dict[int, list[int]]:
    sent: dict[int, list[int]] = defaultdict(list)
    producer = kafka.producer(settings)
    await producer.start()
    try:
        for value in values:
            partition = value % PARTITIONS  # a record's partition: its value's remainder
            await producer.send_and_wait(topic, str(value).encode(), partition=partition)
            sent[partition].append(value)
    finally:
        await producer.stop()
    return sent


async def test_fetches_after_the_first_name_only_the_partitions_that_moved(settings):
    topic = await fresh_topic(settings, "sessions")
    watched = Watched(settings, topic)
    await watched.start()
    try:
        # Every partition's position found, and the session settled: a fetch names none.
        await waited(lambda: 0 in watched.named, "an idle fetch, naming no partition at all")
        before = len(watched.named)
        sent = await produce(settings, topic, [v for v in range(60) if v % PARTITIONS < 2])
        got = await watched.read(sum(len(values) for values in sent.values()))
        assert dict(got) == dict(sent)
        await waited(lambda: 0 in watched.named[before + 1 :], "an idle fetch after the records")
        assert any(s.id != 0 and s.epoch > 1 for s in watched.by_session), "no session opened"
        # Every partition is in a session ...
        assert sum(len(s.held) for s in watched.by_session) == PARTITIONS
        # ... and with records on two partitions only, no fetch named the four others.
        assert max(watched.named[before:]) <= 2, watched.named[before:]
    finally:
        await watched.stop()


async def test_a_refused_session_is_opened_again_and_nothing_is_lost_or_read_twice(settings):
    topic = await fresh_topic(settings, "refused")
    watched = Watched(settings, topic)
    await watched.start()
    try:
        first = await produce(settings, topic, range(0, 30))
        got = await watched.read(30)
        assert dict(got) == dict(first)
        # An answer that never reached the session: the broker is an epoch ahead of
        # what it believes. Its next fetch is refused; the one after opens a new session
        # naming every partition there is something to fetch from (one whose records
        # still wait to be drained joins at the next fetch).
        read_at = len(watched.named)
        await waited(lambda: 0 in watched.named[read_at:], "an idle fetch after the records")
        await waited(lambda: any(s.epoch > 1 for s in watched.by_session), "a session's answers")
        session = next(s for s in watched.by_session if s.epoch > 1)
        fetches = watched.by_session[session]
        leads = {partition for _, partition in session.held}  # all its broker leads
        session.epoch -= 1
        behind, before = session.epoch, len(fetches)
        second = await produce(settings, topic, range(30, 90))
        more = await watched.read(60)
        assert dict(more) == dict(second)
        await waited(lambda: session.epoch > 1, "the session opened again")
        after = fetches[before:]
        assert after[0][0] == behind, after  # sent on the epoch behind: refused
        assert after[1][0] == 0, after  # then a new session
        assert set().union(*(named for _, named in after[1:])) == leads, after
    finally:
        await watched.stop()
