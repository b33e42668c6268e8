"""The consumption layer's guarantees, one test per behaviour (no broker).

A simulated fetcher stands in for Faust's: it hands records of a partition log to the
layer as Faust would around a rebalance (dropping a stretch its queue threw away, handing
records again after a seek to committed, yielding a stale batch before a re-read), and
obeys seeks. Each scenario also runs through :class:`PassThrough`, which takes every
record as Faust's own consumer does, to show that the scenario is a real violation that
only the layer catches.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MethodType, SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from rflow.settings import Settings
from rflow.streams import consumption
from rflow.streams.consumption import (
    FETCH_MAX_WAIT_MS,
    Consumption,
    InternalsChanged,
    WritesLost,
    check_internals,
    writing_to,
)

TRIGGERS = TP("t.rflow.triggers", 0)
RUNS = TP("t.rflow.runs", 0)
EVENTS = TP("t.rflow.events", 3)


@dataclass
class Message:
    tp: TP
    offset: int

    @property
    def topic(self) -> str:
        return self.tp.topic

    @property
    def partition(self) -> int:
        return self.tp.partition


@dataclass
class Fetcher:
    """Stands in for Faust's consumer and fetcher: a log per TP and a position."""

    logs: dict[TP, int] = field(default_factory=dict)
    """Highwater of each TP (records are their offsets)."""
    position: dict[TP, int] = field(default_factory=dict)
    committed: dict[TP, int] = field(default_factory=dict)
    paused: set[TP] = field(default_factory=set)
    handed: dict[TP, int] = field(default_factory=dict)
    """The last offset of each TP put into a queue since it was sought."""
    seeks: list[tuple[TP, int]] = field(default_factory=list)
    commits: list[dict[TP, int]] = field(default_factory=list)
    refuse_commit: bool = False

    async def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))
        self.position[tp] = offset
        self.handed.pop(tp, None)  # nothing handed over since

    def handed_over(self, tp: TP) -> int | None:
        return self.handed.get(tp)

    def pause_partitions(self, tps: Any) -> None:
        self.paused.update(tps)

    def resume_partitions(self, tps: Any) -> None:
        for tp in tps:
            assert isinstance(tp, TP), "Faust wants its own TP type here"
        self.paused.difference_update(tps)

    def highwater(self, tp: TP) -> int | None:
        return self.logs.get(tp)

    async def earliest_offsets(self, *tps: TP) -> dict[TP, int]:
        return {tp: 0 for tp in tps}

    async def commit_offsets(self, offsets: dict[TP, int]) -> bool:
        if self.refuse_commit:
            return False
        self.commits.append(dict(offsets))
        self.committed.update(offsets)
        return True

    def fetch(self, tp: TP) -> list[Message]:
        """Everything from the position to the highwater (unless paused)."""
        if tp in self.paused:
            return []
        start, end = self.position.get(tp, 0), self.logs.get(tp, 0)
        self.position[tp] = end
        if end > start:
            self.handed[tp] = end - 1
        return [Message(tp, offset) for offset in range(start, end)]


class Writes:
    """A flusher of table writes: each checkpoint takes the writes made so far, and its
    write returns when the test has acknowledged them (as the broker would)."""

    def __init__(self) -> None:
        self.made: list[asyncio.Future] = []

    def write(self) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.made.append(future)
        return future

    def flush(self):
        taken, self.made = self.made, []

        async def write() -> None:
            await asyncio.gather(*taken)

        return write


def layer(joined: tuple[str, ...] = (TRIGGERS.topic, RUNS.topic)) -> tuple[Consumption, Fetcher]:
    fetcher = Fetcher()
    app = SimpleNamespace(
        consumer=fetcher,
        rebalancing=False,
        queued=Counter(),
        arrived=0,
    )
    made = Consumption(app, [TRIGGERS.topic, RUNS.topic, EVENTS.topic], joined)
    return made, fetcher


async def opened(made: Consumption, committed: dict[TP, int | None]) -> None:
    made.assigned(committed)
    await made.open(committed)


def fenced(made: Consumption, producers: dict[int, Any]) -> consumption.Fence:
    """``made``'s checkpoints in transactions, one of ``producers`` a partition."""
    fence = consumption.Fence(lambda tid: None, "app")
    fence.producers = producers
    made.fence, made.group = fence, "app"
    return fence


def hold_seek(
    fetcher: Fetcher, at: TP | None = None, also: Callable[[TP, int], None] | None = None
) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the fetcher's seek of ``at`` (of any TP: ``None``) until the returned
    ``release`` is set; ``seeking`` is set once it is held. ``also`` is called at every
    seek's start (as the consumer's own books are told of it)."""
    seeking, release = asyncio.Event(), asyncio.Event()
    seek = fetcher.seek

    async def held(tp: TP, offset: int) -> None:
        if also is not None:
            also(tp, offset)
        if at is None or tp == at:
            seeking.set()
            await release.wait()
        await seek(tp, offset)

    fetcher.seek = held
    return seeking, release


async def until(condition: Any, what: str, timeout: float = 10.0) -> None:
    """Wait until ``condition()`` holds (a re-read's backoff has run its course)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"waited {timeout}s for {what}")
        await asyncio.sleep(0.005)


async def reread(made: Consumption) -> None:
    """Wait until every re-read under way has sought (its backoff run out)."""
    await until(lambda: not made._seeking, "the re-reads under way to seek")


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class PassThrough:
    """Faust's own consumption: every record handed over is processed."""

    def take(self, message: Message) -> bool:
        return True


def process(taker: Any, messages: list[Message], into: list[int]) -> None:
    for message in messages:
        if taker.take(message):
            into.append(message.offset)
            if isinstance(taker, Consumption):
                taker.processed(message)


# --- in order, once ----------------------------------------------------------------------


async def test_records_are_taken_in_order_and_once():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 10})
    assert fetcher.seeks == [(TRIGGERS, 10)]
    processed: list[int] = []
    process(made, [Message(TRIGGERS, n) for n in (10, 11, 11, 10, 12)], processed)
    assert processed == [10, 11, 12]
    assert made.cursors[TRIGGERS].done == 13


async def test_a_partition_never_committed_is_read_from_its_first_offset():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: None, RUNS: 0})
    assert set(fetcher.seeks) == {(TRIGGERS, 0), (RUNS, 0)}
    assert made.take(Message(TRIGGERS, 0))


async def test_records_of_partitions_not_owned_are_not_taken():
    made, _ = layer()
    await opened(made, {TRIGGERS: 0})
    assert not made.take(Message(TP(TRIGGERS.topic, 1), 0))  # another worker's
    assert not made.take(Message(EVENTS, 0))  # not assigned here


# --- scenarios Faust produces around a rebalance -----------------------------------------


async def test_a_stretch_thrown_away_by_a_flow_resume_is_read_again_before_what_follows():
    """Faust empties its queues on a flow resume: records 5..7, fetched and counted as
    read, are gone; the fetcher goes on at 8."""
    for taker in (PassThrough(), None):
        made, fetcher = layer()
        await opened(made, {TRIGGERS: 0})
        fetcher.logs[TRIGGERS] = 10
        processed: list[int] = []
        batch = fetcher.fetch(TRIGGERS)
        thrown_away = batch[5:8]
        delivered = [m for m in batch if m not in thrown_away]
        process(taker or made, delivered, processed)
        if taker is not None:
            assert processed == [0, 1, 2, 3, 4, 8, 9]  # Faust's own: 5..7 lost
            continue
        assert processed == [0, 1, 2, 3, 4]  # nothing past the gap
        await reread(made)
        assert fetcher.seeks[-1] == (TRIGGERS, 5) and TRIGGERS not in fetcher.paused
        process(made, fetcher.fetch(TRIGGERS), processed)
        assert processed == list(range(10))


async def test_records_handed_again_after_a_seek_to_committed_are_not_processed_twice():
    for taker in (PassThrough(), None):
        made, fetcher = layer()
        await opened(made, {TRIGGERS: 0})
        fetcher.logs[TRIGGERS] = 6
        processed: list[int] = []
        process(taker or made, fetcher.fetch(TRIGGERS), processed)
        fetcher.position[TRIGGERS] = 2  # Faust seeks back to the (older) commit
        fetcher.logs[TRIGGERS] = 8
        process(taker or made, fetcher.fetch(TRIGGERS), processed)
        if taker is not None:
            assert processed == [0, 1, 2, 3, 4, 5, 2, 3, 4, 5, 6, 7]  # twice
        else:
            assert processed == list(range(8))


async def test_a_stale_batch_yielded_before_the_records_read_again_keeps_the_order():
    """Records 8, 9 reach the stream ahead of 5..7, which are being read again."""
    for taker in (PassThrough(), None):
        made, fetcher = layer()
        await opened(made, {TRIGGERS: 5})
        processed: list[int] = []
        stale = [Message(TRIGGERS, 8), Message(TRIGGERS, 9)]
        fetcher.logs[TRIGGERS] = 10
        process(taker or made, stale, processed)
        await reread(made)
        process(taker or made, fetcher.fetch(TRIGGERS), processed)
        if taker is not None:
            assert processed == [8, 9, 5, 6, 7, 8, 9]
        else:
            assert processed == [5, 6, 7, 8, 9]


async def test_a_gap_read_again_while_the_stale_batch_goes_on_is_attempted_again():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 0})
    assert not made.take(Message(TRIGGERS, 3))
    await reread(made)
    assert fetcher.seeks[-1] == (TRIGGERS, 0)
    # The fetcher yielded more of what it had fetched before the seek: still a gap,
    # and once the first attempt is old, a second one seeks again.
    assert not made.take(Message(TRIGGERS, 4))
    made.cursors[TRIGGERS].taken_at -= consumption.REREAD_BACKOFF[-1]
    assert not made.take(Message(TRIGGERS, 5))
    await reread(made)
    assert [s for s in fetcher.seeks if s[0] == TRIGGERS] == [(TRIGGERS, 0)] * 3
    assert made.take(Message(TRIGGERS, 0))


async def test_records_handed_over_that_never_reached_the_agent_are_read_again():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 4})
    fetcher.logs[TRIGGERS] = 9
    fetcher.fetch(TRIGGERS)  # 4..8 handed over, and thrown away before the agent took them
    now = made.cursors[TRIGGERS].taken_at
    assert made.stalled(now + 1) == []
    assert made.stalled(now + consumption.STALL) == [TRIGGERS]
    await reread(made)
    assert fetcher.seeks[-1] == (TRIGGERS, 4)


async def test_a_fetcher_that_hands_nothing_to_any_agent_is_read_again():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 4})
    fetcher.logs[TRIGGERS] = 9  # the broker has 4..8; the fetcher hands nothing over
    now = made.cursors[TRIGGERS].taken_at
    assert made.stalled(now) == []
    assert made.stalled(now + consumption.STALL - 0.1) == []
    assert made.stalled(now + consumption.STALL) == [TRIGGERS]


async def test_records_waiting_in_the_fetcher_behind_a_full_queue_are_not_read_again():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 0, EVENTS: 4})
    fetcher.logs[EVENTS] = 9  # 4..8 fetched, not handed over yet: the fetcher waits
    now = made.cursors[EVENTS].taken_at
    for second in range(int(consumption.STALL_ANYWAY)):
        # ... for room in the runner's full queue, handing its records over meanwhile
        made.app.queued[TRIGGERS] = 1024
        made.app.arrived += 100
        assert made.stalled(now + second) == [], second
    assert sorted(fetcher.seeks) == sorted([(TRIGGERS, 0), (EVENTS, 4)])  # the openings' only
    # A wait that long is read again anyway: a fetch of that TP alone may be stuck.
    assert made.stalled(now + consumption.STALL_ANYWAY) == [EVENTS]
    await reread(made)
    assert fetcher.seeks[-1] == (EVENTS, 4)
    assert made.stalled(made.cursors[EVENTS].taken_at + 1) == []  # not again at once


async def test_a_partition_read_again_is_not_read_again_until_its_records_come_or_stop():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 0, EVENTS: 4})
    fetcher.logs[EVENTS] = 9
    fetcher.fetch(EVENTS)  # 4..8 handed over and thrown away: read again
    now = made.cursors[EVENTS].taken_at
    assert made.stalled(now + consumption.STALL) == [EVENTS]
    await reread(made)
    assert fetcher.seeks[-1] == (EVENTS, 4)
    # After the seek the fetcher waits behind the runner's full queue: nothing of EVENTS
    # has been handed over since, so the seek is not taken for a record thrown away.
    later = made.cursors[EVENTS].taken_at
    for second in range(1, 30):
        made.app.queued[TRIGGERS] = 1024
        made.app.arrived += 100
        assert made.stalled(later + second) == [], second
    assert [s for s in fetcher.seeks if s[0] == EVENTS] == [(EVENTS, 4)] * 2


async def test_a_partition_whose_records_wait_for_a_busy_agent_is_not_read_again():
    made, fetcher = layer()
    await opened(made, {EVENTS: 4})
    fetcher.logs[EVENTS] = 900  # a burst: the projector is far behind
    made.app.queued[EVENTS] = 300
    assert made.stalled(made.cursors[EVENTS].taken_at + 60) == []


# --- checkpoints --------------------------------------------------------------------------


async def test_a_checkpoint_commits_only_what_is_processed():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 0, EVENTS: 40})
    assert made.take(Message(TRIGGERS, 0)) and made.take(Message(TRIGGERS, 1))
    made.processed(Message(TRIGGERS, 0))  # 1 is still being processed
    assert made.take(Message(EVENTS, 40))
    assert await made.checkpoint()
    assert fetcher.commits == [{TRIGGERS: 1}]
    assert not await made.checkpoint()  # nothing new
    made.processed(Message(TRIGGERS, 1))
    made.processed(Message(EVENTS, 40))
    assert await made.checkpoint()
    assert fetcher.commits[-1] == {TRIGGERS: 2, EVENTS: 41}


async def test_a_record_not_processed_holds_back_the_commit_of_those_after_it():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 0})
    for n in range(3):
        assert made.take(Message(TRIGGERS, n))
    made.processed(Message(TRIGGERS, 1))  # 0 failed (never marked processed)
    made.processed(Message(TRIGGERS, 2))
    assert not await made.checkpoint()
    assert fetcher.commits == []


async def test_a_checkpoint_waits_for_the_writes_made_before_it_and_no_later_ones():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 0})
    buffer = Writes()
    made.flushers.append(buffer.flush)
    before = buffer.write()
    assert made.take(Message(TRIGGERS, 0))
    made.processed(Message(TRIGGERS, 0))
    checkpoint = asyncio.ensure_future(made.checkpoint())
    await settle()
    after = buffer.write()  # a burst goes on writing
    assert not checkpoint.done()
    before.set_result(None)
    assert await checkpoint
    assert fetcher.commits == [{TRIGGERS: 1}] and not after.done()


async def test_a_write_the_broker_refused_fails_the_checkpoint_and_commits_nothing():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 0})
    buffer = Writes()
    made.flushers.append(buffer.flush)
    write = buffer.write()
    assert made.take(Message(TRIGGERS, 0))
    made.processed(Message(TRIGGERS, 0))
    write.set_exception(RuntimeError("not enough replicas"))
    with pytest.raises(WritesLost, match="not enough replicas"):
        await made.checkpoint()
    assert fetcher.commits == []
    # Later writes succeed, but the decisions of the write refused are lost: nothing is
    # committed any more, by a checkpoint or by the last one of a revocation or a stop.
    buffer.write().set_result(None)
    assert made.take(Message(TRIGGERS, 1))
    made.processed(Message(TRIGGERS, 1))
    with pytest.raises(WritesLost, match="not enough replicas"):
        await made.checkpoint()
    await made.stop_taking()
    with pytest.raises(WritesLost, match="not enough replicas"):  # not swallowed
        await made.close()
    assert fetcher.commits == [] and made.cursors == {}


async def test_a_write_that_fails_before_the_broker_has_it_commits_nothing():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 0})

    def flush():
        raise KeyError("a table's codec refused a value")

    made.flushers.append(flush)
    assert made.take(Message(TRIGGERS, 0))
    made.processed(Message(TRIGGERS, 0))
    with pytest.raises(WritesLost, match="codec refused"):
        await made.checkpoint()
    made.flushers.clear()
    with pytest.raises(WritesLost):
        await made.checkpoint()
    assert fetcher.commits == []


async def test_the_checkpoints_stop_the_worker_once_a_write_is_lost():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 0})
    crashed = []

    async def crash(exc):
        crashed.append(exc)

    made.app.crash = crash
    buffer = Writes()
    made.flushers.append(buffer.flush)
    buffer.write().set_exception(RuntimeError("request timed out"))
    await asyncio.wait_for(made.run(), timeout=5)  # returns once it has crashed the app
    assert len(crashed) == 1 and isinstance(crashed[0], WritesLost)
    assert fetcher.commits == []


async def test_a_checkpoint_writes_what_was_decided_in_order_before_it_commits():
    made, fetcher = layer()
    await opened(made, {RUNS: 0})
    written: list[str] = []
    journal_acknowledged = asyncio.Event()
    decided = {"journal": ["run settled"], "tables": ["run marked settled"]}

    def flusher(name: str):
        def flush():
            taken, decided[name] = decided[name], []  # taken at the checkpoint's start

            async def write() -> None:
                if name == "journal":
                    await journal_acknowledged.wait()
                written.extend(taken)

            return write

        return flush

    made.flushers += [flusher("journal"), flusher("tables")]
    assert made.take(Message(RUNS, 0))
    made.processed(Message(RUNS, 0))
    checkpoint = asyncio.ensure_future(made.checkpoint())
    await settle()
    decided["journal"].append("decided after the checkpoint began")
    assert written == [] and fetcher.commits == []  # no table before the journal
    journal_acknowledged.set()
    assert await checkpoint
    assert written == ["run settled", "run marked settled"]
    assert fetcher.commits == [{RUNS: 1}]


async def test_a_checkpoint_writes_decisions_that_no_record_brought():
    made, fetcher = layer()
    await opened(made, {RUNS: 0})
    written: list[str] = []
    made.flushers.append(lambda: lambda: _append(written, "result of an action"))
    assert not await made.checkpoint()  # nothing to commit, but written
    assert written == ["result of an action"] and fetcher.commits == []


async def _append(into: list, item: str) -> None:
    into.append(item)


async def test_a_commit_the_group_refuses_leaves_the_cursor_uncommitted():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 0})
    assert made.take(Message(TRIGGERS, 0))
    made.processed(Message(TRIGGERS, 0))
    fetcher.refuse_commit = True
    assert not await made.checkpoint()
    assert made.committed() == {TRIGGERS: 0}


# --- rebalances ---------------------------------------------------------------------------


async def test_a_revocation_waits_for_the_decision_under_way_then_commits_and_owns_nothing():
    made, fetcher = layer()
    await opened(made, {RUNS: 0})
    steps: list[str] = []
    release = asyncio.Event()

    async def decision() -> None:
        steps.append("deciding")
        await release.wait()
        steps.append("decided")

    assert made.take(Message(RUNS, 0))
    processing = asyncio.ensure_future(made.process(Message(RUNS, 0), decision))
    await settle()
    stopping = asyncio.ensure_future(made.stop_taking())
    await settle()
    assert not stopping.done() and not made.owns(0)
    assert not made.take(Message(RUNS, 1))  # nothing new is taken meanwhile
    release.set()
    await stopping
    assert await processing and steps == ["deciding", "decided"]
    made.on_close.append(lambda: steps.append(f"closed after {len(fetcher.commits)} commit"))
    await made.close()
    assert fetcher.commits == [{RUNS: 1}]
    assert made.cursors == {} and not made.take(Message(RUNS, 1))
    # What the tables kept is dropped once the last checkpoint has committed.
    assert steps[-1] == "closed after 1 commit"


async def test_opening_tells_which_joined_partitions_are_decided_here():
    made, _ = layer()
    told: list[frozenset[int]] = []

    async def on_open(numbers: frozenset[int]) -> None:
        told.append(numbers)

    made.on_open.append(on_open)
    await opened(made, {TRIGGERS: 0, RUNS: 0, TP(RUNS.topic, 5): 3, EVENTS: 0})
    assert told == [frozenset({0, 5})]
    assert made.owned() == {0, 5}


async def test_only_the_tps_waiting_to_open_are_opened_by_a_seek_to_committed():
    made, fetcher = layer()
    await opened(made, {TRIGGERS: 10})
    assert made.take(Message(TRIGGERS, 10))
    await made.open({TRIGGERS: 3})  # Faust seeks to committed again, mid-generation
    assert made.cursors[TRIGGERS].next == 11  # the cursor does not go back
    assert fetcher.seeks == [(TRIGGERS, 10)]


# --- one lock per partition ---------------------------------------------------------------


async def test_decisions_of_one_partition_wait_for_each_other_and_others_do_not():
    made, _ = layer()
    await opened(made, {RUNS: 0, TP(RUNS.topic, 1): 0})
    order: list[str] = []
    first_started = asyncio.Event()
    release = asyncio.Event()

    async def first() -> None:
        order.append("0:first")
        first_started.set()
        await release.wait()

    async def second() -> None:
        order.append("0:second")

    async def other() -> None:
        order.append("1:other")

    one = asyncio.ensure_future(made.decide(0, first))
    await first_started.wait()
    two = asyncio.ensure_future(made.decide(0, second))
    assert await made.decide(1, other)
    release.set()
    assert await one and await two
    assert order == ["0:first", "1:other", "0:second"]


async def test_a_partition_not_owned_decides_nothing():
    made, _ = layer()

    async def work() -> None:
        raise AssertionError("must not run")

    assert not await made.decide(3, work)


def test_table_writes_go_to_the_partition_being_decided():
    with writing_to(6):
        assert consumption.current_partition() == 6
    with pytest.raises(RuntimeError, match="only while a partition is being decided"):
        consumption.current_partition()


# --- Faust, aiokafka and mode as rflow relies on them ------------------------------------


def test_the_installed_libraries_are_the_ones_relied_on():
    check_internals()


def test_another_version_is_refused_naming_it(monkeypatch):
    monkeypatch.setitem(consumption.PINNED, "aiokafka", "0.99.0")
    with pytest.raises(
        InternalsChanged, match=r"aiokafka 0\.14\.0 is installed; rflow needs 0\.99\.0"
    ):
        check_internals()


def test_a_missing_private_name_is_refused_naming_it(monkeypatch):
    monkeypatch.setitem(
        consumption.INTERNALS, "faust Consumer._nothing", ("faust-streaming", lambda: False)
    )
    with pytest.raises(
        InternalsChanged, match=r"faust-streaming 0\.15\.3 has no faust Consumer\._nothing"
    ):
        check_internals()


async def test_the_worker_consumer_waits_briefly_for_a_fetch():
    from rflow.streams.app import create_app

    app = create_app(Settings(api_token="t"))
    consumer = app.consumer._thread._create_worker_consumer(app.transport)
    assert consumer._fetch_max_wait_ms == FETCH_MAX_WAIT_MS == 50


def draining(app: Any, batches: list[list[Message]], callback: Callable[..., Any]) -> Any:
    """The app's consumer fed ``batches`` by a stand-in ``getmany`` (which stops the
    fetcher once they are out), handing each record to ``callback``; returns the fetcher
    and what each further ``getmany`` call saw (``asked``) to fill in."""
    consumer = app.consumer
    fetcher = SimpleNamespace(_stopped=asyncio.Event(), asked=[])
    pending = list(batches)

    async def getmany(timeout: float) -> Any:
        fetcher.asked.append(None)
        if not pending:
            fetcher._stopped.set()
            return
        for message in pending.pop(0):
            yield message.tp, message

    consumer.getmany = getmany
    consumer.callback = callback
    return fetcher


async def test_the_fetcher_asks_again_once_its_records_are_queued_before_the_agents_run():
    from rflow.streams.app import create_app

    app = create_app(Settings(api_token="t"))
    queue: asyncio.Queue[int] = asyncio.Queue()
    taken: list[int] = []
    seen: list[tuple[int, list[int]]] = []

    async def agent() -> None:
        while True:
            taken.append(await queue.get())

    async def callback(message: Message) -> None:
        await queue.put(message.offset)

    fetcher = draining(app, [[Message(EVENTS, 1), Message(EVENTS, 2)]], callback)
    fetcher.asked = SimpleNamespace(append=lambda _: seen.append((queue.qsize(), list(taken))))
    agent_task = asyncio.ensure_future(agent())
    try:
        await asyncio.sleep(0)  # the agent waits on its queue
        await app.consumer._drain_messages(fetcher)
        # Asked for more with both records queued and the agent they woke not run yet.
        assert seen[:2] == [(0, []), (2, [])]
        while len(taken) < 2:
            await asyncio.sleep(0)
        assert taken == [1, 2]
    finally:
        agent_task.cancel()


async def test_a_record_waiting_for_room_in_a_full_queue_is_given_up_when_the_flow_stops():
    from rflow.streams.app import create_app

    app = create_app(Settings(api_token="t"))
    queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
    queue.put_nowait(0)
    waiting, ended = asyncio.Event(), []

    async def callback(message: Message) -> None:
        waiting.set()
        try:
            await queue.put(message.offset)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    fetcher = draining(app, [[Message(EVENTS, 1)]], callback)
    drain = asyncio.ensure_future(app.consumer._drain_messages(fetcher))
    await asyncio.wait_for(waiting.wait(), 5)
    assert not drain.done()
    app.consumer.suspend_flow.set()  # as a rebalance does
    await asyncio.wait_for(drain, 5)
    assert ended == ["cancelled"] and queue.get_nowait() == 0 and queue.empty()


async def test_the_fetcher_counts_the_records_of_each_tp_it_delivered():
    from rflow.streams.app import create_app

    app = create_app(Settings(api_token="t"))
    queue: asyncio.Queue[int] = asyncio.Queue(maxsize=3)
    blocked = asyncio.Event()

    async def callback(message: Message) -> None:
        if queue.full():
            blocked.set()
        await queue.put(message.offset)

    batch = [Message(EVENTS, 1), Message(TRIGGERS, 7), Message(EVENTS, 2)]
    await app.consumer._drain_messages(draining(app, [batch], callback))
    assert app.delivered == {EVENTS: (2, 2), TRIGGERS: (1, 7)}
    # A record given up for a suspended flow is not delivered, nor is what follows it.
    app.delivered.clear()
    queue.get_nowait()  # room for one record
    batch = [Message(TRIGGERS, 8), Message(EVENTS, 3), Message(EVENTS, 4)]
    drain = asyncio.ensure_future(app.consumer._drain_messages(draining(app, [batch], callback)))
    await asyncio.wait_for(blocked.wait(), 5)
    app.consumer.suspend_flow.set()  # as a rebalance does
    await asyncio.wait_for(drain, 5)
    assert app.delivered == {TRIGGERS: (1, 8)}


async def test_a_first_step_runs_to_where_the_coroutine_waits_in_a_context_of_its_own():
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="outer")

    async def done_at_once() -> None:
        var.set("inner")

    assert consumption._first_step(done_at_once) is None
    assert var.get() == "outer"

    async def refused() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        consumption._first_step(refused)

    answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def waits() -> int:
        var.set("inner")
        got = await answer
        await asyncio.sleep(0)  # a bare yield
        return got + (var.get() == "inner")

    rest = consumption._first_step(waits)
    assert rest is not None and var.get() == "outer"
    task = asyncio.ensure_future(rest)
    answer.set_result(41)
    assert await asyncio.wait_for(task, 5) == 42

    failed: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def waits_and_fails() -> int:
        return await failed

    task = asyncio.ensure_future(consumption._first_step(waits_and_fails))
    failed.set_exception(KeyError("gone"))
    with pytest.raises(KeyError, match="gone"):
        await asyncio.wait_for(task, 5)


async def test_cancelling_the_rest_of_a_step_cancels_what_the_coroutine_waits_for():
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def waits() -> None:
        try:
            await never
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = asyncio.ensure_future(consumption._first_step(waits))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert never.cancelled() and seen == ["cancelled"]


async def test_a_crashed_consumer_fetches_nothing_more():
    from rflow.streams.app import create_app

    app = create_app(Settings(api_token="t"))

    async def callback(message: Message) -> None:
        raise AssertionError("nothing is handed over")

    fetcher = draining(app, [[Message(EVENTS, 1)]], callback)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        fetcher._stopped.set()

    app.consumer.sleep = sleep
    app.consumer._crashed.set()
    await app.consumer._drain_messages(fetcher)
    assert fetcher.asked == [] and slept == [1.0]


async def test_a_cancelled_step_waits_for_the_task_it_waited_for_to_end():
    release = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def inner() -> None:
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            await release  # ends only when told to
            seen.append("inner ended")
            raise

    async def waits() -> None:
        # The standard library's pure-Python task: cancel() leaves it pending until it
        # has ended (C tasks do too, but their futures hide an early resume).
        task = asyncio.tasks._PyTask(inner())
        try:
            await task
        except asyncio.CancelledError:
            seen.append(f"resumed, inner done: {task.done()}")
            raise

    rest = asyncio.ensure_future(consumption._first_step(waits))
    for _ in range(3):
        await asyncio.sleep(0)
    rest.cancel()
    for _ in range(3):
        await asyncio.sleep(0)
    assert seen == []  # still waiting for inner
    release.set_result(None)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(rest, 5)
    assert seen == ["inner ended", "resumed, inner done: True"]


async def test_closing_the_rest_of_a_step_closes_the_coroutine_it_runs():
    seen: list[str] = []

    async def waits() -> None:
        try:
            await asyncio.get_running_loop().create_future()
        except GeneratorExit:
            seen.append("closed")
            raise

    rest = consumption._first_step(waits)
    rest.send(None)  # to its first wait
    rest.close()
    assert seen == ["closed"]


async def test_a_flow_resume_empties_no_queue_and_queues_count_their_records():
    from rflow.streams.app import create_app

    app = create_app(Settings(api_token="t"))
    queue = app.FlowControlQueue(maxsize=10, clear_on_resume=True)
    event = SimpleNamespace(message=Message(EVENTS, 7))
    queue.put_nowait(event)
    queue.force_put_nowait(SimpleNamespace(message=Message(EVENTS, 8)))  # as Faust puts
    app.flow_control.resume()
    app.flow_control.clear()
    assert queue.qsize() == 2 and app.queued[EVENTS] == 2
    assert await queue.get() is event
    assert app.queued[EVENTS] == 1


async def test_a_table_recovery_offset_aiokafka_refuses_reads_the_changelog_from_its_start(
    monkeypatch,
):
    from rflow.streams.app import create_app

    app = create_app(Settings(api_token="t"))
    sought: list[dict] = []

    async def seek_wait(self, partitions):
        sought.append(dict(partitions))

    monkeypatch.setattr(consumption.aiokafka_driver.Consumer, "seek_wait", seek_wait)
    changelog = TP("t.rflow.state.runs", 2)
    await app.consumer.seek_wait({changelog: None, TP("t.rflow.state.runs", 3): 17})
    assert sought == [{changelog: 0, TP("t.rflow.state.runs", 3): 17}]


async def test_what_the_fetcher_hands_over_is_told_by_the_queues_until_a_seek(monkeypatch):
    from rflow.streams.app import create_app

    app = create_app(Settings(api_token="t"))
    tp = TP("t.rflow.events", 5)
    assert app.consumer.handed_over(tp) is None
    queue = app.FlowControlQueue(maxsize=10)
    queue.force_put_nowait(SimpleNamespace(message=Message(tp, 22)))  # as Faust puts
    queue.force_put_nowait(SimpleNamespace(message=Message(tp, 23)))
    assert app.consumer.handed_over(tp) == 23

    seeks = []

    async def call_thread(self, fun, *args, **kwargs):
        return await fun(*args, **kwargs)  # as the consumer runs it

    def aiokafka_consumer(self):
        return SimpleNamespace(seek=lambda partition, offset: seeks.append((partition, offset)))

    monkeypatch.setattr(consumption.RflowConsumerService, "call_thread", call_thread)
    monkeypatch.setattr(consumption.RflowConsumerService, "_ensure_consumer", aiokafka_consumer)
    await app.consumer.seek(tp, 17)  # Faust's seek, as a re-read makes it
    assert seeks == [(tp, 17)]  # made by the consumer
    assert app.consumer.handed_over(tp) is None  # nothing handed over since
    # Records drained before the seek and put into a queue after it are stale.
    queue.force_put_nowait(SimpleNamespace(message=Message(tp, 24)))
    assert app.consumer.handed_over(tp) is None
    assert queue.follows[tp][-1] == (24, consumption.STALE)


async def test_a_tp_whose_fetched_records_were_dropped_is_not_told_read_to_its_end(monkeypatch):
    from rflow.streams.app import create_app

    app = create_app(Settings(api_token="t"))
    thread = app.consumer._thread
    tp = TP("t.rflow.state.triggers-changelog", 6)
    queue = app.FlowControlQueue(maxsize=100)
    fetches: list[tuple[list[int], int]] = []  # each fetch's offsets, and the position after
    position = {tp: 0}

    async def call_thread(self, fun, *args, **kwargs):
        return await fun(*args, **kwargs)  # as the consumer runs it

    async def fetched(self, consumer, active_partitions, **kwargs):
        offsets, position[tp] = fetches.pop(0)
        return {tp: [SimpleNamespace(offset=n) for n in offsets]} if offsets else {}

    state = SimpleNamespace(state_value=lambda _: SimpleNamespace(position=position[tp]))
    aiokafka_consumer = SimpleNamespace(
        _max_poll_records=500,
        _subscription=SimpleNamespace(subscription=SimpleNamespace(assignment=state)),
    )

    end = {tp: 13}

    async def ends(self, *partitions):
        return dict(end)

    monkeypatch.setattr(consumption.RflowConsumerService, "call_thread", call_thread)
    monkeypatch.setattr(
        consumption.RflowConsumerService, "_ensure_consumer", lambda _: aiokafka_consumer
    )
    monkeypatch.setattr(
        consumption.aiokafka_driver.AIOKafkaConsumerThread, "_fetch_records", fetched
    )
    monkeypatch.setattr(consumption.RflowConsumerService, "highwaters", ends)

    async def fetch(offsets: list[int], after: int, handed: list[int]) -> None:
        fetches.append((offsets, after))
        await thread.getmany({tp}, 1.0)
        for count, n in enumerate(handed, 1):  # what the fetcher's loop handed over of it
            queue.force_put_nowait(SimpleNamespace(message=Message(tp, n)))
            app.delivered[tp] = (count, n)

    # Read as a standby copy: 10 and 11, then a transaction's marker at 12.
    await fetch([10, 11], 13, [10, 11])
    await fetch([], 13, [])
    assert app.read_to[tp] == 13 and app.consumer.handed_over(tp) == 11
    # The copy kept current ends its recovery at once: 12 is a marker.
    assert await app.consumer.highwaters(tp) == {tp: 12}
    end[tp] = 42
    # A rebalance suspends the flow after 13 of a fetch of 13 to 40: Faust drops the rest.
    await fetch(list(range(13, 41)), 41, [13])
    await fetch([], 42, [])  # then a marker at 41
    await fetch([], 42, [])
    assert tp not in app.read_to and tp in app.dropped
    # 14 to 40 were never applied: the end is the broker's, not one past 13.
    assert await app.consumer.highwaters(tp) == {tp: 42}
    # Sought again, the TP is read afresh; a record skipped inside a fetch (its TP paused
    # and resumed meanwhile) is a record dropped too.
    app.sought_to(tp, 14)
    await fetch(list(range(14, 41)), 42, [14, 40])
    await fetch([], 42, [])
    assert tp not in app.read_to and tp in app.dropped
    # A TP no longer assigned here is forgotten: assigned back, it is asked for afresh.
    app.forget_unassigned([])
    assert tp not in app.dropped and app.consumer.handed_over(tp) is None
    # Sought again (as a recovery does), the TP is read afresh.
    app.sought_to(tp, 14)
    await fetch(list(range(14, 41)), 42, list(range(14, 41)))
    await fetch([], 42, [])
    assert app.read_to[tp] == 42 and tp not in app.dropped
    assert await app.consumer.highwaters(tp) == {tp: 41}
    # A recovery here already read it through the marker at 41 (a partition assigned
    # here, then again): the end told is not below that, or Faust would find the offset
    # recovered past the end and stop the worker.
    app.tables.recovery.active_offsets[tp] = 41
    assert await app.consumer.highwaters(tp) == {tp: 42}
    app.tables.recovery.active_offsets[tp] = 39  # one that stopped short of the end
    assert await app.consumer.highwaters(tp) == {tp: 41}


class Stream:
    """An agent's stream: each event arrives with how many more wait behind it."""

    def __init__(self, app: Any, arrivals: list[tuple[Message, int]]) -> None:
        self.app, self.arrivals = app, arrivals

    async def events(self):
        for message, behind in self.arrivals:
            self.app.queued[message.tp] = behind
            yield SimpleNamespace(message=message)


async def test_an_agent_takes_in_batches_what_has_arrived_by_the_time_it_is_ready():
    made, _ = layer()
    await opened(made, {EVENTS: 0})
    arrivals = [(Message(EVENTS, n), behind) for n, behind in enumerate([2, 1, 0, 0, 3, 2, 1, 0])]
    arrivals.insert(2, (Message(EVENTS, 1), 1))  # a duplicate: dropped
    got = []
    async for batch in made.batches(Stream(made.app, arrivals), EVENTS.topic, most=3):
        got.append([event.message.offset for event in batch])
        made.processed_all(batch)
    # A burst of three, then one alone (nothing behind it), then a burst of four, cut at 3.
    assert got == [[0, 1, 2], [3], [4, 5, 6], [7]]
    assert made.cursors[EVENTS].done == 8


# --- transactions, handlers and the open/close race ------------------------------------


async def test_a_close_during_the_seeks_of_an_opening_leaves_no_cursor_to_commit():
    made, fetcher = layer()
    seeking, release = hold_seek(fetcher)
    other = TP(TRIGGERS.topic, 1)
    made.assigned({TRIGGERS: 5, other: 7})
    opening = asyncio.create_task(made.open({TRIGGERS: 5, other: 7}))
    await seeking.wait()
    await made.stop_taking()
    await made.close()  # a revocation while the opening awaits its first seek
    release.set()
    await opening
    assert made.cursors == {} and not made.reading and not made.owns(0)
    assert await made.checkpoint() is False
    assert fetcher.commits == []


async def test_no_record_of_an_opening_is_handed_over_before_every_cursor_is_in_place():
    # Faust resumes the TPs before it asks for the seek to committed: a run's result
    # fetched for the TP sought first, while a later seek was under way, found no cursor
    # and was refused; nothing followed it while its lane waited for it, so it was never
    # read again and the lane waited for ever.
    made, fetcher = layer()
    seeking, release = hold_seek(fetcher, TRIGGERS)
    fetcher.logs.update({RUNS: 6, TRIGGERS: 7})
    made.assigned({RUNS: 5, TRIGGERS: 7})
    opening = asyncio.create_task(made.open({RUNS: 5, TRIGGERS: 7}))
    await seeking.wait()  # RUNS is sought (first); TRIGGERS' seek is under way
    refused = [m.offset for m in fetcher.fetch(RUNS) if not made.take(m)]
    release.set()
    await opening
    taken = [m.offset for m in fetcher.fetch(RUNS) if made.take(m)]
    assert (refused, taken) == ([], [5])
    assert not fetcher.paused


async def test_a_record_refused_where_its_tp_is_not_open_is_not_counted_as_read():
    made, fetcher = layer()
    app = made.app
    app.books, app.read_to, app.dropped, app.handed = threading.RLock(), {}, set(), {}
    app.lost = MethodType(consumption.ConsumingApp.lost, app)
    app.read_to[RUNS] = 6  # a fetch since RUNS was last sought read it up to 5
    # 5 waited in a queue from before that seek (nothing handed over since): the seek
    # reads it again, and it is no sign of a record lost.
    assert not made.take(Message(RUNS, 5))
    assert app.read_to[RUNS] == 6 and RUNS not in app.dropped
    # Handed over since the seek, and refused for want of a cursor: RUNS is not read.
    app.handed[RUNS] = 5
    assert not made.take(Message(RUNS, 5))
    assert RUNS not in app.read_to and RUNS in app.dropped
    # Open at 5 (as a cursor put in place after the fetch would be), the stall check
    # reads it again instead of taking 5 for the end of RUNS.
    await opened(made, {RUNS: 5})
    fetcher.logs[RUNS], fetcher.handed[RUNS] = 6, 5
    assert made.stalled(made.cursors[RUNS].taken_at + consumption.STALL) == [RUNS]
    await reread(made)
    assert fetcher.seeks[-1] == (RUNS, 5)


async def test_a_record_queued_before_an_opening_seek_leaves_its_tp_read_as_fetched():
    # Taken from its queue while the opening awaits a later seek, a record drained
    # before its TP's seek is refused; the TP is still read as its next fetch says, so
    # the transaction marker after its last record is passed and nothing stalls.
    made, fetcher = layer()
    app = made.app
    app.books, app.read_to, app.dropped, app.sought = threading.RLock(), {}, set(), {}
    app.handed, app.put_last, app.queued = {}, {}, Counter()
    for name in ("lost", "sought_to", "read_through"):
        setattr(app, name, MethodType(getattr(consumption.ConsumingApp, name), app))
    # Each seek tells the books, as the consumer's own does.
    seeking, release = hold_seek(fetcher, TRIGGERS, also=app.sought_to)
    made.assigned({EVENTS: 5, TRIGGERS: 7})
    opening = asyncio.create_task(made.open({EVENTS: 5, TRIGGERS: 7}))
    await seeking.wait()  # EVENTS is sought: its record 5 from before is taken now
    assert not made.take(Message(EVENTS, 5))
    release.set()
    await opening
    app.delivered = {EVENTS: (1, 5)}  # the fetch after the seek: 5, then a marker at 6
    app.read_through({EVENTS: 7}, dict(app.sought), {EVENTS: (1, 5)})
    assert app.read_to[EVENTS] == 7 and EVENTS not in app.dropped
    assert made.take(Message(EVENTS, 5))
    made.processed(Message(EVENTS, 5))
    fetcher.logs[EVENTS], fetcher.handed[EVENTS] = 7, 5
    made._pass_trailing_markers()
    assert made.cursors[EVENTS].next == 7
    assert made.stalled(made.cursors[EVENTS].taken_at + consumption.STALL_ANYWAY) == []


async def opened_with_a_queue(tp: TP) -> tuple[Any, Any, Any]:
    """A layer that opened ``tp`` at offset 0, and a queue of its app (as the opening's
    seek to 0 leaves it: the next record put follows offset -1)."""
    made, fetcher = layer()
    app = made.app
    app.handed, app.put_last, app.got, app.flow_control = {}, {}, {}, asyncio.Event()
    queue = consumption.queue(app, maxsize=100)
    await opened(made, {tp: 0})
    app.put_last[tp] = -1
    return made, fetcher, queue


def take_all(made: Any, queue: Any, offsets: tuple[int, ...], process: bool = False) -> list:
    """Put records of the events topic at ``offsets`` into ``queue`` (in a transactional
    topic, offsets between hold markers or aborted records), and take what is taken."""
    for offset in offsets:
        queue.put_nowait(Message(EVENTS, offset))
    taken = []
    while not queue.empty():
        message = queue.get_nowait()
        if made.take(message):
            taken.append(message)
            if process:
                made.processed(message)
    return taken


async def test_offsets_a_read_committed_fetch_skips_are_no_gap():
    made, fetcher, queue = await opened_with_a_queue(EVENTS)
    app = made.app
    # 0 and 1 committed in one transaction (its marker at 2), 3 in the next (marker at 4),
    # 5..7 aborted (marker at 8), then 9.
    taken = take_all(made, queue, (0, 1, 3, 9), process=True)
    assert [message.offset for message in taken] == [0, 1, 3, 9]
    assert fetcher.seeks == [(EVENTS, 0)]  # nothing read again
    # A record handed over after one that never reached the agent (thrown away) is a
    # gap: the TP is read again from the cursor.
    queue.put_nowait(Message(EVENTS, 10))
    queue.put_nowait(Message(EVENTS, 11))
    queue.get_nowait()  # 10 never reaches the agent
    assert made.take(queue.get_nowait()) is False
    await until(lambda: fetcher.seeks[-1] == (EVENTS, 10), "the gap read again")
    # After the seek, records aiokafka drained before it (still being handed over) are
    # stale: never taken, and no cause to read again (the seek does), however long ago
    # the last attempt was: a seek made while a fetch is under way must not make another.
    cursor = made.cursors[EVENTS]
    seeks, rereads = len(fetcher.seeks), cursor.rereading
    app.put_last[EVENTS] = 9
    app.sought, app.fetch_sought = {EVENTS: 2}, {EVENTS: 1}
    cursor.taken_at -= consumption.REREAD_BACKOFF[-1]
    for offset in (10, 12):
        queue.put_nowait(Message(EVENTS, offset))
        assert made.take(queue.get_nowait()) is False
    assert app.put_last[EVENTS] == 9  # what comes next still follows the seek
    assert (len(fetcher.seeks), cursor.rereading) == (seeks, rereads)  # none asked for
    app.fetch_sought = {EVENTS: 2}  # drained since: 12 follows the seek to 10 (a marker)
    queue.put_nowait(Message(EVENTS, 12))
    assert made.take(queue.get_nowait()) is True


async def test_offsets_a_read_committed_fetch_skips_are_committed_past_once_processed():
    made, fetcher, queue = await opened_with_a_queue(EVENTS)
    app = made.app
    taken = take_all(made, queue, (0, 1, 3, 9))  # as above: markers at 2, 4, 8
    cursor = made.cursors[EVENTS]
    assert cursor.next == 10 and cursor.done == 0
    # Processed in order (a batch agent marks them after its batch): the offsets between
    # are passed over as each record before them is done, never before.
    made.processed(taken[0])
    assert cursor.done == 1
    made.processed(taken[1])
    assert cursor.done == 3  # the marker at 2 is no record to wait for
    made.processed(taken[2])
    assert cursor.done == 9
    assert await made.checkpoint() is True
    assert fetcher.commits[-1] == {EVENTS: 9}
    made.processed(taken[3])
    assert await made.checkpoint() is True
    assert fetcher.commits[-1] == {EVENTS: 10}
    # Taken past a marker while everything before it is processed: done moves at once.
    app.put_last[EVENTS] = 9
    queue.put_nowait(Message(EVENTS, 11))
    message = queue.get_nowait()
    assert made.take(message) and cursor.done == 11
    made.processed(message)
    assert cursor.done == 12 and not cursor.skipped


async def test_a_transactions_trailing_marker_is_committed_past_once_everything_is_processed():
    made, fetcher, queue = await opened_with_a_queue(EVENTS)
    app = made.app
    app.read_to = {}
    taken = take_all(made, queue, (0, 1))  # the transaction's marker at 2, nothing after
    app.read_to[EVENTS] = 3  # the fetcher read past the marker
    assert await made.checkpoint() is False  # 0 and 1 not processed yet: nothing passed
    for message in taken:
        made.processed(message)
    app.queued[EVENTS] += 1  # a record waits in a queue: nothing passed either
    assert await made.checkpoint() is True
    assert fetcher.commits[-1] == {EVENTS: 2}
    app.queued[EVENTS] -= 1
    assert await made.checkpoint() is True  # nothing waits: the marker is passed
    assert fetcher.commits[-1] == {EVENTS: 3}
    cursor = made.cursors[EVENTS]
    assert (cursor.next, cursor.done) == (3, 3)
    made.cursors[TRIGGERS] = consumption.Cursor(TRIGGERS, next=4, done=4, committed=4)
    app.read_to[TRIGGERS] = 9  # no transaction writes the triggers topic: never passed
    await made.checkpoint()
    assert made.cursors[TRIGGERS].next == 4


async def test_a_record_that_left_its_queue_untaken_is_never_committed_past():
    made, fetcher, queue = await opened_with_a_queue(EVENTS)
    app = made.app
    app.read_to = {}
    for message in take_all(made, queue, (0, 1)):
        made.processed(message)
    # Handed over, then pulled from the queue by a stream whose flow a rebalance had
    # suspended: Faust skipped it, so it never reached the layer.
    queue.put_nowait(Message(EVENTS, 2))
    queue.get_nowait()
    app.read_to[EVENTS] = 4  # the fetch read past it and a marker at 3
    assert await made.checkpoint() is True
    assert fetcher.commits[-1] == {EVENTS: 2}  # 2 is read again by whoever owns it next
    cursor = made.cursors[EVENTS]
    assert (cursor.next, cursor.done) == (2, 2)


async def test_on_a_topic_no_transaction_writes_a_gap_is_read_again_however_it_follows():
    made, fetcher, queue = await opened_with_a_queue(TRIGGERS)
    queue.put_nowait(Message(TRIGGERS, 2))
    assert made.take(queue.get_nowait()) is False
    await reread(made)
    assert fetcher.seeks[-1] == (TRIGGERS, 0)


class FakeProducer:
    """A transactional producer: what it was given, per transaction."""

    def __init__(self, number: int, log: list) -> None:
        self.number, self.log = number, log
        self.fail_commit: Exception | None = None

    async def begin_transaction(self) -> None:
        self.log.append((self.number, "begin"))

    async def send(self, topic, value, key=None, partition=None):
        self.log.append((self.number, "send", topic, key, partition))
        future = asyncio.get_running_loop().create_future()
        future.set_result(SimpleNamespace(offset=len(self.log), partition=partition))
        return future

    async def send_offsets_to_transaction(self, offsets, group) -> None:
        self.log.append((self.number, "offsets", {tp.partition: o for tp, o in offsets.items()}))

    async def commit_transaction(self) -> None:
        if self.fail_commit is not None:
            raise self.fail_commit
        self.log.append((self.number, "commit"))


def changelog_flush(partition: int, applied: list[str]) -> Callable[[], Any]:
    """A flusher writing one changelog record of ``partition`` in the checkpoint's
    transaction, whose store is applied (``applied`` gets "store") only after the commit."""

    def flush():
        async def write() -> None:
            checkpoint = consumption.current_checkpoint()
            await checkpoint.send(partition, "t.changelog", b"k", b"v", partition)
            checkpoint.then(lambda: applied.append("store"))
            assert applied == []  # not before the commit

        return write

    return flush


async def test_a_checkpoint_writes_each_partition_in_its_own_transaction_with_its_offsets():
    made, fetcher = layer()
    log: list = []
    producers = {n: FakeProducer(n, log) for n in (0, 1)}
    fenced(made, dict(producers))
    other = TP(RUNS.topic, 1)
    await opened(made, {TRIGGERS: 0, other: 4, EVENTS: 0})
    applied: list[str] = []
    made.flushers.append(changelog_flush(1, applied))
    for message in (Message(TRIGGERS, 0), Message(other, 4), Message(EVENTS, 0)):
        assert made.take(message)
        made.processed(message)
    assert await made.checkpoint() is True
    assert (1, "send", "t.changelog", b"k", 1) in log
    assert (0, "offsets", {0: 1}) in log and (1, "offsets", {1: 5}) in log
    assert {entry for entry in log if entry[1] == "commit"} == {(0, "commit"), (1, "commit")}
    assert applied == ["store"]
    # The events topic is not joined: its offsets go the consumer's way (generation-fenced).
    assert fetcher.commits == [{EVENTS: 1}]


async def test_a_committed_checkpoint_is_freed_without_the_cycle_collector():
    """A checkpoint lets go of its transactions' beginnings and its callbacks once
    committed. Kept, they made a cycle (a beginning's task holds the context it was begun
    in, whose context variable holds the checkpoint): everything the checkpoint wrote
    stayed alive until the collector's oldest generation ran, then was freed at once, a
    pause of the worker's loop (up to 103 ms after a burst of 2,000 runs)."""
    made, _ = layer()
    fenced(made, {0: FakeProducer(0, [])})
    await opened(made, {TRIGGERS: 0})

    class Written:
        """Stands for what a checkpoint's callback writes to a store."""

    kept: list[weakref.ref] = []

    def flush():
        written = Written()

        async def write() -> None:
            checkpoint = consumption.current_checkpoint()
            kept.extend((weakref.ref(checkpoint), weakref.ref(written)))
            await checkpoint.send(0, "t.changelog", b"k", b"v", 0)
            checkpoint.then(lambda: written)

        return write

    made.flushers.append(flush)
    assert made.take(Message(TRIGGERS, 0))
    made.processed(Message(TRIGGERS, 0))
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        assert await made.checkpoint() is True
        # The done callbacks of the checkpoint's own tasks (gather's) run on the loop's
        # next turns and hold them until then: a few turns, never a time.
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(kept) == 2 and [ref() for ref in kept] == [None, None]
    finally:
        if was_enabled:
            gc.enable()


def overlapping_flush(name: str, events: list[str], both: asyncio.Event) -> Callable[[], Any]:
    """A flusher whose write is acknowledged only once another write is under way."""

    def flush():
        async def write() -> None:
            checkpoint = consumption.current_checkpoint()
            await checkpoint.send(0, f"t.{name}", b"k", b"v", 0)
            events.append(f"{name} sent")
            if len(events) == 2:
                both.set()
            await both.wait()
            events.append(f"{name} acknowledged")

        return write

    return flush


async def test_in_transactions_a_checkpoint_hands_every_write_over_at_once_then_its_offsets():
    """One transaction takes all of its records or none: the journals and the tables go
    in side by side (one request adds their partitions), the transaction begun once. Its
    offsets go in once every record is acknowledged: the broker fails one of two
    verifications of a producer's transaction pending at once (a produce and the
    offsets' commit), and the produce is retried after a backoff."""
    made, _ = layer()
    log: list = []
    events: list[str] = []

    class Noting(FakeProducer):
        async def send_offsets_to_transaction(self, offsets, group) -> None:
            events.append("offsets")
            await super().send_offsets_to_transaction(offsets, group)

    fenced(made, {0: Noting(0, log)})
    await opened(made, {TRIGGERS: 0})
    both = asyncio.Event()
    made.flushers += [overlapping_flush(n, events, both) for n in ("journal", "changelog")]
    assert made.take(Message(TRIGGERS, 0))
    made.processed(Message(TRIGGERS, 0))
    assert await asyncio.wait_for(made.checkpoint(), 5) is True
    assert events[:2] == ["journal sent", "changelog sent"]
    assert set(events[2:4]) == {"journal acknowledged", "changelog acknowledged"}
    assert events[4:] == ["offsets"]
    assert [entry for entry in log if entry[1] == "begin"] == [(0, "begin")]
    assert (0, "offsets", {0: 1}) in log and log[-1] == (0, "commit")


async def test_without_transactions_a_checkpoint_writes_the_journals_before_the_tables():
    made, fetcher = layer()
    made.app.producer = FakeProducer(0, [])
    events: list[str] = []

    def flusher(name: str) -> Callable[[], Any]:
        def flush():
            async def write() -> None:
                events.append(f"{name} sent")
                await asyncio.sleep(0)
                events.append(f"{name} acknowledged")

            return write

        return flush

    await opened(made, {TRIGGERS: 0})
    made.flushers += [flusher("journal"), flusher("changelog")]
    assert made.take(Message(TRIGGERS, 0))
    made.processed(Message(TRIGGERS, 0))
    assert await made.checkpoint() is True
    assert events == [
        "journal sent",
        "journal acknowledged",
        "changelog sent",
        "changelog acknowledged",
    ]
    assert fetcher.commits == [{TRIGGERS: 1}]


async def test_a_fenced_checkpoint_loses_its_writes_and_its_store_is_untouched():
    from aiokafka.errors import ProducerFenced

    made, _ = layer()
    log: list = []
    producer = FakeProducer(0, log)
    producer.fail_commit = ProducerFenced()
    fence = consumption.Fence(lambda tid: None, "app")
    fence.producers = {0: producer}
    made.fence = fence
    await opened(made, {TRIGGERS: 0})
    applied: list[str] = []
    made.flushers.append(changelog_flush(0, applied))
    assert made.take(Message(TRIGGERS, 0))
    made.processed(Message(TRIGGERS, 0))
    with pytest.raises(WritesLost, match="ProducerFenced"):
        await made.checkpoint()
    assert applied == [] and made.committed() == {TRIGGERS: 0}
    # A partition given up has no producer: nothing is written for it.
    fence.producers = {}
    with pytest.raises(consumption.Fenced):
        await consumption.Checkpoint(None, fence).send(3, "t", b"k", b"v")


async def test_a_record_whose_handler_raises_is_dead_lettered_and_its_partition_commits_go_on():
    made, fetcher = layer()
    await opened(made, {EVENTS: 0})
    lettered: list[tuple[int, str]] = []
    counted: list[str] = []
    made.on_handler_failure.append(counted.append)

    async def handler(batch: list) -> None:
        if any(event.message.offset == 1 for event in batch):
            raise ValueError("a journal entry no one expected")

    async def dead_letter(message: Any, reason: str) -> None:
        lettered.append((message.offset, reason))

    batch = [SimpleNamespace(message=Message(EVENTS, offset)) for offset in range(3)]
    for event in batch:
        assert made.take(event.message)
    await made.handle("the projector", batch, handler, dead_letter)
    assert lettered == [
        (1, "the projector failed on this record: ValueError: a journal entry no one expected")
    ]
    assert counted == ["the projector"]
    assert await made.checkpoint() is True
    assert fetcher.commits == [{EVENTS: 3}]


async def test_a_handler_stopped_by_the_worker_stopping_marks_nothing_processed():
    made, _ = layer()
    await opened(made, {EVENTS: 0})

    class Stopping(Exception):
        pass

    async def handler(batch: list) -> None:
        raise Stopping()

    async def dead_letter(message: Any, reason: str) -> None:
        raise AssertionError("nothing is dead-lettered")

    event = SimpleNamespace(message=Message(EVENTS, 0))
    assert made.take(event.message)
    with pytest.raises(Stopping):
        await made.handle("the projector", [event], handler, dead_letter, passes=(Stopping,))
    assert await made.checkpoint() is False


async def test_a_last_commit_the_group_refuses_is_raised_by_the_close():
    made, fetcher = layer()
    await opened(made, {EVENTS: 0})
    assert made.take(Message(EVENTS, 0))
    made.processed(Message(EVENTS, 0))
    fetcher.refuse_commit = True
    await made.stop_taking()
    with pytest.raises(consumption.CommitRefused, match=r"events\[3\] at 0 of 1"):
        await made.close()
    assert made.cursors == {}


async def test_the_consumer_service_stopped_while_it_starts_stops_aiokafka_once_started(
    monkeypatch,
):
    from rflow.streams.app import create_app

    app = create_app(Settings(api_token="t"))
    service = app.consumer._thread
    starting = asyncio.Event()
    go_on = asyncio.Event()
    happened: list[str] = []

    class Aiokafka:
        async def start(self) -> None:
            starting.set()
            await go_on.wait()  # the broker answers slowly
            happened.append("started")  # aiokafka's fetcher and coordinator run from here

        async def stop(self) -> None:
            happened.append("stopped")

    monkeypatch.setattr(service, "_create_consumer", lambda loop: Aiokafka())
    start = asyncio.ensure_future(service.start())
    await starting.wait()
    stop = asyncio.ensure_future(service.stop())
    await asyncio.sleep(0)  # the stop is under way while the start waits
    assert not stop.done()
    go_on.set()
    await asyncio.wait_for(asyncio.gather(start, stop), timeout=10)
    # Stopped after the start finished: nothing the start began outlives the stop.
    assert happened == ["started", "stopped"]
    assert service._method_queue is None  # every call is a plain await: no queue runs


# --- aiokafka's fetcher, sooner -----------------------------------------------------------


class Broker:
    """Stands in for aiokafka's client before one broker (node 0): each fetch it is sent
    waits until the test answers it with records."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._metadata_max_age_ms = 300_000
        self.cluster = SimpleNamespace(leader_for_partition=lambda tp: 0)
        self.fetches: list[tuple[Any, asyncio.Future[Any]]] = []

    async def send(self, node_id: int, request: Any) -> Any:
        answer = self._loop.create_future()
        self.fetches.append((request, answer))
        return await answer

    def answer(self, n: int, tp: Any, offsets: range) -> None:
        """Answer the ``n``th fetch with records at ``offsets`` of ``tp``."""
        from aiokafka.record.default_records import DefaultRecordBatchBuilder

        batch = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 20,
        )
        for offset in offsets:
            batch.append(offset - offsets.start, timestamp=None, key=None, value=b"v", headers=[])
        raw = bytes(batch.build())
        raw = offsets.start.to_bytes(8, "big") + raw[8:]  # the batch's base offset
        response = SimpleNamespace(
            API_VERSION=0,
            topics=[(tp.topic, [(tp.partition, 0, offsets.stop, raw)])],
        )
        self.fetches[n][1].set_result(response)

    def offsets(self, n: int) -> list[int]:
        """The offset each partition of the ``n``th fetch was asked from."""
        return [offset for _, parts in self.fetches[n][0].topics for _, offset, _ in parts]


async def aiokafka_fetcher(broker: Broker) -> Any:
    from aiokafka import TopicPartition
    from aiokafka.consumer.fetcher import Fetcher as AiokafkaFetcher
    from aiokafka.consumer.subscription_state import SubscriptionState

    tp = TopicPartition("t.rflow.triggers", 0)
    subscriptions = SubscriptionState()
    subscriptions.assign_from_user({tp})
    subscriptions.subscription.assignment.state_value(tp).seek(0)
    fetcher = AiokafkaFetcher(broker, subscriptions, fetch_max_wait_ms=FETCH_MAX_WAIT_MS)
    consumption.hand_over_at_once(fetcher)
    await until(lambda: len(broker.fetches) == 1, "aiokafka's fetcher to send its first fetch")
    return fetcher, tp


async def test_records_fetched_are_handed_over_in_the_step_that_read_them():
    broker = Broker()
    fetcher, tp = await aiokafka_fetcher(broker)
    try:
        waiting = fetcher._create_fetch_waiter()  # the consumer, waiting for records
        broker.answer(0, tp, range(0, 2))
        for _ in range(100):  # looked at on every turn of the loop
            if tp in fetcher._records:
                break
            await asyncio.sleep(0)
        # aiokafka's routine would wake the consumer only once it woke itself, later.
        assert waiting.done()
    finally:
        await fetcher.close()


async def test_the_next_fetch_is_sent_in_the_step_that_drained_the_last_records():
    broker = Broker()
    fetcher, tp = await aiokafka_fetcher(broker)
    try:
        broker.answer(0, tp, range(0, 2))
        drained = await fetcher.fetched_records({tp}, timeout=1.0)
        assert [record.offset for record in drained[tp]] == [0, 1]
        consumption.fetch_next(fetcher)
        await asyncio.sleep(0)  # one turn of the loop: the task sending it starts
        assert len(broker.fetches) == 2
        assert broker.offsets(1) == [2]  # from where the drained records end
        await settle()  # aiokafka's routine, woken by the drain, finds the broker busy
        assert len(broker.fetches) == 2
        broker.answer(1, tp, range(2, 3))  # and that fetch's records come as its own would
        drained = await fetcher.fetched_records({tp}, timeout=1.0)
        assert [record.offset for record in drained[tp]] == [2]
    finally:
        await fetcher.close()


async def test_no_fetch_is_sent_while_records_wait_to_be_drained():
    broker = Broker()
    fetcher, tp = await aiokafka_fetcher(broker)
    try:
        broker.answer(0, tp, range(0, 2))
        await until(lambda: tp in fetcher._records, "the fetch's records to be read")
        consumption.fetch_next(fetcher)
        await settle()
        assert len(broker.fetches) == 1
    finally:
        await fetcher.close()


def fetch_of(positions: dict[tuple[str, int], int]) -> Any:
    """aiokafka's fetch of every partition in ``positions``, at its offset."""
    from aiokafka.protocol.fetch import FetchRequest

    by_topic: dict[str, list[tuple[int, int, int]]] = {}
    for (topic, partition), offset in positions.items():
        by_topic.setdefault(topic, []).append((partition, offset, 1 << 20))
    return FetchRequest(50, 1, 1 << 25, 1, list(by_topic.items()))


def sent(fetch: Any) -> Any:
    """What ``fetch`` puts on the wire to a broker that speaks fetch v11."""
    from aiokafka.protocol.fetch import FetchRequest_v11

    return fetch.build(FetchRequest_v11)


def answer(fetch: Any, session_id: int, error: int = 0) -> Any:
    """The broker's answer to ``fetch``, read as the connection reads it."""
    from aiokafka.protocol.fetch import FetchResponse_v11

    struct = sent(fetch)
    wire = FetchResponse_v11(0, error, session_id, []).encode()
    return struct.RESPONSE_TYPE.decode(wire)


def named(struct: Any) -> list[tuple[str, int, int]]:
    return sorted(
        (topic, partition[0], partition[2]) for topic, parts in struct.topics for partition in parts
    )


def test_a_fetch_session_names_only_what_moved_after_the_first_fetch():
    positions = {("t.runs", 0): 5, ("t.runs", 1): 7, ("t.triggers", 0): 3}
    session = consumption.FetchSession()
    first = session.fetch(fetch_of(positions))
    assert (sent(first).session_id, sent(first).session_epoch) == (0, 0)  # opens one
    assert len(named(sent(first))) == 3
    answer(first, session_id=42)
    assert (session.id, session.epoch) == (42, 1)

    positions[("t.triggers", 0)] = 4  # one record read
    second = session.fetch(fetch_of(positions))
    wire = sent(second)
    assert (wire.session_id, wire.session_epoch) == (42, 1)
    assert named(wire) == [("t.triggers", 0, 4)]
    assert wire.forgotten_topics_data == []
    # aiokafka reads the answer against every partition it wants, at its offset.
    assert sorted((t, p, o) for t, parts in second.topics for p, o, _ in parts) == [
        ("t.runs", 0, 5),
        ("t.runs", 1, 7),
        ("t.triggers", 0, 4),
    ]
    answer(second, session_id=42)

    del positions[("t.runs", 1)]  # paused, or no longer assigned
    third = sent(session.fetch(fetch_of(positions)))
    assert (third.session_epoch, named(third)) == (2, [])
    assert third.forgotten_topics_data == [("t.runs", [1])]


def test_a_refused_fetch_session_is_opened_again_with_every_partition():
    positions = {("t.runs", 0): 5, ("t.triggers", 0): 3}
    session = consumption.FetchSession()
    answer(session.fetch(fetch_of(positions)), session_id=42)
    answer(session.fetch(fetch_of(positions)), session_id=42, error=71)  # epoch out of step
    again = sent(session.fetch(fetch_of(positions)))
    # The next fetch names everything, and closes the refused session as it opens one.
    assert (again.session_id, again.session_epoch, len(named(again))) == (42, 0, 2)
    answer(session.fetch(fetch_of(positions)), session_id=43, error=70)  # session unknown
    assert (session.id, session.epoch) == (0, 0)


def test_a_fetch_session_learns_only_from_the_answer_to_its_latest_fetch():
    positions = {("t.runs", 0): 5}
    session = consumption.FetchSession()
    answer(session.fetch(fetch_of(positions)), session_id=42)
    # Two fetches sent on the same epoch (the first one's task cancelled): the broker
    # takes the first and refuses the second, whose refusal must not end the session.
    positions[("t.runs", 0)] = 6
    taken = session.fetch(fetch_of(positions))
    refused = session.fetch(fetch_of(positions))
    answer(taken, session_id=42)
    answer(refused, session_id=42, error=71)
    assert (session.id, session.epoch) == (42, 2)
    assert named(sent(session.fetch(fetch_of(positions)))) == []


def test_a_broker_before_fetch_sessions_is_sent_every_partition():
    from aiokafka.protocol.fetch import FetchRequest_v4

    positions = {("t.runs", 0): 5, ("t.triggers", 0): 3}
    session = consumption.FetchSession()
    answer(session.fetch(fetch_of(positions)), session_id=42)
    old = session.fetch(fetch_of(positions)).build(FetchRequest_v4)
    assert sorted((t, p[0]) for t, parts in old.topics for p in parts) == [
        ("t.runs", 0),
        ("t.triggers", 0),
    ]


def test_a_fetch_for_a_new_assignment_names_every_partition():
    positions = {("t.runs", 0): 5, ("t.triggers", 0): 3}
    session = consumption.FetchSession()
    before, after = object(), object()
    answer(session.fetch(fetch_of(positions), before), session_id=42)
    assert named(sent(session.fetch(fetch_of(positions), before))) == []
    # A rebalance: each partition's new state has no high watermark until an answer
    # names it, and an incremental answer names only partitions with news.
    again = sent(session.fetch(fetch_of(positions), after))
    assert (again.session_id, again.session_epoch, len(named(again))) == (42, 0, 2)


def test_an_answer_without_a_session_leaves_the_next_fetch_opening_one():
    positions = {("t.runs", 0): 5}
    session = consumption.FetchSession()
    answer(session.fetch(fetch_of(positions)), session_id=42)
    session.reopen()
    answer(session.fetch(fetch_of(positions)), session_id=0)  # the broker's cache is full
    assert (session.id, session.epoch, session.held) == (0, 0, {})
    session.id, session.epoch = 42, 2**31 - 1
    answer(session.fetch(fetch_of(positions)), session_id=42)
    assert session.epoch == 1  # as Kafka's epochs wrap


async def test_a_fetch_whose_answer_never_came_has_the_next_one_open_a_new_session():
    broker = Broker()
    fetcher, tp = await aiokafka_fetcher(broker)
    closed = False
    try:
        first = broker.fetches[0][0]
        assert isinstance(first, consumption.SessionFetch)
        session = first.session
        session.answered(first, SimpleNamespace(error_code=0, session_id=42))
        broker.answer(0, tp, range(0, 2))
        await fetcher.fetched_records({tp}, timeout=1.0)
        await until(lambda: len(broker.fetches) == 2, "the next fetch")
        assert (broker.fetches[1][0].session_id, broker.fetches[1][0].epoch) == (42, 1)
        await fetcher.close()  # cancels the fetch in flight: its answer is never read
        closed = True
        assert (session.id, session.epoch) == (42, 0)
    finally:
        if not closed:
            await fetcher.close()


async def test_a_checkpoint_cancelled_under_way_lets_no_later_one_commit():
    """What a cancelled checkpoint took from the writers may never reach the broker: no
    later checkpoint commits past it (the worker stops, the records are read again by
    the next owner). A worker's stop makes its last checkpoint before it cancels the
    loop of checkpoints, which waits for the one under way."""
    made, fetcher = layer()
    log: list = []
    fenced(made, {0: FakeProducer(0, log)})
    await opened(made, {TRIGGERS: 0})
    buffer = Writes()
    made.flushers.append(buffer.flush)
    buffer.write()  # never acknowledged
    assert made.take(Message(TRIGGERS, 0))
    made.processed(Message(TRIGGERS, 0))
    under_way = asyncio.ensure_future(made.checkpoint())
    await until(lambda: not buffer.made, "the checkpoint taking the writes")
    under_way.cancel()
    with pytest.raises(asyncio.CancelledError):
        await under_way
    made.flushers.clear()
    assert made.take(Message(TRIGGERS, 1))
    made.processed(Message(TRIGGERS, 1))
    with pytest.raises(WritesLost, match="cancelled before its commit"):
        await made.checkpoint()
    assert not any(entry[1] in ("offsets", "commit") for entry in log)
    assert made.committed() == {TRIGGERS: 0} and fetcher.commits == []
