"""The Faust tables: run state whose changelogs (declared in ``topics.yaml``) are the journal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import faust

from rflow.codecs.tables import CODEC_NAME, RAW_CODEC_NAME

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp


@dataclass(frozen=True)
class Tables:
    """The app's tables."""

    triggers: faust.Table
    runs: faust.Table
    lanes: faust.Table


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
        triggers=_table(
            app,
            "triggers",
            "rflow.state.triggers",
            "Accepted trigger firings, keyed by <workflow>:<trigger key> (the firing's "
            "idempotency key): the record as received and the runs it started. A key "
            "already present is a duplicate delivery.",
        ),
        runs=_table(
            app,
            "runs",
            "rflow.state.runs",
            "Run state, keyed by run id: where the run is, the journal of every step "
            "(inputs, outputs, errors, attempts) and the workflow version it is pinned to; "
            'a settled run keeps {"settled": <status>}.',
            values=RAW_CODEC_NAME,
        ),
        lanes=_table(
            app,
            "lanes",
            "rflow.state.lanes",
            "Concurrency lanes, keyed by <workflow>:<concurrency group>: the run that owns "
            "the group now and the runs waiting behind it, oldest first.",
        ),
    )
