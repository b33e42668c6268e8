"""How rflow reads its topics: the guarantees, in one module.

Every rflow agent takes its records through :class:`Consumption`. For each partition of
a topic an agent reads (a *TP*), while this worker owns it:

1. **In order, once.** Records are taken in offset order, each at most once by this
   owner. The *cursor* is the next offset to take.
2. **Duplicates are dropped.** A record below the cursor was taken already.
3. **A gap is read again first.** A record above the cursor means records were fetched
   and thrown away (around a rebalance), or the fetch position was left behind by an
   earlier assignment. Nothing past the cursor is taken until the TP has been read again
   from the cursor; so is a TP whose records stopped coming while the broker has more,
   when its records were handed over and never reached an agent, or nothing reaches an
   agent any more (:data:`STALL`, :meth:`Consumption.stalled`).
4. **Commits cover what is done and durable.** Decisions change tables and journals in
   memory; a checkpoint, every :data:`COMMIT_INTERVAL`, writes everything decided so far
   (the runs' journals and the newest value of each table key changed, see
   :attr:`Consumption.flushers`; each write is handed to the producer at once and
   returns when the broker has acknowledged it; in transactions all at once, with the
   offsets, without them the journals first), and then commits, per TP, the offset below which every record is
   processed. So offsets are committed during a burst too, and a run that starts and
   settles between two checkpoints costs its table entry one write.
5. **One owner at a time.** A TP is opened once the group's rebalance is complete (its
   tables recovered), at the group's committed offset (the TPs being opened fetch nothing
   until every one of them has its cursor: a record handed over before would find none,
   and be taken for read), and closed when a rebalance
   revokes partitions: decisions under way finish, and a last checkpoint writes and
   commits before Faust hands the partitions over.
6. **Fenced by the broker.** With transactions (the default), what was decided on
   partition *n* of the joined topics and the offsets consumed there are written in one
   Kafka transaction of *n*'s producer (:class:`Fence`, :class:`Checkpoint`), started
   when *n* is assigned and before its tables recover: the broker aborts an earlier
   owner's open transaction and refuses its later writes. Every topic is read
   ``read_committed``, so the offsets a transaction marker (or an aborted record) takes
   are no gap (:meth:`Consumption.take`), and a table's store takes a value only once its
   transaction is committed.
7. **One lock per partition.** Records of partition *n* of the topics joined by key and
   the results of this worker's own actions for runs on partition *n* are decided under
   one lock (:meth:`Consumption.decide`), and their table writes go to partition *n*.

Faust counts a record as read when its fetcher yields it, drops records from its queues
on every flow resume, and commits the first consecutive run of acknowledged offsets; the
records of rflow's topics are therefore read without Faust's acknowledgements (their
topics are declared with ``acks=False``) and committed here.

The tables' stores (Faust's memory store, or its RocksDB store with one database per
partition) are read and written one partition at a time through :class:`TableStore`
(:func:`table_store`), which also keeps, on disk, when each partition was last known
current and an index of when entries come due; ``streams/tables.py`` writes a store
only once the broker has the changelog records, with the offset they reached.

What relies on names faust, aiokafka and mode keep private is in this module and nowhere
else, listed in :data:`INTERNALS` and checked against the installed versions when a worker
starts (:func:`check_internals`); ``tests/unit/streams/test_consumption.py`` has a test for
each behaviour relied on (``tests/unit/streams/test_stores.py`` for the stores).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import functools
import inspect
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any

import faust
import mode
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka import client as aiokafka_client
from aiokafka.conn import AIOKafkaConnection
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.protocol.fetch import FetchRequest, FetchRequest_v7
from faust.serializers import codecs as faust_codecs
from faust.stores import memory as memory_store
from faust.stores import rocksdb as rocksdb_store
from faust.tables import manager as faust_manager
from faust.tables import recovery as faust_recovery
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as aiokafka_driver
from faust.types import TP
from mode import threads as mode_threads
from mode.utils.queues import ThrowableQueue

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)

COMMIT_INTERVAL = 0.25
"""Seconds between checkpoints: how long a decision may wait to reach the read model
(and the changelogs), and about how much work is done again after a crash."""
STALL = 5.0
"""Seconds a TP may go without a record taken, while the broker has records past its
cursor and none waits in a queue for its agent, before it is looked at as stalled."""
STALL_ANYWAY = 60.0
"""Seconds a TP may go without a record taken, while the broker has records past its
cursor and none waits in a queue for its agent, before it is read again whatever the
fetcher seems to be doing (a fetch of that TP alone may be stuck)."""
REREAD_BACKOFF = (0.05, 0.2, 1.0)
"""Seconds before each further attempt to read a gap again (the fetcher may still be
yielding a batch fetched before the seek; its records are dropped meanwhile)."""
STALE = -2
"""What a record drained before its TP's last seek follows (:class:`Queue`): it is never
taken, and moves nothing; the seek reads its TP again from where it set it."""
FETCH_MAX_WAIT_MS = 50
"""How long the broker may hold a fetch with nothing new. The fetcher leaves out of its
next request every TP whose records the worker has not taken yet and sends that broker
nothing else meanwhile: Faust's 1.5 s let a quiet TP's records wait that long."""
PINNED = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0", "mode-streaming": "0.7.1"}
"""The versions whose behaviour this module was written against (and ``requirements.lock``
pins)."""


class WritesLost(RuntimeError):
    """A journal or table write was not acknowledged by the broker: decisions are lost,
    and the offsets of the records they came from must never be committed."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(
            f"a write to Kafka was not acknowledged ({cause!r}): nothing more is committed"
        )


class CommitRefused(RuntimeError):
    """The consumer group refused a commit: the records after the last commit are read
    again by the partition's next owner."""


class InternalsChanged(RuntimeError):
    """An installed streaming library is not the version rflow's consumption relies on,
    or no longer has a name it uses."""


def _defines(owner: Any, name: str) -> bool:
    return name in vars(owner)


def _assigns(function: Any, name: str) -> bool:
    return name in function.__code__.co_names


INTERNALS: dict[str, tuple[str, Callable[[], bool]]] = {
    "faust App._on_partitions_revoked, _new_consumer": (
        "faust-streaming",
        lambda: all(
            _defines(faust.App, name) for name in ("_on_partitions_revoked", "_new_consumer")
        ),
    ),
    "faust Consumer._drain_messages, _commit_every, _n_acked, callback, suspend_flow, "
    "diag, CONSUMER_FETCHING (the fetcher's loop, run here instead)": (
        "faust-streaming",
        lambda: (
            _defines(faust_consumer.Consumer, "_drain_messages")
            and _assigns(faust_consumer.Consumer.__init__, "_commit_every")
            and "_n_acked" in vars(faust_consumer.Consumer)
            and all(
                name in inspect.getsource(faust_consumer.Consumer._drain_messages)
                for name in ("self.callback", "self.suspend_flow", "self.diag")
            )
            and hasattr(faust_consumer, "CONSUMER_FETCHING")
        ),
    ),
    "faust ThreadDelegateConsumer._new_consumer_thread": (
        "faust-streaming",
        lambda: _defines(aiokafka_driver.Consumer, "_new_consumer_thread"),
    ),
    "faust ThreadDelegateConsumer._commit": (
        "faust-streaming",
        lambda: _defines(faust_consumer.ThreadDelegateConsumer, "_commit"),
    ),
    "faust AIOKafkaConsumerThread._create_worker_consumer": (
        "faust-streaming",
        lambda: _defines(aiokafka_driver.AIOKafkaConsumerThread, "_create_worker_consumer"),
    ),
    "aiokafka AIOKafkaConsumer._fetch_max_wait_ms": (
        "aiokafka",
        lambda: (
            _assigns(AIOKafkaConsumer.__init__, "_fetch_max_wait_ms")
            and _assigns(AIOKafkaConsumer.start, "_fetch_max_wait_ms")
        ),
    ),
    "aiokafka Fetcher._get_actions_per_node, _proc_fetch_request, _pending_tasks, "
    "_in_flight, _fetch_waiters, _notify, _subscriptions (a fetch sent as soon as the "
    "records before it are drained, its records handed over as soon as they are read; "
    "an answer read against the request's topics, every partition of a session's fetch)": (
        "aiokafka",
        lambda: (
            all(
                _defines(Fetcher, name)
                for name in ("_get_actions_per_node", "_proc_fetch_request", "_notify")
            )
            and "request.topics" in inspect.getsource(Fetcher._proc_fetch_request)
            and all(
                _assigns(Fetcher.__init__, name)
                for name in ("_pending_tasks", "_in_flight", "_fetch_waiters", "_subscriptions")
            )
            and all(
                name in inspect.getsource(Fetcher._fetch_requests_routine)
                for name in (
                    "_in_flight.discard",
                    "self._pending_tasks.add",
                    "_wait_consume_future",
                )
            )
        ),
    ),
    "aiokafka AIOKafkaClient.bootstrap: each broker's connection error logged to the "
    "'aiokafka' logger as its record's last argument, before it raises only that it could "
    "not bootstrap (why a client could not start, rflow.streams.kafka.start)": (
        "aiokafka",
        lambda: (
            aiokafka_client.log.name == "aiokafka"
            and "log.error('Unable connect to \"%s:%s\": %s', host, port, err)"
            in inspect.getsource(aiokafka_client.AIOKafkaClient.bootstrap)
        ),
    ),
    "aiokafka FetchRequest._max_wait_ms, _min_bytes, _max_bytes, _isolation_level, "
    "_rack_id, build; the fetch structs' session_id, session_epoch, forgotten_topics_data "
    "and RESPONSE_TYPE, read by AIOKafkaConnection._handle_frame (fetches in incremental "
    "sessions)": (
        "aiokafka",
        lambda: (
            all(
                _assigns(FetchRequest.__init__, name)
                for name in (
                    "_max_wait_ms",
                    "_min_bytes",
                    "_max_bytes",
                    "_isolation_level",
                    "_rack_id",
                )
            )
            and _defines(FetchRequest, "build")
            and all(
                name in FetchRequest_v7.SCHEMA.names
                for name in ("session_id", "session_epoch", "forgotten_topics_data")
            )
            and "request.RESPONSE_TYPE" in inspect.getsource(AIOKafkaConnection._handle_frame)
        ),
    ),
    "faust memory Store._key_partition (the partition of each key)": (
        "faust-streaming",
        lambda: _assigns(memory_store.Store.__post_init__, "_key_partition"),
    ),
    "faust rocksdb Store._dbs, _db_for_partition (one database per partition)": (
        "faust-streaming",
        lambda: (
            _defines(rocksdb_store.Store, "_db_for_partition")
            and _assigns(rocksdb_store.Store.__init__, "_dbs")
        ),
    ),
    "faust rocksdb Store.rocksdb_options, RocksDBOptions.as_options (how a database opens)": (
        "faust-streaming",
        lambda: (
            _assigns(rocksdb_store.Store.__init__, "rocksdb_options")
            and _defines(rocksdb_store.RocksDBOptions, "as_options")
            and _assigns(rocksdb_store.RocksDBOptions.open, "as_options")
        ),
    ),
    "aiokafka AIOKafkaConsumer._isolation_level (read_committed for the worker's consumer)": (
        "aiokafka",
        lambda: (
            _assigns(AIOKafkaConsumer.__init__, "_isolation_level")
            and _assigns(AIOKafkaConsumer.start, "_isolation_level")
        ),
    ),
    "aiokafka AIOKafkaConsumer._subscription, SubscriptionState.subscription.assignment"
    ".state_value(tp).position (how far the fetcher has read, control records included)": (
        "aiokafka",
        lambda: (
            _assigns(AIOKafkaConsumer.__init__, "_subscription")
            and isinstance(vars(SubscriptionState).get("subscription"), property)
        ),
    ),
    "faust AIOKafkaConsumerThread.getmany, _fetch_records, _ensure_consumer, call_thread, "
    "ThreadDelegateConsumer._seek (a seek runs between two fetches)": (
        "faust-streaming",
        lambda: (
            all(
                _defines(aiokafka_driver.AIOKafkaConsumerThread, name)
                for name in ("getmany", "_fetch_records", "_ensure_consumer")
            )
            and hasattr(aiokafka_driver.AIOKafkaConsumerThread, "call_thread")
            and _defines(faust_consumer.ThreadDelegateConsumer, "_seek")
        ),
    ),
    "mode ServiceThread's thread_loop=, _thread_started, _default_start, on_thread_stop, "
    "_default_stop_children/_futures/_exit_stacks, _stopped, _shutdown, shutdown_timeout, "
    "_stopped_set, set_shutdown, QueueServiceThread.call_thread; faust's consumer thread "
    "stopping aiokafka's consumer in on_thread_stop (the consumer's service on the worker's "
    "own loop, no thread)": (
        "mode-streaming",
        lambda: (
            "thread_loop" in inspect.signature(mode_threads.ServiceThread.__init__).parameters
            and _assigns(mode_threads.ServiceThread.__init__, "_thread_started")
            and all(
                _defines(mode_threads.ServiceThread, name)
                for name in ("on_thread_stop", "_stopped_set", "set_shutdown")
            )
            and all(
                hasattr(mode.Service, name)
                for name in (
                    "_default_start",
                    "_default_stop_children",
                    "_default_stop_futures",
                    "_default_stop_exit_stacks",
                    "shutdown_timeout",
                )
            )
            and _assigns(mode.Service.__init__, "_stopped")
            and _assigns(mode.Service.__init__, "_shutdown")
            and _defines(mode_threads.QueueServiceThread, "call_thread")
            and _defines(mode_threads.QueueServiceThread, "cast_thread")
            and _assigns(aiokafka_driver.AIOKafkaConsumerThread.on_thread_stop, "_consumer")
            # start and stop are this module's: faust's consumer thread must not have its own
            and not any(
                _defines(aiokafka_driver.AIOKafkaConsumerThread, name)
                for name in ("start", "stop", "_shutdown_thread")
            )
        ),
    ),
    "faust App._on_partitions_assigned (fenced before the tables recover)": (
        "faust-streaming",
        lambda: _defines(faust.App, "_on_partitions_assigned"),
    ),
    "faust Recovery.active_remaining, active_highwaters, active_offsets, TableManager"
    ".changelog_queue (a recovery ends once the fetcher has read past the changelog's "
    "last transaction marker; a record at or below the offset recovered is not applied "
    "again)": (
        "faust-streaming",
        lambda: (
            isinstance(vars(faust_manager.TableManager).get("changelog_queue"), property)
            and _defines(faust_recovery.Recovery, "active_remaining")
            and _assigns(faust_recovery.Recovery.need_recovery, "active_remaining")
            and _assigns(faust_recovery.Recovery.__init__, "active_highwaters")
            and _assigns(faust_recovery.Recovery.__init__, "active_offsets")
        ),
    ),
    "faust Table.changelog_topic, key_serializer, value_serializer, app.producer.send "
    "(streams/tables.py writes a table's changelog records as Faust would)": (
        "faust-streaming",
        lambda: all(hasattr(faust.Table, name) for name in ("changelog_topic", "data")),
    ),
}
"""Each private name this module uses: the distribution it belongs to, and how to tell it
is still there."""


def check_internals() -> None:
    """Refuse to run on streaming libraries other than the pinned ones, naming the
    installed version and what is missing or different."""
    problems = []
    for distribution, pinned in PINNED.items():
        try:
            installed = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            installed = "not installed"
        if installed != pinned:
            problems.append(f"{distribution} {installed} is installed; rflow needs {pinned}")
    for name, (distribution, present) in INTERNALS.items():
        if not present():
            installed = metadata.version(distribution)
            problems.append(f"{distribution} {installed} has no {name}")
    if problems:
        raise InternalsChanged(
            "rflow's consumption relies on how these libraries handle offsets: "
            + "; ".join(problems)
            + " (install from requirements.lock: scripts/bootstrap)"
        )


# --- table writes ---------------------------------------------------------------------

_WRITING_TO: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "rflow_writing_to", default=None
)


def current_partition() -> int:
    """The partition being decided (:meth:`Consumption.decide`)."""
    partition = _WRITING_TO.get()
    if partition is None:
        raise RuntimeError("a table is changed only while a partition is being decided")
    return partition


def deciding() -> int | None:
    """The partition being decided, or ``None`` outside a decision."""
    return _WRITING_TO.get()


@contextmanager
def writing_to(partition: int) -> Iterator[None]:
    """Table writes in this block go to ``partition`` of their changelogs."""
    token = _WRITING_TO.set(partition)
    try:
        yield
    finally:
        _WRITING_TO.reset(token)


# --- table stores ---------------------------------------------------------------------

FRESH_KEY = b"__rflow\x00fresh__"
"""A RocksDB partition's key holding the wall time at which its owner last knew it to
hold every changelog record up to its persisted offset (:meth:`TableStore.stamp`)."""


class TableStore:
    """A Faust table's store, read and written one partition at a time.

    Values are what the table's value codec reads (as Faust's memory store keeps them);
    a value of ``None`` written is a deletion. :func:`table_store` picks the kind.
    """

    read = 0
    """Changelog records Faust applied to the store (recovering it, or as a standby)."""

    def _count_reads(self, store: Any) -> None:
        apply = store.apply_changelog_batch

        def counted(batch: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
            batch = list(batch)
            self.read += len(batch)
            applied = apply(batch, *args, **kwargs)
            # What follows its changelog (recovering, or as a standby) is current.
            now = time.time()
            for partition in {event.message.partition for event in batch}:
                self.stamp(partition, now)
            return applied

        store.apply_changelog_batch = counted

    def get(self, partition: int | None, key: Any) -> Any:
        """The value of ``key`` on ``partition`` (any partition held here: ``None``)."""
        raise NotImplementedError

    def write(self, partition: int, changes: Iterable[tuple[Any, Any]], offset: int | None) -> None:
        """Apply ``changes`` to ``partition`` at once, with ``offset``: the changelog offset
        up to which the partition now holds every record (``None``: unknown)."""
        raise NotImplementedError

    def scan(self, partition: int, after: Any, limit: int) -> list[tuple[Any, Any]]:
        """Up to ``limit`` entries of ``partition`` whose keys sort after ``after`` (every
        key: ``None``), in key order."""
        raise NotImplementedError

    def partitions(self) -> list[int]:
        """The partitions held here."""
        raise NotImplementedError

    def stamp(self, partition: int, now: float) -> None:
        """Note that ``partition`` is current at wall time ``now`` (kept on disk only)."""

    def flush(self, partition: int) -> None:
        """Write what ``partition`` holds in memory to disk (on disk only): a database
        opened again then has no log of writes to replay."""

    indexed = False
    """Whether the store keeps an index of when its entries come due (:meth:`index_by`)."""

    def index_by(self, due: Callable[[Any, Any], float | None]) -> None:
        """Keep, beside each entry written, when it comes due (``due(key, value)``, in
        seconds since the epoch; ``None``: never), so that :meth:`due` finds the entries
        due without reading the others (on disk only; a memory store is read whole)."""

    def due(self, partition: int, now: float, limit: int) -> list[tuple[bytes, Any]]:
        """Up to ``limit`` keys of ``partition`` due at ``now``, earliest first, each with
        its index entry (to :meth:`reindex` it)."""
        return []

    def reindex(
        self, partition: int, done: Iterable[bytes], again: Iterable[tuple[Any, float]]
    ) -> None:
        """Drop the index entries ``done``; index each key of ``again`` at its time."""

    def rewind(self, partition: int) -> None:
        """Have the next :meth:`due` of ``partition`` read its index from the start."""

    def fresh(self, max_age: float) -> None:
        """Have Faust recover from the changelog's start every partition last known to be
        current more than ``max_age`` seconds ago (on disk only): compaction may have
        removed the tombstones of what was deleted meanwhile."""


class MemoryTableStore(TableStore):
    """Faust's memory store: one dict, the partition of each key beside it."""

    def __init__(self, table: Any) -> None:
        store = table.data
        self.data: dict[Any, Any] = store.data
        self.partition_of: dict[Any, int] = store._key_partition
        self._sorted: dict[int, list[Any]] = {}
        self._count_reads(store)

    def get(self, partition: int | None, key: Any) -> Any:
        data = self.data
        return data[key] if key in data else None  # noqa: SIM401 (.get goes through KeyError)

    def write(self, partition: int, changes: Iterable[tuple[Any, Any]], offset: int | None) -> None:
        data, partition_of = self.data, self.partition_of
        for key, value in changes:
            if value is None:
                data.pop(key, None)
                partition_of.pop(key, None)
            else:
                data[key] = value
                partition_of[key] = partition

    def scan(self, partition: int, after: Any, limit: int) -> list[tuple[Any, Any]]:
        # The partition's keys are sorted once for a scan from its start; a scan that goes
        # on after a key reads on in that list (keys added since are in the next one).
        if after is None or partition not in self._sorted:
            self._sorted[partition] = sorted(
                key for key, held in list(self.partition_of.items()) if held == partition
            )
        keys = self._sorted[partition]
        start = 0 if after is None else bisect.bisect_right(keys, after)
        data = self.data
        return [(key, data[key]) for key in keys[start : start + limit] if key in data]

    def partitions(self) -> list[int]:
        return sorted(set(self.partition_of.values()))


ROCKSDB_CACHE = 16 * 1024 * 1024
"""Bytes of RocksDB's block cache, shared by every database of a worker (index and
filter blocks included)."""
ROCKSDB_MEMTABLES = 32 * 1024 * 1024
"""Bytes of RocksDB's memtables across every database of a worker: past it, the fullest
are written to disk."""


class _Budget:
    """The one block cache and write-buffer budget every database of a worker shares."""

    cache: Any = None
    buffers: Any = None

    @classmethod
    def get(cls, rocksdict: Any) -> type[_Budget]:
        if cls.cache is None:
            cls.cache = rocksdict.Cache(ROCKSDB_CACHE)
            cls.buffers = rocksdict.WriteBufferManager(ROCKSDB_MEMTABLES, False)
        return cls


class SharedBudgetOptions(rocksdb_store.RocksDBOptions):
    """Faust's RocksDB options, with every database of the worker sharing one block
    cache and one memtable budget (Faust gives each database a cache of its own: with
    one database per table partition, a worker's memory would grow with the partitions
    it holds and the blocks each has read)."""

    def as_options(self) -> Any:
        import rocksdict

        budget = _Budget.get(rocksdict)
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        if self.max_open_files is not None:
            options.set_max_open_files(self.max_open_files)
        options.set_write_buffer_size(self.write_buffer_size)
        options.set_target_file_size_base(self.target_file_size_base)
        options.set_max_write_buffer_number(self.max_write_buffer_number)
        options.set_write_buffer_manager(budget.buffers)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(self.bloom_filter_size, True)
        table.set_block_cache(budget.cache)
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        options.set_block_based_table_factory(table)
        return options


class RocksTableStore(TableStore):
    """Faust's RocksDB store (rocksdict): one database per partition, holding each
    changelog record's bytes and the offset of the last one applied; the databases of
    a worker share one memory budget (:class:`SharedBudgetOptions`)."""

    def __init__(self, table: Any) -> None:
        import rocksdict

        self.rocksdict = rocksdict
        self.store = table.data
        # Before any database opens (they open as partitions are assigned).
        current = self.store.rocksdb_options
        self.store.rocksdb_options = shared = SharedBudgetOptions(use_rocksdict=True)
        for name in ("max_open_files", "write_buffer_size", "max_write_buffer_number"):
            setattr(shared, name, getattr(current, name))
        shared.target_file_size_base = current.target_file_size_base
        shared.bloom_filter_size = current.bloom_filter_size
        self._count_reads(self.store)
        self.dump_key = faust_codecs.get_codec(table.key_serializer).dumps
        self.dump_value = faust_codecs.get_codec(table.value_serializer).dumps
        self.load_key = faust_codecs.get_codec(table.key_serializer).loads
        self.load_value = faust_codecs.get_codec(table.value_serializer).loads
        self.offset_key = self.store.offset_key
        self._persisted_offset = self.store.persisted_offset
        # Faust asks a store for its persisted offset before it reads a partition's
        # changelog: a partition too old to be trusted answers "none", and is read whole.
        self.max_age: float | None = None
        self.store.persisted_offset = self._persisted_offset_if_fresh
        self.coming_due: Callable[[Any, Any], float | None] | None = None
        self.taken: dict[int, bytes] = {}
        """The last index entry :meth:`due` returned, by partition (each later index
        entry comes due after it: nothing is indexed in the past)."""

    def _open(self, partition: int) -> Any:
        return self.store._db_for_partition(partition)

    def _held(self, partition: int | None) -> list[Any]:
        dbs = self.store._dbs
        if partition is None:
            return list(dbs.values())
        found = dbs.get(partition)
        return [found] if found is not None else []

    def get(self, partition: int | None, key: Any) -> Any:
        raw_key = self.dump_key(key)
        for db in self._held(partition):
            raw = db.get(raw_key)
            if raw is not None:
                return self.load_value(raw)
        return None

    def write(self, partition: int, changes: Iterable[tuple[Any, Any]], offset: int | None) -> None:
        batch = self.rocksdict.WriteBatch(raw_mode=True)
        dump_key, dump_value, coming_due = self.dump_key, self.dump_value, self.coming_due
        for key, value in changes:
            raw_key = dump_key(key)
            if value is None:
                batch.delete(raw_key)  # its index entry goes when it comes due
                continue
            batch.put(raw_key, dump_value(value))
            if coming_due is not None and (at := coming_due(key, value)) is not None:
                batch.put(_index_key(at, raw_key), b"")
        if offset is not None:
            batch.put(self.offset_key, str(offset).encode())
        # Its owner writes it, so it is current now.
        batch.put(FRESH_KEY, repr(time.time()).encode())
        self._open(partition).write(batch)

    def scan(self, partition: int, after: Any, limit: int) -> list[tuple[Any, Any]]:
        found: list[tuple[Any, Any]] = []
        for db in self._held(partition):
            it = db.iter()
            if after is None:
                it.seek_to_first()
            else:
                start = self.dump_key(after)
                it.seek(start)
                if it.valid() and it.key() == start:
                    it.next()
            load_key, load_value = self.load_key, self.load_value
            while it.valid() and len(found) < limit:
                raw_key = it.key()
                if raw_key[:1] == b'"':  # a table key (JSON text), not Faust's or rflow's own
                    found.append((load_key(raw_key), load_value(it.value())))
                it.next()
            del it
        return found

    def partitions(self) -> list[int]:
        return sorted(self.store._dbs)

    def stamp(self, partition: int, now: float) -> None:
        for db in self._held(partition):
            db.put(FRESH_KEY, repr(now).encode())

    def flush(self, partition: int) -> None:
        for db in self._held(partition):
            db.flush(True)

    @property
    def indexed(self) -> bool:  # type: ignore[override]
        return self.coming_due is not None

    def index_by(self, due: Callable[[Any, Any], float | None]) -> None:
        self.coming_due = due

    def due(self, partition: int, now: float, limit: int) -> list[tuple[bytes, Any]]:
        found: list[tuple[bytes, Any]] = []
        until = int(now * 1000)
        for db in self._held(partition):
            it = db.iter()
            # From the last index entry taken: those before it are deleted, and reading
            # past deletions RocksDB has not compacted away yet costs as much as reading
            # entries (a queue's head is all deletions).
            it.seek(self.taken.get(partition, INDEX_PREFIX))
            while it.valid() and len(found) < limit:
                raw = it.key()
                if raw[:1] != INDEX_PREFIX or int.from_bytes(raw[1:9], "big") > until:
                    break
                found.append((raw, self.load_key(raw[9:])))
                it.next()
            del it
        if found:
            self.taken[partition] = found[-1][0]
        return found

    def rewind(self, partition: int) -> None:
        self.taken.pop(partition, None)

    def reindex(
        self, partition: int, done: Iterable[bytes], again: Iterable[tuple[Any, float]]
    ) -> None:
        batch = self.rocksdict.WriteBatch(raw_mode=True)
        for raw in done:
            batch.delete(raw)
        for key, at in again:
            batch.put(_index_key(at, self.dump_key(key)), b"")
        for db in self._held(partition):
            db.write(batch)

    def fresh(self, max_age: float) -> None:
        self.max_age = max_age

    def _persisted_offset_if_fresh(self, tp: TP) -> int | None:
        offset = self._persisted_offset(tp)
        if offset is None or self.max_age is None:
            return offset
        db = self._open(tp.partition)
        stamped = db.get(FRESH_KEY)
        age = time.time() - float(stamped) if stamped is not None else None
        if age is not None and age <= self.max_age:
            return offset
        log.warning(
            "%s[%d]: the local copy was last known current %s; it is read again from the "
            "changelog's start (deletions older than the changelog's delete.retention.ms "
            "may be gone from it)",
            tp.topic,
            tp.partition,
            "never" if age is None else f"{age:.0f}s ago",
        )
        batch = self.rocksdict.WriteBatch(raw_mode=True)
        for raw_key in list(db.keys()):
            batch.delete(raw_key)
        db.write(batch)
        return None


INDEX_PREFIX = b"\xfe"
"""Index keys of a RocksDB partition: this byte, when the entry comes due (milliseconds
since the epoch, 8 bytes big-endian) and the entry's key; they sort after every table key
(JSON text) and Faust's and rflow's own keys."""


def _index_key(at: float, raw_key: bytes) -> bytes:
    return INDEX_PREFIX + max(0, int(at * 1000)).to_bytes(8, "big") + raw_key


def table_store(table: Any) -> TableStore:
    """How ``table``'s Faust store is read and written (memory:// or rocksdb://)."""
    store = table.data
    if isinstance(store, rocksdb_store.Store):
        return RocksTableStore(table)
    if isinstance(store, memory_store.Store):
        return MemoryTableStore(table)
    raise InternalsChanged(f"rflow cannot read a table kept in {type(store).__name__}")


# --- the consumer ---------------------------------------------------------------------


class RflowConsumerService(aiokafka_driver.AIOKafkaConsumerThread):
    """Faust's consumer "thread", run as a service of the worker's own event loop: with a
    short fetch wait (:data:`FETCH_MAX_WAIT_MS`), reading ``read_committed``, and telling
    the app how far each TP was read (:attr:`ConsumingApp.read_to`).

    Faust runs aiokafka's consumer in a thread with an event loop of its own and calls it
    through a queue. In one Python process the two threads take turns on one interpreter:
    each fetch crossed between them twice, and a response, a request or the records
    handed over waited for the other thread to let go (up to the interpreter's switch
    interval, 5 ms). Here the fetcher, the group coordinator and the agents share the
    worker's loop; a call to the consumer is a plain await, and a seek never races a
    fetch being handed over.
    """

    def __init__(self, consumer: Any, *, loop: asyncio.AbstractEventLoop, **kwargs: Any) -> None:
        super().__init__(consumer, loop=loop, thread_loop=loop, **kwargs)

    _starting: asyncio.Future[None] | None = None

    async def start(self) -> None:
        # As the thread would run it (ServiceThread._serve), without the thread. Its
        # method queue is not started: every call is a plain await (call_thread).
        assert not self._thread_started.is_set()
        self._thread_started.set()
        self._starting = starting = asyncio.get_running_loop().create_future()
        try:
            await self._default_start()  # starts aiokafka's consumer (on_start)
        finally:
            starting.set_result(None)

    async def stop(self) -> None:
        # As the thread would end (ServiceThread._shutdown_thread); nothing to join.
        if self._stopped.is_set():
            return
        self._stopped.set()
        starting = self._starting
        if starting is not None and not starting.done():
            # A stop while aiokafka's consumer starts: stopping it now would let the start
            # finish afterwards and leave its fetcher and coordinator running. The thread
            # finished a start before it stopped; so does this, as long as a stop may take.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(starting), self.shutdown_timeout)
        await self.on_stop()
        await self.on_thread_stop()  # stops aiokafka's consumer
        await self._default_stop_children()
        self._shutdown.set()
        await self._default_stop_futures()
        await self._default_stop_exit_stacks()

    def _stopped_set(self) -> None:
        self._stopped.set()

    def set_shutdown(self) -> None:
        self._shutdown.set()

    async def call_thread(self, fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        result = fun(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def cast_thread(self, fun: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        await self.call_thread(fun, *args, **kwargs)

    _fetched: tuple[dict[TP, int], dict[TP, int], dict[TP, tuple[int, int]]] | None = None
    _drained: tuple[dict[TP, int], dict[TP, int], dict[TP, tuple[int, int]]] | None = None

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Faust passes its own value and no setting reaches it; the fetcher reads this
        # attribute when the consumer starts.
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        # Faust reads committed records only in its own exactly_once mode: an aborted
        # checkpoint's records (a fenced worker's) must never reach an agent or a table.
        consumer._isolation_level = "read_committed"
        return consumer

    async def getmany(self, active_partitions: Any, timeout: float) -> Any:
        app = self.app
        # Faust's consumer asks for the next records once every record of the last
        # fetch is in a queue: how far that fetch read is now how far the queues hold.
        fetched, self._fetched = self._fetched, None
        if fetched is not None:
            app.read_through(*fetched)
            if app.in_recovery:
                app.nudge_recovery()
        app.delivered.clear()
        self._drained = None
        records = await super().getmany(active_partitions, timeout)
        drained, self._drained = self._drained, None
        if drained is not None:
            app.fetch_sought, positions, lasts = drained
            self._fetched = (positions, dict(app.fetch_sought), lasts)
        else:  # no fetch made (flow stopped): nothing is known of these records
            app.fetch_sought = {}
        return records

    async def _fetch_records(self, consumer: Any, active_partitions: Any, **kwargs: Any) -> Any:
        fetcher = getattr(consumer, "_fetcher", None)
        eager = isinstance(fetcher, Fetcher)
        if eager:
            hand_over_at_once(fetcher)
        records = await super()._fetch_records(consumer, active_partitions, **kwargs)
        if records and eager:
            fetch_next(fetcher)
        # At the instant aiokafka drained these records (it hands over only records at
        # each TP's position; a seek is made between two drains, see :meth:`seek_now`):
        # which seeks they follow, and how far each TP was read. A seek of their TP made
        # after this makes them stale (:class:`Queue`); so does one under way now (a
        # table recovery's seeks await between seeking and returning).
        app = self.app
        with app.books:
            seeking = app.seeking
            stamp = {tp: -1 if seeking.get(tp) else count for tp, count in app.sought.items()}
            positions: dict[TP, int] = {}
            lasts = {
                TP(tp.topic, tp.partition): (len(got), got[-1].offset)
                for tp, got in records.items()
                if got
            }
            try:
                assignment = consumer._subscription.subscription.assignment
            except Exception:  # no subscription (yet, or any more)
                assignment = None
            for tp in set(active_partitions or ()) | set(records):
                try:
                    position = assignment.state_value(tp).position
                except Exception:  # not assigned (any more)
                    continue
                if position is not None:
                    key = TP(tp.topic, tp.partition)
                    if stamp.get(key, 0) == app.sought.get(key, 0):
                        positions[key] = position
            self._drained = (stamp, positions, lasts)
        return records

    async def seek_now(self, partition: Any, offset: int) -> None:
        """Seek ``partition`` to ``offset`` between two drains of the fetcher, never while
        aiokafka hands a fetch over (a seek made then would be undone: the handing over
        moves the position past its records), and with the records drained before it told
        apart from those after it."""
        self.app.sought_to(partition, offset)
        self._ensure_consumer().seek(partition, offset)


def hand_over_at_once(fetcher: Fetcher) -> None:
    """Have ``fetcher`` wake whoever waits for records as soon as a response brought some,
    and fetch from each broker in a :class:`FetchSession`.

    aiokafka's fetcher routine wakes them, once it has woken from the end of the fetch's
    task: two more turns of the loop, each behind every task ready by then (at 100 runs/s
    on a busy loop, a trigger's milliseconds).
    """
    if "_proc_fetch_request" in vars(fetcher):
        return
    fetch = fetcher._proc_fetch_request
    sessions: dict[int, FetchSession] = {}

    async def fetch_and_hand_over(assignment: Any, node_id: int, request: Any) -> bool:
        if type(request) is FetchRequest:
            session = sessions.get(node_id)
            if session is None:
                session = sessions[node_id] = FetchSession()
            request = session.fetch(request, assignment)
        try:
            new_data = await fetch(assignment, node_id, request)
        finally:
            if isinstance(request, SessionFetch) and not request.answered:
                # Cancelled, timed out, its connection lost: whether the broker took it
                # is unknown, and a fetch on the next epoch would only be refused.
                request.session.reopen()
        if new_data:
            for waiter in list(fetcher._fetch_waiters):
                fetcher._notify(waiter)
        return bool(new_data)

    fetcher._proc_fetch_request = fetch_and_hand_over  # type: ignore[method-assign]


FETCH_SESSION_ID_NOT_FOUND = 70
"""The broker's answer to a fetch in a session it does not know (evicted from its cache,
or the broker restarted): the next fetch opens a new session instead of closing it."""

_Partitions = list[tuple[str, list[tuple[int, int, int]]]]


class FetchSession:
    """An incremental fetch session with one broker (KIP-227), as Kafka's Java client keeps
    one: the first fetch names every partition and opens the session; each later fetch
    names only the partitions whose position moved (or that were added, or are forgotten),
    and the broker answers with only the partitions that have records or news.

    aiokafka sends no session: each fetch names every partition this worker reads (two
    dozen and more: the runs, events and triggers topics and the rest), and the broker
    answers for each of them. At a hundred runs a second, most fetches bring one record,
    and their naming and answering took a fifth of the worker's time and much of the
    broker's. What the broker holds is learnt only from its answers: an answer that never
    came, or a refusal, sends the next fetch in full again, in a new session.
    """

    def __init__(self) -> None:
        self.id = 0
        self.epoch = 0  # 0: the next fetch names every partition and opens a session
        self.held: dict[tuple[str, int], tuple[int, int]] = {}
        self.assignment: Any = None

    def reopen(self) -> None:
        """Have the next fetch name every partition, opening a new session (and closing
        this one, if any)."""
        self.epoch = 0
        self.held = {}

    def fetch(self, request: FetchRequest, assignment: Any = None) -> SessionFetch:
        """``request`` (every partition, at the offset wanted) as this session's next fetch,
        for ``assignment``: a fetch for a new assignment names every partition, so that
        each partition's new state learns its high watermark from the answer."""
        if assignment is not self.assignment:
            self.assignment = assignment
            self.reopen()
        wanted = {
            (topic, partition): (offset, max_bytes)
            for topic, partitions in request.topics
            for partition, offset, max_bytes in partitions
        }
        named: _Partitions = request.topics
        forgotten: list[tuple[str, list[int]]] = []
        if self.epoch:
            held = self.held
            named = _by_topic(
                (topic, (partition, *wanted[topic, partition]))
                for topic, partition in wanted
                if held.get((topic, partition)) != wanted[topic, partition]
            )
            forgotten = _by_topic(
                (topic, partition) for topic, partition in held if (topic, partition) not in wanted
            )
        return SessionFetch(request, self, named, forgotten, wanted)

    def answered(self, fetch: SessionFetch, response: Any) -> None:
        """What the broker answered to ``fetch`` (run as its answer is read: never raises)."""
        fetch.answered = True
        if (fetch.session_id, fetch.epoch) != (self.id, self.epoch):
            return  # a fetch sent beside it was answered first: the broker refused this one
        error = getattr(response, "error_code", 0)
        session_id = getattr(response, "session_id", 0)
        if error or not session_id:
            # Refused (an epoch out of step, an unknown session) or no session made: the
            # next fetch names every partition and opens a new one (closing a refused one
            # the broker still knows).
            self.id = self.id if error and error != FETCH_SESSION_ID_NOT_FOUND else 0
            self.reopen()
            return
        self.id = session_id
        self.epoch = 1 if self.epoch >= 2**31 - 1 else self.epoch + 1
        self.held = fetch.wanted


def _by_topic(items: Iterable[tuple[str, Any]]) -> list[tuple[str, list[Any]]]:
    grouped: dict[str, list[Any]] = {}
    for topic, item in items:
        grouped.setdefault(topic, []).append(item)
    return list(grouped.items())


class SessionFetch(FetchRequest):
    """A fetch in a :class:`FetchSession`: :attr:`topics` is every partition wanted (what
    aiokafka's fetcher reads an answer against), what goes to the broker only what the
    session's broker does not hold yet. A broker older than sessions (fetch v7) is sent
    every partition."""

    def __init__(
        self,
        request: FetchRequest,
        session: FetchSession,
        named: _Partitions,
        forgotten: list[tuple[str, list[int]]],
        wanted: dict[tuple[str, int], tuple[int, int]],
    ) -> None:
        super().__init__(
            request._max_wait_ms,
            request._min_bytes,
            request._max_bytes,
            request._isolation_level,
            request.topics,
            rack_id=request._rack_id,
        )
        self.session = session
        self.session_id = session.id
        self.epoch = session.epoch
        self.named = named
        self.forgotten = forgotten
        self.wanted = wanted
        self.answered = False
        """Whether the broker's answer was read (:meth:`FetchSession.answered`)."""

    def build(self, request_struct_class: Any) -> Any:
        if request_struct_class.API_VERSION < 7:
            return super().build(request_struct_class)
        everything, self._topics = self._topics, self.named
        try:
            struct = super().build(request_struct_class)
        finally:
            self._topics = everything
        struct.session_id = self.session_id
        struct.session_epoch = self.epoch
        struct.forgotten_topics_data = self.forgotten
        struct.RESPONSE_TYPE = _Answer(request_struct_class.RESPONSE_TYPE, self)
        return struct


class _Answer:
    """Reads a fetch's answer as its response type would, and tells the session."""

    def __init__(self, response_type: Any, fetch: SessionFetch) -> None:
        self.response_type = response_type
        self.fetch = fetch

    def decode(self, data: Any) -> Any:
        response = self.response_type.decode(data)
        try:
            self.fetch.session.answered(self.fetch, response)
        except Exception:  # pragma: no cover - never breaks the connection reading it
            log.exception("fetch session: an answer could not be read")
        return response


def fetch_next(fetcher: Fetcher) -> None:
    """Send the next fetch of each broker whose records were all drained, now.

    aiokafka sends a broker no fetch while records it returned wait to be drained; its
    fetcher routine learns of the drain, wakes, and starts a task sending the next one:
    three turns of the loop, and a record appended meanwhile waits for all of them. Here
    the fetch is started in the drain's own step, as the routine would start it (in its
    tasks, with its broker in flight): the routine, woken by the same drain, then finds
    the broker busy and sends nothing more. Offsets to reset or metadata to refresh are
    left to the routine.
    """
    subscription = fetcher._subscriptions.subscription
    assignment = None if subscription is None else subscription.assignment
    if assignment is None or not assignment.active:
        return
    requests, resets, _timeout, invalid_metadata, _resumed = fetcher._get_actions_per_node(
        assignment
    )
    if resets or invalid_metadata:
        return
    loop = asyncio.get_running_loop()
    for node_id, request in requests:
        task = loop.create_task(fetcher._proc_fetch_request(assignment, node_id, request))
        fetcher._pending_tasks.add(task)
        fetcher._in_flight.add(node_id)
        task.add_done_callback(lambda _, node_id=node_id: fetcher._in_flight.discard(node_id))


def _first_step(callback: Callable[[], Any]) -> Awaitable[Any] | None:
    """Run the coroutine ``callback()`` returns up to where it first waits, at once and in
    a context of its own (as a task would, though under the caller's task), and return
    ``None`` when it finished there (an exception it raises is raised here), or an
    awaitable that runs the rest.

    A record handed to an agent's queue with room in it never waits: handing it over in
    the fetcher's own step, instead of in a task of its own (Faust's four per record),
    lets the fetcher ask for the next records before the agents it woke take the loop.
    """
    context = contextvars.copy_context()
    coro = context.run(callback)
    try:
        waiting_on = context.run(coro.send, None)
    except StopIteration:
        return None
    return _rest(coro, context, waiting_on)


async def _rest(coro: Any, context: contextvars.Context, waiting_on: Any) -> Any:
    """Run ``coro`` on from where it waits for ``waiting_on`` (what it yielded), as its
    task would: a cancellation cancels what it waits for (and ``coro`` goes on once that
    has ended), or is thrown into it when that has ended already."""
    while True:
        step: Callable[[], Any] = functools.partial(coro.send, None)
        try:
            if waiting_on is None:  # a bare yield: give the loop one turn
                await asyncio.sleep(0)
            elif asyncio.isfuture(waiting_on):
                waiting_on._asyncio_future_blocking = False
                await asyncio.wait((waiting_on,))
            else:
                raise RuntimeError(f"a coroutine yielded {waiting_on!r}, not a future")
        except GeneratorExit:  # this coroutine is closed: so is the one it runs
            coro.close()
            raise
        except BaseException as exc:  # cancelled (or the yield above was wrong)
            if asyncio.isfuture(waiting_on) and waiting_on.cancel():
                if not waiting_on.done():  # a task asked to stop: wait until it has
                    continue
            else:
                step = functools.partial(coro.throw, exc)
        try:
            waiting_on = context.run(step)
        except StopIteration as stop:
            return stop.value


class RflowConsumer(aiokafka_driver.Consumer):
    """Faust's consumer, telling the consumption layer the committed offsets it seeks to,
    and handing records over without a task each (:meth:`_drain_messages`)."""

    consumption: Consumption | None = None

    def _new_consumer_thread(self) -> RflowConsumerService:
        return RflowConsumerService(self, loop=self.loop, beacon=self.beacon)

    async def _drain_messages(self, fetcher: Any) -> None:
        """Faust's fetcher: hand each fetched record to its stream, then ask for more.

        As Faust's, but a record is handed over in this task's own step when its queue
        has room (:func:`_first_step`), waiting beside the flow's suspension only when it
        must; and the next fetch is asked for at once, not after a turn of the loop. In
        Faust's, each record took four tasks and three turns of the loop, and every agent
        woken meanwhile ran before the fetcher asked again: a trigger fetched just after a
        batch waited for all of that (at 100 runs/s, 3.5 ms a batch of one record, 14 ms
        one of 29 journal records).

        Faust drops a record below the last one it handed over for its TP; nothing is
        dropped here. A seek made while a batch is handed over lets the batch's stale
        records (dropped by the consumption layer) move that offset past the seek's, and
        the records read again below it were then lost before reaching the queues: the
        consumption layer drops what was taken before instead.
        """
        callback = self.callback
        getmany = self.getmany
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        set_flag, unset_flag = self.diag.set_flag, self.diag.unset_flag
        fetching = faust_consumer.CONSUMER_FETCHING
        suspended = self.suspend_flow
        commit_every = self._commit_every
        delivered = self.app.delivered
        since_yield = 0
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                if self.should_stop:  # crashed: fetch nothing more (the app is going down)
                    await self.sleep(1.0)
                    continue
                set_flag(fetching)
                async for tp, message in getmany(timeout=1.0):
                    since_yield += 1
                    if since_yield > 100:  # a long batch lets the agents run meanwhile
                        await asyncio.sleep(0)
                        since_yield = 0
                    if commit_every is not None and self._n_acked >= commit_every:
                        self._n_acked = 0
                        await self.commit()
                    rest = _first_step(functools.partial(callback, message))
                    if rest is None or rest in (await self.wait_first(rest, suspended)).done:
                        count = delivered.get(tp, (0, 0))[0]
                        delivered[tp] = (count + 1, message.offset)
                unset_flag(fetching)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            unset_flag(fetching)

    async def seek_to_committed(self) -> Mapping[Any, int | None]:
        committed = await super().seek_to_committed()
        if self.consumption is not None:
            await self.consumption.open(committed)
        return committed

    async def seek_wait(self, partitions: Mapping[Any, int]) -> None:
        """Faust's table recovery seeking changelogs; an offset it lost track of (seen
        when a rebalance interrupts a recovery, and aiokafka refuses) reads the changelog
        partition from its start instead of crashing the recovery: applying a changelog
        again from its start gives the same table."""
        fixed = {}
        for tp, offset in partitions.items():
            if not isinstance(offset, int) or offset < 0:
                log.warning(
                    "%s[%d]: table recovery asked to read from %r: reading it from its start",
                    tp.topic,
                    tp.partition,
                    offset,
                )
                offset = 0
            fixed[tp] = offset
            self._sought(tp, done=False)
        try:
            await super().seek_wait(fixed)
        finally:
            for tp, offset in fixed.items():
                self._sought(tp, offset)

    async def highwaters(self, *partitions: TP) -> Mapping[TP, int]:
        """The end offsets (``read_committed``: the last stable offsets), told as the
        offset after the last record where this worker has read a TP to its end: Faust
        recovers a table until it has applied the record at the end offset less one,
        which, after a transaction, is its commit marker. A worker taking back a
        partition whose standby copy it kept current then ends its recovery at once.
        Never told below the offset an earlier recovery here reached (Faust keeps it, and
        stops the worker if it is past the end it is told): a partition recovered through
        its last marker and assigned here again has nothing left to read."""
        found = dict(await super().highwaters(*partitions))
        app = self.app
        recovered = app.tables.recovery.active_offsets
        for tp, end in found.items():
            key = TP(tp.topic, tp.partition)
            last = app.handed.get(key)
            if end and last is not None and last + 1 < end and app.read_to.get(key, -1) >= end:
                log.debug("%s[%d]: read to its end %d, the last record at %d", *key, end, last)
                reached = recovered.get(tp)
                found[tp] = min(end, max(last + 1, -1 if reached is None else reached + 1))
        return found

    async def commit_offsets(self, offsets: Mapping[TP, int]) -> bool:
        """Commit ``offsets`` as they are (Faust commits only what its streams acked)."""
        return await self._commit(offsets)

    def _sought(self, partition: Any, offset: int | None = None, done: bool = True) -> None:
        app = self.app
        with app.books:
            tp = TP(partition.topic, partition.partition)
            app.seeking[tp] = app.seeking.get(tp, 0) + (-1 if done else 1)
            app.sought_to(tp, offset)

    async def _seek(self, partition: TP, offset: int) -> None:
        thread = self._thread
        await thread.call_thread(thread.seek_now, partition, offset)

    def handed_over(self, tp: TP) -> int | None:
        """The offset of the last record of ``tp`` the fetcher put into a queue since
        ``tp`` was last sought, ``None`` before any: records up to it have left the
        fetcher."""
        return self.app.handed.get(tp)


class Queue(ThrowableQueue):
    """A stream's, channel's or changelog's queue that a flow resume never empties, and
    that counts the records of each TP it holds (``queued``, shared by an app's queues).

    Faust empties its queues on every flow resume, several times in one rebalance, the
    last time after it has sought to the committed offsets and fetched again: records
    thrown away then were counted as read, and a changelog's table recovery waited
    forever for records it had already fetched. Here they stay: :class:`Consumption`
    drops what is not the next record of a TP it owns, and a changelog is read in order,
    every record after one applied again. The counts tell a TP whose records wait in a
    queue from one whose records never came (:meth:`Consumption.stalled`).
    """

    def __init__(self, *args: Any, counts: Any, **kwargs: Any) -> None:
        self.counts = counts
        self.queued: Counter[TP] = counts.queued
        self.follows: dict[TP, deque[tuple[int, int | None]]] = {}
        """For each record of a TP held, in order: its offset, and the offset the fetcher
        handed over just before it in the same run of fetches since a seek
        (:attr:`ConsumingApp.put_last`; ``None``: unknown)."""
        super().__init__(*args, **kwargs)

    def _put(self, item: Any) -> None:
        tp = _tp_of(item)
        if tp is not None:
            counts = self.counts
            self.queued[tp] += 1
            counts.arrived += 1
            offset = getattr(item, "message", item).offset
            follows = self.follows.get(tp)
            if follows is None:
                follows = self.follows[tp] = deque()
            books = getattr(counts, "books", None)
            with books if books is not None else contextlib.nullcontext():
                sought = getattr(counts, "sought", {})
                if sought.get(tp, 0) == getattr(counts, "fetch_sought", {}).get(tp, 0):
                    follows.append((offset, counts.put_last.get(tp)))
                    counts.put_last[tp] = offset
                    counts.handed[tp] = offset
                else:  # drained before the TP's last seek, which reads it again if due
                    follows.append((offset, STALE))
        super()._put(item)

    def _get(self) -> Any:
        item = super()._get()
        tp = _tp_of(item)
        if tp is not None:
            self.queued[tp] -= 1
            follows = self.follows.get(tp)
            offset = getattr(item, "message", item).offset
            while follows:
                found, before = follows.popleft()
                if found == offset:
                    self.counts.got[tp] = (offset, before)
                    break
            last = getattr(self.counts, "last_item", None)
            if last is not None:
                last[tp] = item
        return item


def _tp_of(item: Any) -> TP | None:
    message = getattr(item, "message", item)
    tp = getattr(message, "tp", None)
    return TP(tp.topic, tp.partition) if tp is not None else None


def queue(app: Any, maxsize: int | None = None) -> ThrowableQueue:
    """A queue of ``app`` (see :class:`Queue`)."""
    return Queue(maxsize=maxsize, flow_control=app.flow_control, clear_on_resume=False, counts=app)


class ConsumingApp(faust.App):
    """A Faust app whose agents consume through a :class:`Consumption` (``consumption``),
    with the consumer and queues that the layer needs."""

    consumption: Consumption | None = None
    before_revoke: list[Callable[[], Awaitable[None]]]
    """Called first when a rebalance revokes partitions, before Faust stops the streams
    and flushes the producer: whatever writes tables outside an agent stops here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.queued: Counter[TP] = Counter()
        """Records of each TP waiting in the app's queues (:class:`Queue`)."""
        self.arrived = 0
        """Records put into the app's queues so far: whether the fetcher hands any over."""
        self.handed: dict[TP, int] = {}
        """The offset of the last record of each TP put into the app's queues since the
        TP was last sought (:meth:`RflowConsumer.handed_over`)."""
        self.read_to: dict[TP, int] = {}
        """Each TP's fetch position (transaction markers and aborted records included)
        below which every record is in the app's queues or taken from them, since the TP
        was last sought."""
        self.dropped: set[TP] = set()
        """TPs some of whose fetched records the fetcher did not deliver since they were
        last sought: how far they are read is unknown (:meth:`read_through`)."""
        self.delivered: dict[TP, tuple[int, int]] = {}
        """Of the fetch being handed over, how many records of each TP the fetcher
        delivered (each to every stream of its topic, or found undecodable), and the last
        one's offset (:meth:`RflowConsumer._drain_messages`)."""
        self.sought: dict[TP, int] = {}
        """Seeks of each TP so far (a position read before a seek is not used after)."""
        self.seeking: dict[TP, int] = {}
        """Seeks of each TP under way."""
        self.fetch_sought: dict[TP, int] = {}
        """:attr:`sought` when the records being put into the queues were handed over by
        aiokafka (-1: a seek of the TP was under way)."""
        self.last_item: dict[TP, Any] = {}
        """The last record (event) of each TP taken from the app's queues."""
        self.nudged: dict[TP, int] = {}
        """The recovery offset at which each TP's recovery was last looked at again
        (:meth:`nudge_recovery`)."""
        self.books = threading.RLock()
        """Held while the seek counts, what each TP's records follow and how far each was
        read are read or changed (a seek, a drain of the fetcher, a record put into a
        queue: each whole)."""
        self.put_last: dict[TP, int] = {}
        """The offset of the last record of each TP put into the app's queues, or the
        offset less one a seek set the TP's fetch position to since."""
        self.got: dict[TP, tuple[int, int | None]] = {}
        """The last record of each TP taken from the app's queues: its offset, and
        what the fetcher handed over just before it (:attr:`put_last` then): the records
        between the two were none a ``read_committed`` reader sees (transaction
        markers, aborted records)."""
        super().__init__(*args, **kwargs)
        self.before_revoke = []
        self._recovery_watched = False

    def read_through(
        self,
        positions: Mapping[TP, int],
        seeks: Mapping[TP, int],
        fetched: Mapping[TP, tuple[int, int]],
    ) -> None:
        """A fetch's records are all out of the fetcher: each TP's fetch ``positions``
        after it, the seeks (:attr:`sought`) its records followed, and how many records of
        each TP it held and the last one's offset (``fetched``) tell how far each TP is
        read (:attr:`read_to`).

        A TP sought since is read again from the seek. A TP of which the fetcher did not
        deliver every record of the fetch (:attr:`delivered`) lost some: Faust drops
        what is left of a batch when a rebalance suspends the flow, and skips the records
        of a TP outside its active set, while the fetch position is past them. How far
        such a TP is read is unknown until it is sought again (:attr:`dropped`): read to
        its end with its last record handed over long before, it would tell a recovery an
        end offset below records it never applied (:meth:`RflowConsumer.highwaters`)."""
        with self.books:  # a seek forgets how far a TP was read
            sought, dropped, read_to = self.sought, self.dropped, self.read_to
            delivered = self.delivered
            for tp, position in positions.items():
                if sought.get(tp, 0) != seeks.get(tp, 0):
                    continue
                held = fetched.get(tp)
                if tp in dropped or (held is not None and delivered.get(tp) != held):
                    dropped.add(tp)
                    read_to.pop(tp, None)
                else:
                    read_to[tp] = position

    def lost(self, tp: Any, offset: int) -> None:
        """The consumption layer refused the record of ``tp`` at ``offset`` (the TP was
        not open here). One handed over since the TP's last seek was counted as read by
        its fetch: ``tp`` is not read to its end until it is sought again (the stall
        check then reads it again from its cursor, were it open). One handed over before
        (it waited in a queue meanwhile) changes nothing: the seek reads it again."""
        key = TP(tp.topic, tp.partition)
        with self.books:
            last = self.handed.get(key)
            if last is not None and last >= offset:
                self.dropped.add(key)
                self.read_to.pop(key, None)

    def forget_unassigned(self, assigned: Iterable[Any]) -> None:
        """Forget how far each TP no longer assigned here was read: were it assigned back
        later, its recovery's end offset is asked for before it is sought again."""
        keep = {TP(tp.topic, tp.partition) for tp in assigned}
        with self.books:
            known = set(self.handed) | set(self.read_to) | self.dropped
            for tp in known - keep:
                self.sought_to(tp, None)

    def sought_to(self, partition: Any, offset: int | None) -> None:
        """A seek of ``partition`` to ``offset`` (``None``: unknown) is made now: the
        records drained before it are stale from here on, and the next one follows it."""
        with self.books:
            tp = TP(partition.topic, partition.partition)
            self.sought[tp] = self.sought.get(tp, 0) + 1
            self.handed.pop(tp, None)
            self.read_to.pop(tp, None)
            self.dropped.discard(tp)
            if offset is None:
                self.put_last.pop(tp, None)
            else:
                self.put_last[tp] = offset - 1

    async def _on_partitions_revoked(self, revoked: Any) -> None:
        if not self.should_stop:
            for hook in self.before_revoke:
                await hook()
        await super()._on_partitions_revoked(revoked)

    async def _on_partitions_assigned(self, assigned: Any, generation_id: int = 0) -> None:
        consumption = self.consumption
        if not self.should_stop and consumption is not None and consumption.fence is not None:
            # Fence the partitions' earlier owners before their tables recover: once the
            # broker has aborted an earlier owner's open transaction, what recovery reads
            # (read_committed) and the committed offsets are final.
            numbers = {tp.partition for tp in assigned if tp.topic in consumption.joined}
            try:
                # Afresh at every assignment: a producer kept across a rebalance may have
                # been fenced meanwhile (this worker stopped, its partitions moved away
                # and back), and the epoch it takes now fences every earlier one.
                await consumption.fence.release()
                await consumption.fence.take(numbers)
            except Exception as exc:
                log.error("fencing the partitions' earlier owners failed: %r", exc)
                await self.crash(exc)
                return
        self.forget_unassigned(assigned)
        self._watch_recovery()
        await super()._on_partitions_assigned(assigned, generation_id)

    def _watch_recovery(self) -> None:
        """End a table recovery once every changelog record below the changelog's end is
        applied: a transaction's last record is followed by its commit marker (and an
        aborted one's records are never read), so the last record read is not at the
        end offset less one, where Faust waits for it."""
        if self._recovery_watched:
            return
        self._recovery_watched = True
        recovery = self.tables.recovery
        remaining = recovery.active_remaining

        def active_remaining() -> Counter[TP]:
            found = remaining()
            for tp, left in found.items():
                if left > 0 and self.read_past(tp, recovery.active_highwaters[tp]):
                    recovery.active_offsets[tp] = recovery.active_highwaters[tp]
                    found[tp] = 0
            return found

        recovery.active_remaining = active_remaining

    def nudge_recovery(self) -> None:
        """Have Faust's recovery look again at once at a TP the fetcher has read to its
        end with nothing left in the queues: Faust looks when a changelog record arrives
        or after 5 s without one, and past a transaction's last record only its marker
        comes. The TP's last record, applied already, is handed to the recovery again: a
        record at or below the offset recovered is not applied, and is followed by the
        look."""
        recovery = self.tables.recovery
        offsets = recovery.active_offsets
        for tp, highwater in list(recovery.active_highwaters.items()):
            seen = offsets.get(tp)
            if seen is None or seen >= highwater or not self.read_past(tp, highwater):
                continue
            key = TP(tp.topic, tp.partition)
            item = self.last_item.get(key)
            if item is None or getattr(item, "message", item).offset > seen:
                continue
            if self.nudged.get(key) == seen:
                continue
            self.nudged[key] = seen
            # A full queue holds records: the recovery looks at each of them anyway.
            with contextlib.suppress(asyncio.QueueFull):
                self.tables.changelog_queue.put_nowait(item)

    def read_past(self, tp: Any, last: int) -> bool:
        """Whether every record of ``tp`` up to offset ``last`` has left the app's queues."""
        key = TP(tp.topic, tp.partition)
        return self.read_to.get(key, -1) > last and self.queued[key] == 0

    def FlowControlQueue(
        self, maxsize: int | None = None, *, clear_on_resume: bool = False
    ) -> ThrowableQueue:
        """Every queue of a stream, channel or changelog: never emptied by a flow resume
        (:func:`queue`)."""
        return queue(self, maxsize)

    async def on_stop(self) -> None:
        consumption = self.consumption
        if consumption is not None:
            await consumption.stop_taking()
            try:
                await consumption.close()
            except Exception as exc:
                log.error("the last checkpoint before stopping failed: %r", exc)
            if consumption.fence is not None:
                await consumption.fence.release()
        await super().on_stop()

    def _new_consumer(self) -> RflowConsumer:
        return RflowConsumer(
            self.transport,
            callback=self.topics.on_message,
            on_partitions_revoked=self._on_partitions_revoked,
            on_partitions_assigned=self._on_partitions_assigned,
            beacon=self.beacon,
            loop=self.transport.loop,
        )


# --- transactions -----------------------------------------------------------------------


class Fenced(RuntimeError):
    """A checkpoint would write for a partition this worker holds no producer of: it was
    given up (its next owner writes it)."""


class Fence:
    """One transactional producer per partition *n* of the joined topics this worker
    owns, its ``transactional.id`` named after the app and *n*: starting it (as the
    partition is assigned, before its tables recover) fences every earlier owner's, whose
    open transaction the broker aborts and whose later writes it refuses. So a worker that
    lost a partition, however late it wakes, never gets a write seen by a
    ``read_committed`` reader, and the next owner recovers only what was committed."""

    def __init__(self, make: Callable[[str], Any], prefix: str) -> None:
        self.make = make
        """Builds a transactional producer (not started) for a ``transactional.id``."""
        self.prefix = prefix
        self.producers: dict[int, Any] = {}

    def transactional_id(self, number: int) -> str:
        return f"{self.prefix}-rflow-{number}"

    async def take(self, numbers: Iterable[int]) -> None:
        """Hold a started producer for each of ``numbers`` (fencing earlier owners)."""
        new = sorted(set(numbers) - set(self.producers))
        if new:
            await asyncio.gather(*(self._start(number) for number in new))
            log.info("fenced the earlier owners of %d partitions", len(new))

    async def _start(self, number: int) -> None:
        producer = self.make(self.transactional_id(number))
        await producer.start()  # init_transactions: the epoch moves on
        self.producers[number] = producer

    async def release(self, keep: Iterable[int] = ()) -> None:
        """Stop the producers of every partition but ``keep`` (given up)."""
        kept = set(keep)
        gone = [self.producers.pop(n) for n in sorted(set(self.producers) - kept)]
        for producer in gone:
            try:
                await asyncio.wait_for(producer.stop(), timeout=10)
            except Exception as exc:  # a fenced producer may fail to stop cleanly
                log.warning("stopping a transactional producer failed: %r", exc)

    def producer(self, number: int) -> Any:
        found = self.producers.get(number)
        if found is None:
            raise Fenced(f"partition {number} is not this worker's: nothing is written for it")
        return found


_CHECKPOINT: contextvars.ContextVar[Checkpoint | None] = contextvars.ContextVar(
    "rflow_checkpoint", default=None
)


def current_checkpoint() -> Checkpoint | None:
    """The checkpoint whose writes are being made (:meth:`Consumption.checkpoint`)."""
    return _CHECKPOINT.get()


class Checkpoint:
    """What one checkpoint writes. With a :class:`Fence`, the records decided on
    partition *n* of the joined topics go in *n*'s transaction, with the offsets consumed
    there; what the writers change locally once the broker has the records (a table's
    store) waits until every transaction is committed (:meth:`then`): a store never holds
    a value or an offset of an aborted transaction."""

    def __init__(self, producer: Any, fence: Fence | None) -> None:
        self.producer = producer
        """The app's producer: the records of a checkpoint without transactions."""
        self.fence = fence
        self.begun: dict[int, tuple[Any, asyncio.Future[Any]]] = {}
        """Partition -> its producer and the beginning of its transaction (the writes
        of one checkpoint go on side by side: the first to need it begins it)."""
        self.afterwards: list[Callable[[], None]] = []

    @property
    def transactional(self) -> bool:
        return self.fence is not None

    async def send(
        self,
        number: int | None,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
    ) -> Awaitable[Any]:
        """Hand a record to the producer of partition ``number`` of the joined topics (the
        app's producer without transactions, or for a record no partition decided); the
        result resolves to its metadata once the broker has it."""
        if self.fence is None or number is None:
            return await self.producer.send(topic, key, value, partition, None, None)
        producer = await self.begin(number)
        return await producer.send(topic, value, key=key, partition=partition)

    async def begin(self, number: int) -> Any:
        """Partition ``number``'s producer, in this checkpoint's transaction."""
        assert self.fence is not None
        found = self.begun.get(number)
        if found is None:
            producer = self.fence.producer(number)
            found = self.begun[number] = (
                producer,
                asyncio.ensure_future(producer.begin_transaction()),
            )
        producer, begun = found
        await begun
        return producer

    async def write(self, writes: Iterable[Callable[[], Awaitable[None]]]) -> None:
        """Make ``writes`` (each returns once the broker has acknowledged its records).
        Without transactions in order, each finished before the next begins: a later
        write is acknowledged only if every earlier one was. In transactions all at once,
        so that each producer adds its partitions to its transaction in one request: a
        transaction commits all of its records or none, whatever their order."""
        if self.fence is None:
            for write in writes:
                await write()
        else:
            await asyncio.gather(*(write() for write in writes))

    def then(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once every record of the checkpoint is committed."""
        self.afterwards.append(callback)

    async def add_offsets(self, offsets: Mapping[int, Mapping[TP, int]], group: str) -> None:
        """Add each partition's consumed ``offsets`` to its transaction (none without a
        fence: the group's offsets are committed apart)."""

        async def add(number: int, consumed: Mapping[TP, int]) -> None:
            producer = await self.begin(number)
            await producer.send_offsets_to_transaction(
                {TopicPartition(tp.topic, tp.partition): offset for tp, offset in consumed.items()},
                group,
            )

        # Each partition's transaction is its own producer's: they go on side by side.
        await asyncio.gather(*(add(number, consumed) for number, consumed in offsets.items()))

    async def commit(self) -> None:
        """Commit every transaction begun (once its records and offsets are in: each
        was begun by a write or an offset that awaited its beginning)."""
        await asyncio.gather(*(p.commit_transaction() for p, _ in self.begun.values()))

    def done(self) -> None:
        """Every transaction is committed: call the callbacks (:meth:`then`), then let go."""
        try:
            for callback in self.afterwards:
                callback()
        finally:
            self.release()

    def release(self) -> None:
        """Let go of the transactions' beginnings and the callbacks. A beginning's task
        holds the context it began in, whose :data:`_CHECKPOINT` is this checkpoint: kept,
        they would make a cycle, and everything the checkpoint wrote would wait for the
        cycle collector's oldest generation, to be freed all at once (a pause of the loop).
        Only once committed: after a failed write the others may still begin their
        transaction (the failure is kept, and with its traceback the checkpoint)."""
        self.begun.clear()
        self.afterwards.clear()


# --- the layer --------------------------------------------------------------------------


@dataclass
class Cursor:
    """Where one owned TP is."""

    tp: TP
    """The TP (as Faust names it: pausing and resuming want Faust's type)."""
    next: int
    """The next offset to take."""
    done: int
    """Every record below it is processed."""
    committed: int
    """The offset the group has committed."""
    taken_at: float = field(default_factory=time.monotonic)
    rereading: int = 0
    """Attempts to read a gap again since the last record taken (0: none under way)."""
    skipped: deque[tuple[int, int]] = field(default_factory=deque)
    """Stretches of offsets ``[start, end)`` taken past while records before them were
    still being processed: they hold nothing to process (a transaction's marker, an
    aborted transaction's records), so :attr:`done` moves over them (:meth:`Consumption
    .take`)."""


@dataclass
class Partition:
    """Partition *n* of the topics joined by key: whether it is decided here, and its lock."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    accepting: bool = False
    """Open: records are taken and results decided here."""


class Consumption:
    """The guarantees of the module docstring for one worker's agents.

    ``topics``: every topic an agent reads through it (full names). ``joined``: those of
    them joined by key (the runner's triggers and runs), whose partition *n* has one lock.
    ``marked``: those of them the checkpoints' transactions write (every topic not
    joined unless told).
    """

    def __init__(
        self,
        app: RflowApp,
        topics: Iterable[str],
        joined: Iterable[str],
        marked: Iterable[str] | None = None,
    ) -> None:
        self.app = app
        self.topics = frozenset(topics)
        self.joined = frozenset(joined)
        self.cursors: dict[TP, Cursor] = {}
        self.marked = self.topics - self.joined if marked is None else frozenset(marked)
        """The topics the checkpoints' transactions write (their markers take offsets):
        on them alone, a record the fetcher handed over right after the last one taken
        is the next one whatever offsets lie between (:meth:`_follows`). On the others,
        every offset holds a record, and a gap is always read again."""
        self.partitions: dict[int, Partition] = {}
        self.reading = False
        """Whether records are taken at all (not between a revocation and an opening)."""
        self.opening: set[TP] = set()
        """TPs assigned by the last rebalance, opened when Faust seeks to committed."""
        self.flushers: list[Callable[[], Callable[[], Awaitable[None]]]] = []
        """Called in order at one instant when a checkpoint begins: each takes what was
        decided so far and returns how to write it. In transactions the writes are made
        all at once (each partition's commit takes all of its records or none); without,
        in the same order, each finished before the next begins (the runs' journals
        before the tables, so that no table says a run is settled whose journal may be
        lost)."""
        self.on_open: list[Callable[[frozenset[int]], Awaitable[None]]] = []
        """Called with the joined partitions opened, after each rebalance."""
        self.on_handler_failure: list[Callable[[str], None]] = []
        """Called with the agent's name for each record dead-lettered because its
        handler raised (:meth:`handle`)."""
        self.on_stall: list[Callable[[TP], None]] = []
        """Called with each TP found stalled (:meth:`stalled`): records wait past its
        cursor and none was taken for :data:`STALL`."""
        self.on_close: list[Callable[[], None]] = []
        """Called when every TP is closed (after the last checkpoint before a rebalance):
        what was kept of the tables' entries is dropped, since another owner may change
        them before they are this worker's again."""
        self.epoch = 0
        """Counts closings: work begun in an earlier epoch does not touch a reopened TP."""
        self._checkpoint = asyncio.Lock()
        self._seeking: set[asyncio.Task[Any]] = set()
        self._arrived = -1
        self._arrived_at = time.monotonic()
        """The app's :attr:`~ConsumingApp.arrived` count as last seen, and when it last
        changed (:meth:`stalled`)."""
        self.commits = 0
        """Checkpoints that committed something (for tests and metrics)."""
        self.failed: Exception | None = None
        """The first write the broker did not acknowledge (:meth:`checkpoint`)."""
        self.fence: Fence | None = None
        """The transactional producers of the joined partitions owned (``None``: the
        checkpoints write without transactions)."""
        self.group = getattr(getattr(app, "conf", None), "id", "")
        """The consumer group whose offsets the transactions commit."""

    # --- records ------------------------------------------------------------------

    def take(self, message: Any) -> bool:
        """Whether to process ``message`` now: the next record of a TP this worker
        owns. Taking it moves the cursor past it."""
        cursor = self.cursors.get(message.tp)
        if (
            cursor is None
            or not self.reading
            or (message.topic in self.joined and not self.owns(message.partition))
        ):
            # Not ours (any more, or yet): its owner reads it, from a seek. Until the TP
            # is sought again, the fetch that brought it does not count it as read.
            lost = getattr(self.app, "lost", None)
            if lost is not None:
                lost(message.tp, message.offset)
            return False
        offset = message.offset
        if offset < cursor.next:
            return False  # taken before
        got = getattr(self.app, "got", {}).get(message.tp)
        if got is not None and got == (offset, STALE):
            return False  # drained before the TP's last seek: read again after it
        if offset > cursor.next and (
            message.topic not in self.marked or not self._follows(message, cursor.next)
        ):
            self._reread(cursor, f"offset {offset} arrived")
            return False
        if offset > cursor.next:  # what lies between holds nothing to process
            if cursor.done == cursor.next:
                cursor.done = offset
            else:
                cursor.skipped.append((cursor.next, offset))
        cursor.next = offset + 1
        cursor.taken_at = time.monotonic()
        cursor.rereading = 0
        return True

    def _follows(self, message: Any, expected: int) -> bool:
        """Whether the fetcher handed ``message`` over right after the record below
        ``expected`` (or right after a seek to ``expected`` or below): the offsets in
        between hold nothing a ``read_committed`` reader sees (a transaction's marker,
        an aborted transaction's records)."""
        got = getattr(self.app, "got", {}).get(message.tp)
        if got is None or got[0] != message.offset:
            return False
        before = got[1]
        return before is not None and before < expected

    def processed(self, message: Any) -> None:
        """``message`` (taken) is processed: a checkpoint may commit past it."""
        cursor = self.cursors.get(message.tp)
        if cursor is not None and message.offset == cursor.done < cursor.next:
            cursor.done += 1
            skipped = cursor.skipped
            while skipped and skipped[0][0] == cursor.done:
                cursor.done = skipped.popleft()[1]

    async def process(self, message: Any, work: Callable[[], Awaitable[Any]]) -> bool:
        """Process ``message`` (taken, of a joined topic) with ``work`` under its
        partition's lock; False if the partition was revoked meanwhile (its next owner
        reads it)."""
        if not await self.decide(message.partition, work):
            return False
        self.processed(message)
        return True

    def waiting(self, topic: str) -> int:
        """Records of ``topic`` waiting in the app's queues for their agent."""
        return sum(count for tp, count in self.app.queued.items() if tp.topic == topic)

    async def batches(self, stream: Any, topic: str, most: int) -> AsyncIterator[list[Any]]:
        """The events of an agent's ``stream`` (of ``topic``, not joined) taken in order,
        in batches: each holds what has arrived by the time the one before it was
        processed, ``most`` at most, so a quiet agent processes each record at once and
        a busy one in large batches (mark each :meth:`processed_all`). Faust's
        ``take_events`` was seen holding a few records for seconds after a burst."""
        batch: list[Any] = []
        async for event in stream.events():
            if self.take(event.message):
                batch.append(event)
            if batch and (len(batch) >= most or not self.waiting(topic)):
                yield batch
                batch = []

    def processed_all(self, events: Iterable[Any]) -> None:
        """Every event of a batch is processed."""
        for event in events:
            self.processed(event.message)

    async def handle(
        self,
        agent: str,
        batch: list[Any],
        handler: Callable[[list[Any]], Awaitable[None]],
        dead_letter: Callable[[Any, str], Awaitable[None]],
        *,
        passes: tuple[type[BaseException], ...] = (),
        reason: Callable[[BaseException], str] | None = None,
    ) -> None:
        """Process a batch of taken events with ``handler``, then mark it processed. If the
        handler raises (anything but ``passes``: the worker is stopping, and the batch is
        read again), each event is handled on its own, and one whose handler raises still
        is dead-lettered with the reason (``reason(exc)``; the exception's type and text
        by default), counted (:attr:`on_handler_failure`) and processed: a partition's
        commits never stop behind a record its agent cannot handle."""
        try:
            await handler(batch)
        except passes:
            raise
        except Exception as exc:
            if len(batch) == 1:
                await self._give_up(agent, batch[0], exc, dead_letter, reason)
            else:
                log.error(
                    "%s raised on a batch of %d (%s): handling them one by one",
                    agent,
                    len(batch),
                    type(exc).__name__,
                )
                for event in batch:
                    try:
                        await handler([event])
                    except passes:
                        raise
                    except Exception as each:
                        await self._give_up(agent, event, each, dead_letter, reason)
        self.processed_all(batch)

    async def _give_up(
        self,
        agent: str,
        event: Any,
        exc: BaseException,
        dead_letter: Callable[[Any, str], Awaitable[None]],
        reason: Callable[[BaseException], str] | None,
    ) -> None:
        why = reason(exc) if reason is not None else f"{type(exc).__name__}: {exc}"
        message = event.message
        log.error(
            "%s raised on %s[%d]@%d; dead-lettered: %s",
            agent,
            message.topic,
            message.partition,
            message.offset,
            why,
        )
        await dead_letter(message, f"{agent} failed on this record: {why}")
        for callback in self.on_handler_failure:
            callback(agent)

    # --- partitions of the joined topics ------------------------------------------

    def partition(self, number: int) -> Partition:
        found = self.partitions.get(number)
        if found is None:
            found = self.partitions[number] = Partition()
        return found

    def owns(self, number: int) -> bool:
        """Whether records and results for partition ``number`` of the joined topics are
        decided here now."""
        found = self.partitions.get(number)
        return found is not None and found.accepting

    def owned(self) -> frozenset[int]:
        """The partitions of the joined topics decided here now."""
        return frozenset(n for n, p in self.partitions.items() if p.accepting)

    async def decide(self, number: int, work: Callable[[], Awaitable[Any]]) -> bool:
        """Run ``work`` under partition ``number``'s lock, its table changes going to
        that partition, if this worker owns the partition; False if it does not
        (nothing was run)."""
        partition = self.partition(number)
        if not partition.accepting:
            return False
        async with partition.lock:
            if not partition.accepting:
                return False
            token = _WRITING_TO.set(number)  # as writing_to(number) does, in this hot path
            try:
                await work()
            finally:
                _WRITING_TO.reset(token)
        return True

    # --- checkpoints --------------------------------------------------------------

    async def checkpoint(self) -> bool:
        """Write what was decided, then commit what is processed; True if offsets were
        committed. With a :class:`Fence`, what was decided on partition *n* of the joined
        topics and the offsets processed there go in one transaction of *n*'s producer.
        Once a write has failed, every checkpoint raises :class:`WritesLost` and nothing
        more is committed: the records whose decisions were lost are read again by the
        worker that recovers the tables from their changelogs."""
        async with self._checkpoint:
            if self.failed is not None:
                raise WritesLost(self.failed)
            self._pass_trailing_markers()
            offsets = {tp: c.done for tp, c in self.cursors.items() if c.done > c.committed}
            fence = self.fence
            within: dict[int, dict[TP, int]] = {}
            plain: dict[TP, int] = {}
            for tp, offset in offsets.items():
                if fence is not None and tp.topic in self.joined:
                    within.setdefault(tp.partition, {})[tp] = offset
                else:
                    plain[tp] = offset
            checkpoint = Checkpoint(getattr(self.app, "producer", None), fence)
            token = _CHECKPOINT.set(checkpoint)
            try:
                writes = [flush() for flush in self.flushers]  # one instant: nothing awaits
                # With a fence, one transaction per partition, all of it committed or none.
                # Its offsets go in once its records are acknowledged: the broker verifies
                # a transactional produce and a TxnOffsetCommit with the transaction's
                # coordinator, and of two verifications of one producer pending at once it
                # fails the first (a produce answered NOT_ENOUGH_REPLICAS, retried after a
                # backoff, logged as a warning).
                await checkpoint.write(writes)
                await checkpoint.add_offsets(within, self.group)
                await checkpoint.commit()
            except Exception as exc:
                self.failed = exc
                raise WritesLost(exc) from exc
            except BaseException as exc:
                # Cancelled under way: what it took from the writers may never reach the
                # broker, so no later checkpoint may commit past it.
                cancelled = RuntimeError("a checkpoint was cancelled before its commit")
                cancelled.__cause__ = exc
                self.failed = cancelled
                raise
            finally:
                _CHECKPOINT.reset(token)
            checkpoint.done()
            for tp, offset in (item for each in within.values() for item in each.items()):
                cursor = self.cursors.get(tp)
                if cursor is not None:
                    cursor.committed = max(cursor.committed, offset)
            committed = bool(within)
            if plain and await self._commit(plain):
                committed = True
            if committed:
                self.commits += 1
            return committed

    def _pass_trailing_markers(self) -> None:
        """Move past what a ``read_committed`` fetch read beyond the last record taken on
        a topic transactions write, once every record taken there is processed, none
        waits in a queue and every record handed over was taken: those offsets hold no
        record (the last transaction's marker, aborted records), and a group committed
        below them would show a lag that never reaches 0. A record handed over and not
        taken left its queue without reaching this layer (Faust skips what a stream
        pulls while a rebalance suspends the flow): its offset is the next owner's to
        read, never passed."""
        app = self.app
        read_to = getattr(app, "read_to", {})
        queued = getattr(app, "queued", {})
        handed = getattr(app, "handed", {})
        for tp, cursor in self.cursors.items():
            if tp.topic not in self.marked or cursor.skipped or cursor.done != cursor.next:
                continue
            end = read_to.get(tp)
            if end is None or end <= cursor.next or queued.get(tp):
                continue
            last = handed.get(tp)
            if last is None or last < cursor.next:
                cursor.next = cursor.done = end

    async def _commit(self, offsets: dict[TP, int]) -> bool:
        if not await self.app.consumer.commit_offsets(offsets):
            return False
        for tp, offset in offsets.items():
            cursor = self.cursors.get(tp)
            if cursor is not None:
                cursor.committed = max(cursor.committed, offset)
        return True

    def committed(self) -> dict[TP, int]:
        """The offsets committed for the TPs this worker owns."""
        return {tp: c.committed for tp, c in self.cursors.items()}

    # --- rebalances ---------------------------------------------------------------

    async def stop_taking(self) -> None:
        """A rebalance revokes partitions (or the worker stops): take no more records,
        decide nothing new, and let the decisions under way end."""
        self.reading = False
        numbers = sorted(n for n, p in self.partitions.items() if p.accepting)
        for number in numbers:
            self.partitions[number].accepting = False
        for number in numbers:
            async with self.partitions[number].lock:
                pass  # a decision under way has finished

    async def close(self) -> None:
        """After :meth:`stop_taking`, once Faust's streams are idle: write what was
        decided, commit, and own nothing until the next opening. A failed last
        checkpoint is raised (after owning nothing): :class:`WritesLost` stops the worker
        (:func:`attach`), a refused commit is the next owner's to read again."""
        self.reading = False
        try:
            await self.checkpoint()
            behind = sorted(
                f"{tp.topic}[{tp.partition}] at {c.committed} of {c.done}"
                for tp, c in self.cursors.items()
                if c.done > c.committed
            )
            if behind:
                raise CommitRefused(
                    "the group refused the last commit before the partitions were given up "
                    f"({', '.join(behind)}): their next owner reads them again from there"
                )
        finally:
            # Whatever the checkpoint did, nothing is taken or committed here any more.
            self.epoch += 1
            self.cursors.clear()
            self.opening.clear()
            for callback in self.on_close:
                callback()

    def assigned(self, tps: Iterable[TP]) -> None:
        """The rebalance is complete: these TPs of ours open when Faust seeks them."""
        self.opening = {TP(tp.topic, tp.partition) for tp in tps if tp.topic in self.topics}

    async def open(self, committed: Mapping[Any, int | None]) -> None:
        """Open the TPs waiting to open at the group's committed offsets (their first
        offsets where the group committed none), and read each from there."""
        found = {TP(tp.topic, tp.partition): offset for tp, offset in committed.items()}
        opening = [tp for tp in sorted(self.opening) if tp in found]
        if not opening:
            return
        consumer = self.app.consumer
        epoch = self.epoch
        # Faust resumes the TPs before it asks for this seek: a TP sought while others
        # still are would hand over records before any cursor exists to take them, and
        # the last of them (a run's result, which nothing follows while its lane waits
        # for it) would never be read. They fetch nothing until every cursor is in place.
        consumer.pause_partitions(opening)
        fresh = [tp for tp in opening if not found[tp]]
        earliest = await consumer.earliest_offsets(*fresh) if fresh else {}
        cursors = {}
        for tp in opening:
            if epoch != self.epoch:
                return  # closed meanwhile (a revocation): nothing opens
            offset = found[tp] or earliest.get(tp) or 0
            await consumer.seek(tp, offset)
            cursors[tp] = Cursor(tp, next=offset, done=offset, committed=found[tp] or 0)
        if epoch != self.epoch:
            return
        # At one instant, after every seek: a close() during a seek leaves no cursor of a
        # TP this worker no longer owns (whose offset a checkpoint would then commit).
        self.cursors.update(cursors)
        self.opening.difference_update(opening)
        numbers = frozenset(tp.partition for tp in opening if tp.topic in self.joined)
        for number in sorted(numbers):
            self.partition(number).accepting = True
        self.reading = True
        consumer.resume_partitions(opening)
        log.info("reading %d partitions from their committed offsets", len(opening))
        for callback in self.on_open:
            await callback(numbers)

    # --- gaps -----------------------------------------------------------------------

    def _reread(self, cursor: Cursor, why: str) -> None:
        """Read the cursor's TP again from the cursor (unless an attempt is under way)."""
        tp = cursor.tp
        if cursor.rereading and time.monotonic() - cursor.taken_at < REREAD_BACKOFF[-1]:
            return
        cursor.rereading += 1
        if cursor.rereading == 1:
            log.warning(
                "%s[%d]: %s while offset %d was expected: reading again from %d",
                tp.topic,
                tp.partition,
                why,
                cursor.next,
                cursor.next,
            )
        cursor.taken_at = time.monotonic()
        task = asyncio.ensure_future(self._seek_back(cursor, self.epoch))
        self._seeking.add(task)
        task.add_done_callback(self._seeking.discard)

    async def _seek_back(self, cursor: Cursor, epoch: int) -> None:
        consumer = self.app.consumer
        tp = cursor.tp
        consumer.pause_partitions([tp])
        try:
            # The fetcher may still be yielding what it fetched before (dropped by
            # take() as stale once the seek is made): let it move on first.
            delay = REREAD_BACKOFF[min(cursor.rereading, len(REREAD_BACKOFF)) - 1]
            await asyncio.sleep(delay)
            if epoch == self.epoch and self.reading and self.cursors.get(tp) is cursor:
                await consumer.seek(tp, cursor.next)
        except Exception as exc:  # a rebalance under way seeks everything itself
            log.warning("reading %s[%d] again failed: %r", tp.topic, tp.partition, exc)
        finally:
            if epoch == self.epoch and self.reading and self.cursors.get(tp) is cursor:
                consumer.resume_partitions([tp])

    def stalled(self, now: float | None = None) -> list[TP]:
        """TPs to read again from the cursor: with records past the cursor in the broker,
        none taken for :data:`STALL` and none waiting in a queue for its agent, and
        either the fetcher handed records of the TP past the cursor over that never
        reached the agent (thrown away), or it has handed nothing at all to any agent
        for :data:`STALL` while none waits (the fetcher is stuck). A TP whose next
        record the fetcher has not handed over yet, while it hands over others, is not
        stalled: its records wait in the fetcher behind an agent whose queue is full
        (Faust's one fetcher waits for room in a full queue before it goes on), until it
        has waited :data:`STALL_ANYWAY`."""
        now = time.monotonic() if now is None else now
        found: list[TP] = []
        arrived = self.app.arrived
        if arrived != self._arrived:
            self._arrived, self._arrived_at = arrived, now
        if not self.reading:
            return found
        queued = self.app.queued
        stuck = now - self._arrived_at >= STALL and not any(queued.values())
        consumer = self.app.consumer
        for tp, cursor in list(self.cursors.items()):
            if tp.topic in self.joined and not self.owns(tp.partition):
                continue
            if queued[tp] > 0:
                continue  # its records wait for their agent, which is busy
            highwater = consumer.highwater(tp)
            if highwater is None or highwater <= cursor.next or now - cursor.taken_at < STALL:
                continue
            read_to = getattr(self.app, "read_to", {}).get(tp)
            if read_to is not None and read_to >= highwater:
                continue  # read to the end: what lies past the cursor is no record
            handed = consumer.handed_over(tp)
            waited = now - cursor.taken_at
            if stuck or (handed is not None and handed >= cursor.next) or waited >= STALL_ANYWAY:
                found.append(tp)
                self._reread(cursor, f"no record taken for {waited:.0f}s")
                for callback in self.on_stall:
                    callback(tp)
        return found

    async def run(self) -> None:
        """Checkpoint and look for stalled TPs, every :data:`COMMIT_INTERVAL`."""
        while True:
            await asyncio.sleep(COMMIT_INTERVAL)
            if self.app.rebalancing:
                continue
            try:
                await self.checkpoint()
            except WritesLost as exc:
                # The tables here are ahead of their changelogs: only a restart
                # recovers them from the changelogs.
                log.error("%s; stopping", exc)
                await self.app.crash(exc)
                return
            except Exception as exc:  # a commit the group refused: the next one covers it
                log.warning("a checkpoint failed: %r", exc)
            self.stalled()


def attach(
    app: RflowApp,
    topics: Iterable[str],
    joined: Iterable[str],
    marked: Iterable[str] | None = None,
) -> Consumption:
    """Give ``app`` its consumption layer (see :class:`Consumption` for the arguments)."""
    consumption = Consumption(app, topics, joined, marked)
    app.consumption = app.consumer.consumption = consumption
    settings = app.rflow.settings
    if settings.kafka_transactions:
        from rflow.streams import kafka

        consumption.fence = Fence(
            lambda transactional_id: kafka.transactional_producer(settings, transactional_id),
            settings.app_id,
        )

    async def on_rebalance_complete(sender: Any = None, **kwargs: Any) -> None:
        consumption.assigned(app.assignor.assigned_actives())

    async def on_revoked(sender: Any = None, *args: Any, **kwargs: Any) -> None:
        try:
            await consumption.close()
        except WritesLost as exc:
            # The tables here are ahead of their changelogs (or this worker was fenced):
            # only a restart recovers them from what was committed.
            log.error("the last checkpoint before the rebalance failed: %s; stopping", exc)
            await app.crash(exc)
        except Exception as exc:
            log.error(
                "the last checkpoint before the rebalance failed to commit (%r): the "
                "next owner reads again from the last commit",
                exc,
            )

    app.on_rebalance_complete.connect(on_rebalance_complete)
    app.before_revoke.append(consumption.stop_taking)
    # Sent once Faust's streams are idle and its producer flushed, before the handover.
    app.on_partitions_revoked.connect(on_revoked)

    @app.task
    async def checkpoints() -> None:
        await consumption.run()

    return consumption
