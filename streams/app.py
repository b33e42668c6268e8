"""The Faust application: built from :class:`~rflow.settings.Settings` and ``topics.yaml``.

``faust -A rflow.streams.app worker`` and ``rflow worker`` both run the module-level
:data:`app`, built from the environment. Tests build their own with
:func:`create_app` and a fresh topic prefix and app id.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.transport.drivers import aiokafka as aiokafka_driver
from faust.transport.producer import ProducerBuffer
from mode.utils.queues import ThrowableQueue

from rflow.codecs import tables as table_codec
from rflow.deployment import Deployment
from rflow.lang import ConfigError, Project, read_source
from rflow.principals import Principals, TokenConflict
from rflow.settings import Settings, environ
from rflow.streams import tables, views
from rflow.streams.control import Control
from rflow.streams.database import Database
from rflow.streams.topics import Catalog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Topics:
    """The app's topic handles. Values travel as raw bytes: agents decode them with
    :mod:`rflow.codecs`, so a bad record reaches the dead-letter path instead of
    failing inside Faust's deserializer."""

    triggers: faust.TopicT
    runs: faust.TopicT
    sends: faust.TopicT
    events: faust.TopicT
    dlq: faust.TopicT


CATCH_UP_TIMEOUT = 10.0
"""Seconds :meth:`Runtime.catch_up` may take before the caller decides without it."""


@dataclass
class Runtime:
    """What rflow's agents need besides Faust: settings, topics, tables, the database, and
    the deployment the worker runs now."""

    settings: Settings
    catalog: Catalog
    deployment: Deployment = field(default_factory=lambda: Deployment.of(None))
    """The current deployment: replaced whole by :meth:`take`, never changed in place."""
    env: dict[str, str] = field(default_factory=dict)
    topics: Topics | None = None
    tables: tables.Tables | None = None
    database: Database | None = None
    runner: Any = None
    metrics: Any = None
    deployments: Any = None
    """The :class:`~rflow.streams.deployments.Deployments` that publishes and follows."""
    webhooks: Any = None
    """The :class:`~rflow.ingress.WebhookIngress` of the web server."""
    on_deployment: list[Callable[[Deployment], None]] = field(default_factory=list)
    """Called in :meth:`take`, in order, by the components that keep what they derive
    from the project (the runner's workflows and versions, the run slots)."""

    @property
    def project(self) -> Project | None:
        """The current deployment's project: read it at use, never keep it."""
        return self.deployment.project

    def current_project(self) -> Project | None:
        """:attr:`project`, as a function (:data:`rflow.deployment.ProjectAt`)."""
        return self.deployment.project

    @property
    def webhook_paths(self) -> Collection[str]:
        """The paths of the current webhook triggers: public, like every webhook."""
        return self.webhooks.routes.keys() if self.webhooks is not None else ()

    def take(self, deployment: Deployment) -> None:
        """Make ``deployment`` the current one. Nothing awaits in between, so no event is
        decided with the new project by one component and the old one by another."""
        self.deployment = deployment
        for hook in self.on_deployment:
            try:
                hook(deployment)
            except Exception:  # one component's failure must not keep the others behind
                log.exception("taking up %s failed in %r", deployment.label, hook)

    def checks_behind(self) -> str | None:
        """Why this worker cannot check a send or an HTTP call now, or ``None``: it could
        not load the newest deployment, whose permissions, budgets and breakers may be
        tighter than the ones it runs. Those checks fail closed until it can."""
        failed = self.deployments.failed if self.deployments is not None else None
        if failed is None:
            return None
        return (
            f"this worker could not load deployment {failed[0]}, the newest, and runs "
            f"{self.deployment.label}: it checks no send or http call against older "
            "permissions, budgets and breakers (see rflow deployments)"
        )

    async def catch_up(self) -> None:
        """Take up a newer deployment now, if there is one (a workflow was not found):
        another worker may have taken it up first and let a firing of it through. Gives
        up after :data:`CATCH_UP_TIMEOUT` (Postgres away), leaving the caller to refuse."""
        if self.deployments is None:
            return
        try:
            async with asyncio.timeout(CATCH_UP_TIMEOUT):
                await self.deployments.refresh()
        except TimeoutError:
            log.warning("no newer deployment could be looked up within %ss", CATCH_UP_TIMEOUT)


class RflowTopic(faust.Topic):
    """A Faust topic that can name itself when it reads several topics.

    ``faust agents`` asks each agent's channel for one topic name, which Faust refuses
    for the runner's channel (it reads triggers and runs together); the joined names
    answer instead. A comma cannot be part of a Kafka topic name, so nothing can produce
    to the joined name by mistake.
    """

    def get_topic_name(self) -> str:
        if not self.pattern and self.topics and len(self.topics) > 1:
            return ", ".join(self.topics)
        return super().get_topic_name()


class DrainingBuffer(ProducerBuffer):
    """Faust's producer buffer, with a flush that returns only when it is empty.

    Table writes (the journal) wait in this buffer until a task hands them to the Kafka
    client. Faust flushes it before committing consumer offsets and before giving up
    partitions, but its flush returns after 0.1 s without progress, and does not count
    the message being handed over: offsets could then be committed, or a partition
    handed to another worker, before the writes of the events they cover were sent.
    The new owner would recover a table without them and never see those events again.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        self.handing_over = 0

    async def _send_pending(self, fut) -> None:
        self.handing_over += 1
        try:
            await super()._send_pending(fut)
        finally:
            self.handing_over -= 1

    async def flush(self) -> None:
        while self.size or self.handing_over:
            if self.should_stop and not self.handing_over:
                # The buffer's own task has ended (the worker is stopping): hand over
                # what is left, in order.
                await self._send_pending(self.pending.get_nowait())
                continue
            self.message_sent.clear()
            try:
                async with asyncio.timeout(1.0):
                    await self.message_sent.wait()
            except TimeoutError:
                continue


FETCH_MAX_WAIT_MS = 50
"""How long the broker may hold a fetch with nothing new. The fetcher leaves out of its
next request every partition whose records the worker has not taken yet, and sends no
other request to that broker meanwhile: Faust's 1.5 s let records of such a partition
(the relayer's, while the runner's partitions were quiet) wait that long to be read."""


class RflowConsumerThread(aiokafka_driver.AIOKafkaConsumerThread):
    """Faust's consumer thread, with a short fetch wait (:data:`FETCH_MAX_WAIT_MS`)."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Faust passes its own value and no setting reaches it; the fetcher reads this
        # attribute when the consumer starts.
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer


class RflowConsumer(aiokafka_driver.Consumer):
    """Faust's consumer, reading a partition its group never committed from the start.

    After a rebalance Faust seeks every assigned partition to its committed offset, but
    leaves a partition with none (or with 0) wherever the fetcher had got to. Records
    fetched while the rebalance suspended the flow are dropped unprocessed, so on such a
    partition they would be skipped for good: a fresh topic's first firings could be
    lost while a second worker joins. Those partitions go back to their first offset,
    which is what the group's ``earliest`` reset policy means.
    """

    def _new_consumer_thread(self) -> RflowConsumerThread:
        return RflowConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def seek_to_committed(self):
        committed = await super().seek_to_committed()
        changelogs = self.app.tables.changelog_topics
        fresh = [
            tp for tp, offset in committed.items() if not offset and tp.topic not in changelogs
        ]
        if fresh:
            await self._thread.seek_to_beginning(*fresh)
        return committed

    _reading_again: asyncio.Future | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rereading: dict[Any, int] = {}
        """Partitions being read again, from the first offset skipped: records after it
        wait for it, so a partition's records are still handled in order."""
        self.deliver = self.callback
        self.callback = self.in_order

    async def in_order(self, message: Any) -> None:
        """Hand ``message`` on, unless it is ahead of records being read again."""
        first = self.rereading.get(message.tp)
        if first is not None:
            if message.offset > first:
                # Ahead of the records read again: it comes back after them.
                self.read_again()
                return
            del self.rereading[message.tp]
        await self.deliver(message)

    async def on_partitions_revoked(self, revoked: Any) -> None:
        for tp in revoked:
            self.rereading.pop(tp, None)
        await super().on_partitions_revoked(revoked)

    def read_again(self) -> None:
        """Go back to the committed offsets, after the fetcher's current record."""
        if self._reading_again is None or self._reading_again.done():
            self._reading_again = asyncio.ensure_future(self._read_again())

    async def _add_gap(self, tp, offset_from: int, offset_to: int) -> None:
        """A jump in a partition's offsets, which Faust counts as read.

        On a compacted changelog that is right. On rflow's streams offsets are contiguous
        (no compaction, no transactions), so a jump means records were fetched and dropped
        around a rebalance (a seek to the committed offsets racing the fetcher): counting
        them as read would lose them. They are not counted; positions go back to the
        committed offsets, which cannot pass a record never processed, and the records are
        read again (the ones read since arrive twice, which every agent handles).
        """
        if tp.topic in self.app.tables.changelog_topics:
            await super()._add_gap(tp, offset_from, offset_to)
            return
        log.warning(
            "offsets %d..%d of %s[%d] were skipped by the fetcher: reading them again",
            offset_from,
            offset_to - 1,
            tp.topic,
            tp.partition,
        )
        self._read_from(tp, offset_from)

    def _new_offset(self, tp):
        """The offset to commit for ``tp``: Faust's, unless it would pass a record never
        acknowledged.

        Faust commits the first consecutive run of acknowledged offsets, and lets that run
        start one past the committed offset (or anywhere while the committed offset is 0):
        the record at the committed offset, if it was dropped unprocessed around a
        rebalance and its successors were acknowledged, would be committed past and lost.
        On rflow's streams, once the group has a committed offset, a commit must start at
        it; when the record there is missing the partition is read again from it instead.
        """
        acked = self._acked[tp]
        committed = self._committed_offset[tp]
        # (No gaps to weigh: on these topics _add_gap never records one.)
        if acked and committed is not None and tp.topic not in self.app.tables.changelog_topics:
            head = min(acked)
            if head > committed:
                log.warning(
                    "%s[%d]: offsets %d..%d were never acknowledged: reading them again",
                    tp.topic,
                    tp.partition,
                    committed,
                    head - 1,
                )
                self._read_from(tp, committed)
                return None
        return super()._new_offset(tp)

    def records_dropped(self, events: list[Any]) -> None:
        """A flow resume emptied a stream's queue: read each partition of rflow's
        streams again from the first record thrown away, holding back the ones after."""
        first: dict[Any, int] = {}
        for event in events:
            message = getattr(event, "message", None)
            if message is None or message.topic in self.app.tables.changelog_topics:
                continue
            first[message.tp] = min(message.offset, first.get(message.tp, message.offset))
        assigned = self.assignment()
        for tp, offset in first.items():
            if tp in assigned:
                log.info(
                    "%s[%d]: records from offset %d were dropped by a flow resume: "
                    "reading them again",
                    tp.topic,
                    tp.partition,
                    offset,
                )
                self._read_from(tp, offset)

    def _read_from(self, tp, offset: int) -> None:
        """Read ``tp`` again from ``offset`` on, holding back the records after it."""
        self.rereading[tp] = min(offset, self.rereading.get(tp, offset))
        self.read_again()

    async def _read_again(self) -> None:
        await asyncio.sleep(0)  # after the fetcher's current record
        try:
            await self.perform_seek()
        except Exception as exc:  # a rebalance under way seeks everything itself
            log.warning("reading skipped records again failed: %r", exc)
            return
        for tp, first in list(self.rereading.items()):
            # The group committed past the first skipped record: nothing to wait for.
            if (self._committed_offset.get(tp) or 0) > first:
                del self.rereading[tp]


class ClearedQueue(ThrowableQueue):
    """Faust's flow-controlled queue, telling ``dropped`` which events a clear threw away."""

    def __init__(self, *args: Any, dropped: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dropped = dropped

    def clear(self) -> None:
        events = list(self._queue)  # type: ignore[attr-defined]
        super().clear()
        if events:
            self.dropped(events)


class RflowApp(faust.App):
    """A Faust app carrying rflow's :class:`Runtime` as ``app.rflow``."""

    rflow: Runtime
    before_revoke: list[Callable[[], Awaitable[None]]]
    """Called first when a rebalance revokes partitions, before Faust stops the streams
    and flushes the producer: whatever writes tables outside an agent stops here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before_revoke = []

    async def _on_partitions_revoked(self, revoked: Any) -> None:
        if not self.should_stop:
            for hook in self.before_revoke:
                await hook()
        await super()._on_partitions_revoked(revoked)

    def FlowControlQueue(
        self, maxsize: int | None = None, *, clear_on_resume: bool = False
    ) -> ThrowableQueue:
        """Faust's queue of a stream or channel, which a flow resume empties.

        Faust resumes the flow several times in one rebalance, the last time after it has
        sought the streams to their committed offsets and resumed fetching: records
        fetched in between are thrown away, though the fetcher counts them as read. On
        rflow's streams those records are read again, and the ones after them wait
        (:meth:`RflowConsumer.records_dropped`), so nothing is lost or taken out of order.
        """
        return ClearedQueue(
            maxsize=maxsize,
            flow_control=self.flow_control,
            clear_on_resume=clear_on_resume,
            dropped=lambda events: self.consumer.records_dropped(events),
        )

    def keep_changelog_records(self) -> None:
        """Never throw away changelog records a flow resume finds queued.

        Recovery would wait forever for records thrown away after it sought a changelog
        partition back (it reads each partition once, to its end), and a standby would
        keep a hole. Applying a record queued before a seek is harmless: a changelog is
        read in order, and every record after it is applied again.
        """
        self.tables._changelog_queue = ThrowableQueue(
            maxsize=self.conf.stream_buffer_maxsize, flow_control=self.flow_control
        )

    def _new_consumer(self):
        return RflowConsumer(
            self.transport,
            callback=self.topics.on_message,
            on_partitions_revoked=self._on_partitions_revoked,
            on_partitions_assigned=self._on_partitions_assigned,
            beacon=self.beacon,
            loop=self.transport.loop,
        )

    def _new_producer(self):
        producer = super()._new_producer()
        buffer = DrainingBuffer(loop=producer.loop, beacon=producer.beacon)
        buffer.app = self
        producer.buffer = buffer
        return producer

    def declared_topic(self, name: str, **kwargs) -> faust.TopicT:
        """A handle on topic ``name`` of ``topics.yaml`` (prefix applied); raw bytes by default."""
        catalog = self.rflow.catalog
        spec = catalog.spec(name)
        options = {
            "key_type": bytes,
            "value_type": bytes,
            "key_serializer": "raw",
            "value_serializer": "raw",
            **kwargs,
        }
        return self.topic(
            catalog.full_name(name),
            partitions=spec.partitions,
            replicas=spec.replication_factor,
            config=spec.configs,
            **options,
        )


def create_app(settings: Settings | None = None, project: Project | None = None) -> RflowApp:
    """Build the app with every agent, table and page attached.

    The workflows come from ``project``, else from ``settings.project_path`` (whose
    source the worker deploys as it starts); then the worker follows the newest
    deployment (:mod:`rflow.streams.deployments`). A worker without workflows still runs
    the pipeline (records for workflows it does not run are dead-lettered). Two
    principals with the same token raise :class:`~rflow.principals.TokenConflict`; the
    API authenticates the principals of the current deployment.
    """
    settings = settings or Settings.from_env()
    env = environ()
    source = None
    if project is None and settings.project_path is not None:
        source, report = read_source(settings.project_path, env)
        if report.project is None or not report.ok:
            raise ConfigError(report.diagnostics)
        project = report.project
    catalog = Catalog.from_settings(settings)
    codec = table_codec.register()
    partitions = catalog.spec("rflow.triggers").partitions
    from rflow import console
    from rflow.streams import api, ingress_views

    def public(path: str) -> bool:  # the console signs its visitors in itself
        return (
            path in api.PUBLIC
            or console.owns(path)
            or ingress_views.is_webhook(path, runtime.webhook_paths)
        )

    principals = Principals.of(project, env, settings.api_token)
    for name, variable in principals.unset:
        log.warning("principal %s cannot authenticate: %s is not set", name, variable)
    known: dict[int, Principals] = {id(project): principals}

    def current_principals() -> Principals:
        """The principals of the project this worker runs now (a deploy may change them)."""
        project_now = runtime.current_project()
        found = known.get(id(project_now))
        if found is None:
            try:
                found = Principals.of(project_now, env, settings.api_token)
            except TokenConflict as exc:  # refused when deployed; keep who could sign in
                log.error("the deployed principals are not taken up: %s", exc)
                found = known[next(iter(known))]
            known.clear()
            known[id(project_now)] = found
        return found

    app = RflowApp(
        settings.app_id,
        broker=[f"kafka://{host}" for host in settings.kafka_brokers.split(",")],
        store="memory://",
        autodiscover=False,
        topic_partitions=partitions,
        topic_replication_factor=catalog.spec("rflow.triggers").replication_factor,
        key_serializer="raw",
        value_serializer=codec,
        broker_session_timeout=settings.broker_session_timeout,
        broker_heartbeat_interval=settings.broker_heartbeat_interval,
        stream_processing_timeout=settings.stream_processing_timeout,
        producer_acks=-1,
        web_host="127.0.0.1",
        web_port=settings.web_port,
        web_bind="127.0.0.1",
        datadir=str(settings.data_dir),
        # One event at a time per partition keeps per-group order; effects run as tasks.
        stream_buffer_maxsize=1024,
        Topic=RflowTopic,
        web_application_options={
            "middlewares": [
                api.json_errors,
                api.authenticator(current_principals, public),
                ingress_views.declared_paths(lambda: runtime.webhooks),
            ]
        },
    )
    app.rflow = runtime = Runtime(
        settings, catalog, Deployment.of(project, digest=source.digest if source else None), env
    )
    runtime.topics = Topics(
        triggers=app.declared_topic("rflow.triggers"),
        runs=app.declared_topic("rflow.runs"),
        sends=app.declared_topic("rflow.sends"),
        events=app.declared_topic("rflow.events"),
        dlq=app.declared_topic("rflow.dlq"),
    )

    runtime.tables = tables.create(app)
    app.keep_changelog_records()
    runtime.database = app.add_dependency(Database(settings))
    from rflow.ingress.scheduler import SchedulerService

    app.add_dependency(SchedulerService(app))
    from rflow.ingress.chain_service import ChainIngressService

    app.add_dependency(ChainIngressService(app))

    from rflow import agents
    from rflow.streams import deployments, metrics

    runtime.deployments = deployments.Deployments(runtime, source)
    deployments.attach(app, runtime.deployments)
    runtime.metrics = metrics.attach(app)
    agents.attach(app)
    views.attach(app)
    producer = ingress_views.attach(app)
    database = runtime.database

    async def operate(work):
        return await database.run(work, what="operator action")

    control = Control(operate, producer, runtime.current_project)
    api.attach(app, control)
    console.attach(app, control, current_principals)
    return app


def tune_gc() -> None:
    """Fewer, cheaper collections for a long-lived worker.

    Objects alive after start-up (modules, the project, the app) are moved out of the
    collector's view, and young generations collect less often: full collections
    of a large run table otherwise pause the event loop for a hundred milliseconds.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def __getattr__(name: str) -> RflowApp:
    # `faust -A rflow.streams.app` looks up `app`; building it on first access keeps
    # importing this module free of side effects (tests build their own apps).
    if name == "app":
        global app
        app = create_app()
        tune_gc()
        return app
    raise AttributeError(name)
