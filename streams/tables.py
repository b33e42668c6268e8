"""The Faust tables: run state whose changelogs (declared in ``topics.yaml``) are durable.

Decisions change a table in this worker's memory (:class:`Staged`); each checkpoint of
the consumption layer writes the newest value of every key changed since the last one to
the table and its changelog, once, before it commits the offsets of the records behind
them (:meth:`Staged.flush`). A run that starts, takes three steps and settles between two
checkpoints writes its entry once, not four times, and its state is never encoded in
between. What a crash loses of it was decided by records whose offsets were not
committed (read again by the next owner) or by results of actions still in flight in the
state that is durable (carried out again under the same idempotency keys).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import faust
from faust.serializers import codecs as faust_codecs

from rflow.codecs.tables import (
    CODEC_NAME,
    RAW_CODEC_NAME,
    read_lane_entry,
    read_run_entry,
    read_settled_entry,
    write_lane_entry,
    write_run_entry,
    write_settled_entry,
)
from rflow.streams.consumption import (
    Checkpoint,
    TableStore,
    current_checkpoint,
    current_partition,
    deciding,
    table_store,
)

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

_DELETED = object()
WRITES_AT_ONCE = 64
"""Table writes a checkpoint makes before letting other work run (each encodes a value)."""
SCAN_AT_ONCE = 1000
"""Entries read from a store at once when every entry of a partition is read."""


class Staged:
    """A table whose changes wait in memory for the next checkpoint.

    Reads see the newest value: changed since the last checkpoint, being written by the
    current one, or in the table's store. Every change is made while a partition is
    being decided (:meth:`rflow.streams.consumption.Consumption.decide`) and goes to that
    partition of the changelog; the store is changed once the broker has the records,
    with the changelog offset they reached (a worker restarted with its RocksDB
    directory reads the changelog from there on).
    """

    def __init__(
        self,
        table: faust.Table,
        encode: Callable[[Any], Any] = lambda value: value,
        decode: Callable[[Any], Any] = lambda value: value,
        *,
        memo: bool = False,
        memo_missing: Callable[[Any], bool] | None = None,
        store: TableStore | None = None,
    ) -> None:
        self.table = table
        self.store = store if store is not None else table_store(table)
        self.encode = encode
        self.decode = decode
        self.changed: dict[Any, tuple[int, Any]] = {}
        """Key -> (partition, value) changed since the last checkpoint."""
        self.writing: dict[Any, tuple[int, Any]] = {}
        """What the checkpoint under way is writing (visible until it is written)."""
        self.memo: dict[Any, Any] | None = {} if memo else None
        """With ``memo``: the decoded value of each key read or written since the worker
        last gave partitions up (:meth:`forget`), so a value is decoded once, not at
        every read (a lane with a long queue, say); ``None`` for a key found missing
        that ``memo_missing`` says to remember so (a key asked for often and rarely
        there, of which there are few)."""
        self.memo_missing = memo_missing

    def get(self, key: Any, default: Any = None) -> Any:
        return self.get_in(deciding(), key, default)

    def get_in(self, partition: int | None, key: Any, default: Any = None) -> Any:
        """``key``'s value, looked for in ``partition`` of the store (a table on disk
        keeps a database per partition): :meth:`get` looks in the partition being
        decided, which is the key's own unless the key names another partition."""
        found = self.changed.get(key) or self.writing.get(key)
        if found is not None:
            return default if found[1] is _DELETED else found[1]
        memo = self.memo
        if memo is not None and key in memo:
            found = memo[key]
            return default if found is None else found
        stored = self.store.get(partition, key)
        value = None if stored is None else self.decode(stored)
        if memo is not None and (
            value is not None or (self.memo_missing is not None and self.memo_missing(key))
        ):
            memo[key] = value
        return default if value is None else value

    def forget(self) -> None:
        """Drop the decoded values: partitions were given up, and a table's entries may
        change under this worker (another owner's writes, recovered) before it owns them
        again."""
        if self.memo is not None:
            self.memo.clear()

    def __getitem__(self, key: Any) -> Any:
        found = self.get(key, _DELETED)
        if found is _DELETED:
            raise KeyError(key)
        return found

    def __contains__(self, key: Any) -> bool:
        return self.get(key, _DELETED) is not _DELETED

    def __setitem__(self, key: Any, value: Any) -> None:
        self.changed[key] = (current_partition(), value)

    def __delitem__(self, key: Any) -> None:
        self.changed[key] = (current_partition(), _DELETED)

    def pending(self, key: Any) -> bool:
        """Whether ``key`` has a change not yet written to the store."""
        return key in self.changed or key in self.writing

    def scan(self, partition: int, after: Any, limit: int) -> list[tuple[Any, Any]]:
        """Up to ``limit`` keys of ``partition`` in the store after ``after``, in key
        order, each with its newest value (``None``: deleted since)."""
        return [
            (key, self.get(key) if self.pending(key) else self.decode(stored))
            for key, stored in self.store.scan(partition, after, limit)
        ]

    def items(self, partitions: Iterable[int] | None = None) -> Iterator[tuple[Any, Any]]:
        """Every key of ``partitions`` (every partition held here: ``None``) and its
        newest value."""
        chosen = self.store.partitions() if partitions is None else sorted(partitions)
        pending = {**self.writing, **self.changed}
        for partition in chosen:
            after = None
            while True:
                found = self.store.scan(partition, after, SCAN_AT_ONCE)
                for key, stored in found:
                    if key not in pending:
                        yield key, self.decode(stored)
                if len(found) < SCAN_AT_ONCE:
                    break
                after = found[-1][0]
        for key, (partition, value) in pending.items():
            if value is not _DELETED and (partitions is None or partition in chosen):
                yield key, value

    def values(self, partitions: Iterable[int] | None = None) -> Iterator[Any]:
        for _, value in self.items(partitions):
            yield value

    def flush(self) -> Callable[[], Awaitable[None]]:
        """Take the changes made so far; the returned function writes them to the
        changelog, each to the partition it was decided on (letting other work run every
        :data:`WRITES_AT_ONCE` records) in the checkpoint's transaction of that partition,
        and once the checkpoint is committed, to the store, with the offset each
        partition reached: a store (RocksDB's, on disk) never holds a value or an offset
        of an aborted transaction."""
        taken, self.changed = self.changed, {}
        self.writing.update(taken)

        async def write() -> None:
            # The record is the one Faust would send (the table's codecs, the partition
            # decided on), handed to the producer at once, in the checkpoint's transaction
            # of that partition; the store follows once the broker has committed it.
            table = self.table
            checkpoint = current_checkpoint()
            own = checkpoint is None
            if checkpoint is None:
                checkpoint = Checkpoint(table.app.producer, None)
            topic = table.changelog_topic.get_topic_name()
            dump_key = faust_codecs.get_codec(table.key_serializer).dumps
            dump_value = faust_codecs.get_codec(table.value_serializer).dumps
            store = self.store
            sent = []
            changes: dict[int, list[tuple[Any, Any]]] = {}
            for done, (key, entry) in enumerate(taken.items(), 1):
                partition, value = entry
                if value is _DELETED:
                    if store.get(partition, key) is None:
                        continue  # never written: nothing to delete
                    stored = None
                    record = None
                else:
                    stored = self.encode(value)
                    record = dump_value(stored)
                sent.append(
                    await checkpoint.send(partition, topic, dump_key(key), record, partition)
                )
                changes.setdefault(partition, []).append((key, stored))
                if not done % WRITES_AT_ONCE:
                    await asyncio.sleep(0)
            reached: dict[int, int] = {}
            for metadata in await asyncio.gather(*sent) if sent else ():
                offset = getattr(metadata, "offset", None)
                if offset is not None:
                    reached[metadata.partition] = max(offset, reached.get(metadata.partition, -1))

            def written() -> None:
                for partition, each in changes.items():
                    store.write(partition, each, reached.get(partition))
                memo = self.memo
                for key, entry in taken.items():
                    if memo is not None:
                        if entry[1] is not _DELETED:
                            memo[key] = entry[1]
                        elif self.memo_missing is not None and self.memo_missing(key):
                            memo[key] = None
                        else:
                            memo.pop(key, None)
                    if self.writing.get(key) is entry:
                        del self.writing[key]

            if own:
                written()
            else:
                checkpoint.then(written)

        return write


@dataclass(frozen=True)
class Tables:
    """The app's tables, as the runner changes them (:class:`Staged`)."""

    triggers: Staged
    """``<workflow>:<trigger key>`` -> the firing's gate entry (:mod:`rflow.engine.memory`)."""
    runs: Staged
    """Run id -> the :class:`~rflow.engine.state.RunState` of a run that has not settled."""
    settled: Staged
    """Run id -> :class:`~rflow.engine.memory.Settled`: a run that settled, for the window."""
    lanes: Staged
    """``<workflow>:<group>`` -> :class:`~rflow.engine.lanes.Lane`; ``~held:...`` -> the
    firings held while a workflow is paused."""

    @property
    def all(self) -> tuple[Staged, ...]:
        return (self.triggers, self.runs, self.settled, self.lanes)

    def forget(self) -> None:
        """Partitions were given up: drop every decoded value (:meth:`Staged.forget`)."""
        for table in self.all:
            table.forget()

    def flush(self) -> Callable[[], Awaitable[None]]:
        """Take every table's changes; the returned function writes them."""
        writes = [table.flush() for table in self.all]

        async def write() -> None:
            await (current_checkpoint() or Checkpoint(None, None)).write(writes)

        return write

    def stamp(self, partition: int, now: float) -> None:
        """Note that every table's ``partition`` is current (:meth:`TableStore.stamp`)."""
        for table in self.all:
            table.store.stamp(partition, now)

    def closed(self, partition: int, now: float) -> None:
        """``partition`` was closed after its last checkpoint: it is current, and what its
        tables hold in memory goes to disk, so that opening it again (a restart) reads
        neither the changelog nor a log of writes."""
        for table in self.all:
            table.store.stamp(partition, now)
            table.store.flush(partition)


ROCKSDB_OPTIONS = {
    "write_buffer_size": 4 * 1024 * 1024,
    "max_write_buffer_number": 2,
    "target_file_size_base": 16 * 1024 * 1024,
}
"""Each table partition's RocksDB database: Faust's defaults (three 64 MiB write buffers
for every one of the 32 databases of a worker owning every partition, and a block cache
of 2 GiB each) would let memory grow to tens of GiB. The databases of a worker share one
block cache and one memtable budget besides (``streams/consumption.py``,
``ROCKSDB_CACHE`` and ``ROCKSDB_MEMTABLES``)."""


def _table(
    app: RflowApp, name: str, changelog: str, help: str, values: str = CODEC_NAME
) -> faust.Table:
    spec = app.rflow.catalog.spec(changelog)
    schema = faust.Schema(key_serializer=CODEC_NAME, value_serializer=values)
    # Our own changelog handle: Faust's default is named after the app id, not after
    # topics.yaml. Every record, changelog included, is written with the app's
    # producer_acks (all in-sync replicas). ``acks=False`` is not about the broker: a
    # Faust topic's ``acks`` makes the consumer track its records for offset commits, as
    # a stream's are. A changelog has no stream; with ``acks`` on, Faust's livelock check
    # (every commit interval x 2.5) counts each changelog partition whose highwater is
    # past the consumer's position as a stream that "has not started processing" and logs
    # an ERROR for it every time, on an idle, healthy worker. Faust's own changelog topics
    # are declared with ``acks=False`` for that reason.
    topic = app.declared_topic(
        changelog,
        schema=schema,
        key_type=None,
        value_type=None,
        key_serializer=None,
        value_serializer=None,
        internal=True,
        acks=False,
        maxsize=131_072,
        allow_empty=True,
    )
    table = app.Table(
        name,
        default=None,
        partitions=spec.partitions,
        changelog_topic=topic,
        schema=schema,
        help=help,
        options=dict(ROCKSDB_OPTIONS) if str(app.conf.store).startswith("rocksdb") else None,
    )
    # Faust derives a table's write serializers from its key and value types ("json" for
    # untyped tables), bypassing the schema: an integer beyond 64 bits in a trigger's
    # payload would then fail the write and crash the agent. Writes must use our codec,
    # which reads always did.
    table.key_serializer, table.value_serializer = CODEC_NAME, values
    return table


def trusted_for(app: RflowApp, changelog: str) -> float:
    """Seconds a partition's local copy may go without being known current before it is
    read again from its changelog's start (:meth:`TableStore.fresh`): half the
    changelog's ``delete.retention.ms``, the least time a tombstone stays after
    compaction (a copy older than that may miss deletions)."""
    spec = app.rflow.catalog.spec(changelog)
    return int(spec.configs.get("delete.retention.ms", DELETE_RETENTION_MS)) / 1000 / 2


DELETE_RETENTION_MS = 86_400_000
"""Kafka's default ``delete.retention.ms``."""


def create(app: RflowApp) -> Tables:
    """Declare every table on ``app``."""
    tables = _create(app)
    for name, staged in zip(CHANGELOGS, tables.all, strict=True):
        staged.store.fresh(trusted_for(app, name))
    return tables


CHANGELOGS = (
    "rflow.state.triggers",
    "rflow.state.runs",
    "rflow.state.settled",
    "rflow.state.lanes",
)


def _create(app: RflowApp) -> Tables:
    return Tables(
        triggers=Staged(
            _table(
                app,
                "triggers",
                "rflow.state.triggers",
                "Accepted trigger firings, keyed by <workflow>:<trigger key> (the firing's "
                "idempotency key), for the de-duplication window: the runs it started, when "
                "it was admitted and the digest of its record (the record itself while its "
                "runs are being admitted). A key present is a duplicate delivery.",
            )
        ),
        runs=Staged(
            _table(
                app,
                "runs",
                "rflow.state.runs",
                "Run state of the runs that have not settled, keyed by run id: where the run "
                "is, the journal of every step (inputs, outputs, errors, attempts) and the "
                "workflow version it is pinned to.",
                values=RAW_CODEC_NAME,
            ),
            encode=write_run_entry,
            decode=read_run_entry,
        ),
        settled=Staged(
            _table(
                app,
                "settled",
                "rflow.state.settled",
                'Settled runs, keyed by run id, for the de-duplication window: {"settled": '
                '<status>, "at": <when>, "workflow": <name>}, so a late event of the '
                "run is recognised.",
            ),
            encode=write_settled_entry,
            decode=read_settled_entry,
        ),
        lanes=Staged(
            _table(
                app,
                "lanes",
                "rflow.state.lanes",
                "Concurrency lanes, keyed by <workflow>:<concurrency group>: the run that owns "
                "the group now and the runs waiting behind it, oldest first.",
            ),
            encode=write_lane_entry,
            decode=read_lane_entry,
            memo=True,
            # Every firing asks whether its workflow has firings held on each partition
            # owned here (one key per workflow and partition, seldom there).
            memo_missing=lambda key: key.startswith("~"),
        ),
    )
