"""The Faust application: built from :class:`~rflow.settings.Settings` and ``topics.yaml``.

``faust -A rflow.streams.app worker`` and ``rflow worker`` both run the module-level
:data:`app`, built from the environment. Tests build their own with
:func:`create_app` and a fresh topic prefix and app id.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import faust

from rflow import workers
from rflow.codecs import tables as table_codec
from rflow.deployment import Deployment
from rflow.lang import ConfigError, Project, read_source
from rflow.principals import Principals, TokenConflict
from rflow.secrets import process_secrets, scrub_logs
from rflow.settings import Settings, environ
from rflow.streams import consumption, kafka, tables, views
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
    sweeper: Any = None
    """The :class:`~rflow.agents.expiry.Sweeper` that forgets what the window no longer covers."""
    metrics: Any = None
    deployments: Any = None
    """The :class:`~rflow.streams.deployments.Deployments` that publishes and follows."""
    webhooks: Any = None
    """The :class:`~rflow.ingress.WebhookIngress` of the web server."""
    consumption: consumption.Consumption | None = None
    """How the agents take their records (:mod:`rflow.streams.consumption`)."""
    rpc: Any = None
    """The :class:`~rflow.ingress.pool.Pools`: each network's endpoints, shared by the
    relayer and the chain reads of this worker."""
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

    async def start(self) -> None:
        """What a worker settles before it takes a record: that it can check the proofs of
        rflow's ingress (``RFLOW_INGRESS_KEYS``), and which deployment it runs
        (:meth:`Deployments.start`: its own project, or the newest when its own is older).
        Raises :class:`~rflow.settings.SettingsError` with the reason: the worker stops."""
        self.settings.require_ingress_keys()
        if self.database is not None:
            await self.database.maybe_start()  # before the app's services, which need it too
        if self.deployments is not None:
            await self.deployments.start()

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


class RflowApp(consumption.ConsumingApp):
    """A Faust app carrying rflow's :class:`Runtime` as ``app.rflow``."""

    rflow: Runtime

    async def on_start(self) -> None:
        await super().on_start()
        if not (self.producer_only or self.client_only):
            # Before any consumer or agent starts: nothing is decided with a project this
            # worker will not run.
            await self.rflow.start()

    def declared_topic(self, name: str, **kwargs) -> faust.TopicT:
        """A handle on topic ``name`` of ``topics.yaml`` (prefix applied); raw bytes by default."""
        catalog = self.rflow.catalog
        spec = catalog.spec(name)
        options = {
            # Offsets of rflow's topics are committed by the consumption layer.
            "acks": False,
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


def store_url(settings: Settings) -> str:
    """The Faust store of the tables that ``settings.table_store`` asks for."""
    choice = settings.table_store
    if choice == "auto":
        try:
            import rocksdict  # noqa: F401
        except ImportError:
            log.warning(
                "RFLOW_TABLE_STORE=auto: rocksdict does not import here, so the tables are kept "
                "in memory and rebuilt from their changelogs at every start"
            )
            choice = "memory"
        else:
            choice = "rocksdb"
    return f"{choice}://"


def create_app(
    settings: Settings | None = None, project: Project | None = None, *, rollback: bool = False
) -> RflowApp:
    """Build the app with every agent, table and page attached.

    The workflows come from ``project``, else from ``settings.project_path`` (whose
    source the worker deploys as it starts, unless it is an older deployment's: then it
    runs the newest, or with ``rollback`` deploys it as the operator's action
    ``deploy.rollback``); then the worker follows the newest deployment
    (:mod:`rflow.streams.deployments`). A worker without workflows still runs
    the pipeline (records for workflows it does not run are dead-lettered). Two
    principals with the same token raise :class:`~rflow.principals.TokenConflict`; the
    API authenticates the principals of the current deployment.
    """
    consumption.check_internals()
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
        **kafka.faust_options(settings),
        # Kafka's tools list the group's members by client id: it names host and port.
        broker_client_id=workers.client_id(socket.gethostname(), settings.web_port),
        store=store_url(settings),
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
                api.authenticator(current_principals, public, lambda: control.gate),
                ingress_views.declared_paths(lambda: runtime.webhooks),
            ]
        },
    )
    app.rflow = runtime = Runtime(
        settings, catalog, Deployment.of(project, digest=source.digest if source else None), env
    )
    # Every log line of the worker, whatever library writes it, is scrubbed of the
    # secret-bearing settings and of every variable the deployment names.
    scrub_logs(process_secrets(settings, project, env))
    runtime.on_deployment.append(
        lambda deployment: scrub_logs(process_secrets(settings, deployment.project, env))
    )
    runtime.topics = Topics(
        triggers=app.declared_topic("rflow.triggers"),
        runs=app.declared_topic("rflow.runs"),
        sends=app.declared_topic("rflow.sends"),
        events=app.declared_topic("rflow.events"),
        dlq=app.declared_topic("rflow.dlq"),
    )
    runtime.consumption = consumption.attach(
        app,
        [topic.get_topic_name() for topic in vars(runtime.topics).values()],
        joined=[catalog.full_name("rflow.triggers"), catalog.full_name("rflow.runs")],
        # Of the topics read, only the runs' journals are written in transactions.
        marked=[catalog.full_name("rflow.events")],
    )
    runtime.tables = tables.create(app)
    runtime.consumption.on_close.append(runtime.tables.forget)

    async def recovered(partitions: frozenset[int]) -> None:
        # What was read (or found missing) before the tables' recovery wrote these
        # partitions is stale: a new host asks for held firings while it recovers.
        runtime.tables.forget()

    runtime.consumption.on_open.insert(0, recovered)
    runtime.database = app.add_dependency(Database(settings))
    from rflow.ingress.scheduler import SchedulerService

    app.add_dependency(SchedulerService(app))
    from rflow.ingress.chain_service import ChainIngressService

    app.add_dependency(ChainIngressService(app))
    from rflow.streams.scrape_targets import ScrapeTarget

    app.add_dependency(ScrapeTarget(settings))

    from rflow import agents
    from rflow.streams import deployments, metrics
    from rflow.streams.nodes import Nodes

    runtime.deployments = deployments.Deployments(runtime, source, rollback=rollback)
    deployments.attach(app, runtime.deployments)
    runtime.metrics = metrics.attach(app)
    runtime.rpc = app.add_dependency(Nodes(runtime)).pools
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


YOUNG_GC_THRESHOLD = 2_000
"""Allocations between two collections of the youngest generation. Each collection
pauses the event loop for as long as it takes to look at what was allocated since the
last one and is still alive: at 50,000 a collection paused it for 23-67 ms every few
seconds (records fetched meanwhile waited, the slowest runs' latency), at 2,000 for
about 1 ms, and the collector's time in all was lower (bench_pipeline --diagnose)."""


def tune_gc() -> None:
    """Short, cheap collections for a long-lived worker.

    Objects alive after start-up (modules, the project, the app) are moved out of the
    collector's view, and the older generations collect less often than Python's
    defaults (full collections of a large run table otherwise pause the event loop for a
    hundred milliseconds); the youngest collects every :data:`YOUNG_GC_THRESHOLD`
    allocations, so that no collection pauses it for long.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GC_THRESHOLD, 20, 100)


def __getattr__(name: str) -> RflowApp:
    # `faust -A rflow.streams.app` looks up `app`; building it on first access keeps
    # importing this module free of side effects (tests build their own apps).
    if name == "app":
        global app
        app = create_app()
        tune_gc()
        return app
    raise AttributeError(name)
