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
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import faust
from faust.serializers import codecs as faust_codecs

from rflow.codecs.tables import (
    CODEC_NAME,
    RAW_CODEC_NAME,
    read_lane_entry,
    read_run_entry,
    write_lane_entry,
    write_run_entry,
)
from rflow.streams.consumption import current_partition

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

_DELETED = object()
WRITES_AT_ONCE = 64
"""Table writes a checkpoint makes before letting other work run (each encodes a value)."""


class Staged:
    """A table whose changes wait in memory for the next checkpoint.

    Reads see the newest value: changed since the last checkpoint, being written by the
    current one, or in the table. Every change is made while a partition is being
    decided (:meth:`rflow.streams.consumption.Consumption.decide`) and goes to that
    partition of the changelog.
    """

    def __init__(
        self,
        table: faust.Table,
        encode: Callable[[Any], Any] = lambda value: value,
        decode: Callable[[Any], Any] = lambda value: value,
        *,
        memo: bool = False,
    ) -> None:
        self.table = table
        self.encode = encode
        self.decode = decode
        self.changed: dict[Any, tuple[int, Any]] = {}
        """Key -> (partition, value) changed since the last checkpoint."""
        self.writing: dict[Any, tuple[int, Any]] = {}
        """What the checkpoint under way is writing (visible until it is written)."""
        self.memo: dict[Any, Any] | None = {} if memo else None
        """With ``memo``: the decoded value of each key read or written since the worker
        last gave partitions up (:meth:`forget`), so a value is decoded once, not at
        every read (a lane with a long queue, say)."""

    def get(self, key: Any, default: Any = None) -> Any:
        found = self.changed.get(key) or self.writing.get(key)
        if found is not None:
            return default if found[1] is _DELETED else found[1]
        memo = self.memo
        if memo is not None and key in memo:
            return memo[key]
        # The table's store, read directly: the table's own getter tells Faust's sensors
        # of every read and goes through a KeyError for a missing key.
        data = self.table.data
        stored = data[key] if key in data else None  # noqa: SIM401 (.get goes through KeyError)
        value = None if stored is None else self.decode(stored)
        if memo is not None and value is not None:
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

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every key and its newest value."""
        pending = {**self.writing, **self.changed}
        for key, stored in list(self.table.data.items()):
            if key not in pending:
                yield key, self.decode(stored)
        for key, (_, value) in pending.items():
            if value is not _DELETED:
                yield key, value

    def values(self) -> Iterator[Any]:
        for _, value in self.items():
            yield value

    def flush(self) -> Callable[[], Awaitable[None]]:
        """Take the changes made so far; the returned function writes them to the table
        (and its changelog), each to the partition it was decided on, letting other
        work run every :data:`WRITES_AT_ONCE` writes."""
        taken, self.changed = self.changed, {}
        self.writing.update(taken)

        async def write() -> None:
            # The table's store and its changelog, written here rather than through the
            # table's own setter: the record is the one Faust would send (the table's
            # codecs, the partition decided on) and reaches the producer at once, and
            # the write returns when the broker has every record.
            table = self.table
            data = table.data
            producer = table.app.producer
            topic = table.changelog_topic.get_topic_name()
            dump_key = faust_codecs.get_codec(table.key_serializer).dumps
            dump_value = faust_codecs.get_codec(table.value_serializer).dumps
            memo = self.memo
            sent = []
            for done, (key, entry) in enumerate(taken.items(), 1):
                partition, value = entry
                if value is _DELETED:
                    if key in data:
                        del data[key]
                        sent.append(
                            await producer.send(topic, dump_key(key), None, partition, None, None)
                        )
                    if memo is not None:
                        memo.pop(key, None)
                else:
                    stored = self.encode(value)
                    data[key] = stored
                    record = dump_value(stored)
                    sent.append(
                        await producer.send(topic, dump_key(key), record, partition, None, None)
                    )
                    if memo is not None:
                        memo[key] = value
                if self.writing.get(key) is entry:
                    del self.writing[key]
                if not done % WRITES_AT_ONCE:
                    await asyncio.sleep(0)
            if sent:
                await asyncio.gather(*sent)

        return write


@dataclass(frozen=True)
class Tables:
    """The app's tables, as the runner changes them (:class:`Staged`)."""

    triggers: Staged
    runs: Staged
    """Run id -> :class:`~rflow.engine.state.RunState`, or the status of a settled run."""
    lanes: Staged
    """``<workflow>:<group>`` -> :class:`~rflow.engine.lanes.Lane`; ``~held:...`` -> the
    firings held while a workflow is paused."""

    def forget(self) -> None:
        """Partitions were given up: drop every decoded value (:meth:`Staged.forget`)."""
        for table in (self.triggers, self.runs, self.lanes):
            table.forget()

    def flush(self) -> Callable[[], Awaitable[None]]:
        """Take every table's changes; the returned function writes them."""
        writes = [table.flush() for table in (self.triggers, self.runs, self.lanes)]

        async def write() -> None:
            for each in writes:
                await each()

        return write


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
    )
    # Faust derives a table's write serializers from its key and value types ("json" for
    # untyped tables), bypassing the schema: an integer beyond 64 bits in a trigger's
    # payload would then fail the write and crash the agent. Writes must use our codec,
    # which reads always did.
    table.key_serializer, table.value_serializer = CODEC_NAME, values
    return table


def create(app: RflowApp) -> Tables:
    """Declare every table on ``app``."""
    return Tables(
        triggers=Staged(
            _table(
                app,
                "triggers",
                "rflow.state.triggers",
                "Accepted trigger firings, keyed by <workflow>:<trigger key> (the firing's "
                "idempotency key): the record as received and the runs it started. A key "
                "already present is a duplicate delivery.",
            )
        ),
        runs=Staged(
            _table(
                app,
                "runs",
                "rflow.state.runs",
                "Run state, keyed by run id: where the run is, the journal of every step "
                "(inputs, outputs, errors, attempts) and the workflow version it is pinned to; "
                'a settled run keeps {"settled": <status>}.',
                values=RAW_CODEC_NAME,
            ),
            encode=write_run_entry,
            decode=read_run_entry,
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
        ),
    )
