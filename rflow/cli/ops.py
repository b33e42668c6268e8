"""Operating commands: topics, migrations and the worker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from rflow.cli import main
from rflow.cli.common import fail, with_database
from rflow.settings import Settings


@main.group()
def topics() -> None:
    """Kafka topics declared in topics.yaml."""


@topics.command("apply")
@click.option("--dry-run", is_flag=True, help="Report what would be created; change nothing.")
@click.option("--json", "as_json", is_flag=True)
def topics_apply(dry_run: bool, as_json: bool) -> None:
    """Create missing topics; refuse a topic whose partition count differs from the file."""
    from rflow.streams import topics as topic_ops

    settings = Settings.from_env()
    try:
        result = asyncio.run(topic_ops.apply(settings, dry_run=dry_run))
    except topic_ops.TopicsError as exc:
        fail(str(exc))
    if as_json:
        document = {
            "dry_run": dry_run,
            "created": list(result.created),
            "unchanged": list(result.unchanged),
            "warnings": list(result.fewer_copies),
        }
        click.echo(json.dumps(document, indent=2))
        return
    verb = "would create" if dry_run else "created"
    for name in result.created:
        click.echo(f"{verb}  {name}")
    for name in result.unchanged:
        click.echo(f"ok       {name}")
    click.echo(f"{len(result.created)} {verb}, {len(result.unchanged)} unchanged")
    for warning in result.fewer_copies:
        click.echo(f"warning: {warning}", err=True)


@main.group()
def kafka() -> None:
    """Kafka security: the ACLs rflow's principals need."""


@kafka.command("acls")
@click.option(
    "--principal",
    default="User:rflow",
    show_default=True,
    help="The principal rflow's workers (and CLI) connect as.",
)
@click.option(
    "--producer",
    "producers",
    multiple=True,
    metavar="PRINCIPAL",
    help="An outside producer's principal, allowed to write trigger records (repeatable).",
)
@click.option(
    "--bootstrap-server",
    default=None,
    help="The brokers kafka-acls connects to (default: $RFLOW_KAFKA_BROKERS).",
)
@click.option(
    "--command-config",
    default="admin.properties",
    show_default=True,
    help="kafka-acls' client config: an administrator's connection (SASL_SSL, its password).",
)
@click.option("--json", "as_json", is_flag=True)
def kafka_acls(
    principal: str,
    producers: tuple[str, ...],
    bootstrap_server: str | None,
    command_config: str,
    as_json: bool,
) -> None:
    """Print the kafka-acls commands that give rflow's PRINCIPAL exactly what it needs
    (its topics under $RFLOW_TOPIC_PREFIX, its consumer group and transactional ids,
    both $RFLOW_APP_ID), and each --producer only writing to the triggers topic."""
    from rflow.streams import kafka as client

    settings = Settings.from_env()
    bootstrap = bootstrap_server or settings.kafka_brokers
    grants = [(principal, acl) for acl in client.worker_acls(settings)]
    grants += [(who, acl) for who in producers for acl in client.producer_acls(settings)]
    if as_json:
        rows = [
            {
                "principal": who,
                "resource": acl.resource,
                "name": acl.name,
                "pattern": acl.pattern,
                "operations": list(acl.operations),
                "why": acl.why,
                "command": acl.command(who, bootstrap, command_config),
            }
            for who, acl in grants
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    for who, acl in grants:
        click.echo(f"# {who}: {acl.why}")
        click.echo(acl.command(who, bootstrap, command_config))


@main.command()
@click.option("--json", "as_json", is_flag=True)
def migrate(as_json: bool) -> None:
    """Apply the database migrations (idempotent)."""
    settings = Settings.from_env()
    applied = asyncio.run(_migrate(settings))
    if as_json:
        click.echo(json.dumps({"schema": settings.database_schema, "applied": applied}, indent=2))
        return
    for name in applied:
        click.echo(f"applied  {name}")
    click.echo(f"schema {settings.database_schema!r} is up to date ({len(applied)} applied now)")


async def _migrate(settings: Settings) -> list[str]:
    from rflow import storage

    async def migrate(conn) -> list[str]:
        try:
            return await storage.migrate(conn, settings.database_schema)
        except storage.StorageError as exc:
            fail(str(exc))

    return await with_database(migrate, settings)


@main.command()
@click.argument("project", required=False, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--setup/--no-setup", default=True, help="Apply topics and migrations first (the default)."
)
@click.option(
    "--rollback",
    is_flag=True,
    help="Deploy PROJECT even if it is an older deployment's project (an operator's "
    "action, recorded as deploy.rollback); without it such a worker runs the newest.",
)
@click.option("-l", "--loglevel", default="info", show_default=True)
def worker(project: Path | None, setup: bool, rollback: bool, loglevel: str) -> None:
    """Run a worker for the workflows in PROJECT (default: $RFLOW_PROJECT), as one member
    of the consumer group. A PROJECT that is an older deployment's is not deployed (that
    would roll every worker back): the worker runs the newest deployment, unless told
    --rollback."""
    settings = Settings.from_env()
    if project is not None:
        settings = settings.model_copy(update={"project_path": project})
    settings.require_ingress_keys()
    if settings.project_path is not None:
        from rflow.lang import validate_path
        from rflow.settings import environ

        report = validate_path(settings.project_path, environ())
        for diagnostic in report.diagnostics:
            click.echo(str(diagnostic), err=True)
        if not report.ok:
            fail(f"{settings.project_path} has errors; the worker does not start")
    if setup:
        from rflow.streams import topics as topic_ops

        try:
            applied = asyncio.run(topic_ops.apply(settings))
        except topic_ops.TopicsError as exc:
            fail(str(exc))
        for warning in applied.fewer_copies:
            click.echo(f"warning: {warning}", err=True)
        asyncio.run(_migrate(settings))
    use_event_loop(settings.event_loop)
    from rflow.principals import TokenConflict
    from rflow.streams.app import create_app, store_url, tune_gc

    if store_url(settings).startswith("rocksdb"):
        _hold_data_dir(settings)

    try:
        app = create_app(settings, rollback=rollback)
    except TokenConflict as exc:
        fail(f"{exc}; the worker does not start")
    tune_gc()
    app.main_worker = True
    from faust.worker import Worker

    Worker(app, loglevel=loglevel).execute_from_commandline()


_HELD: list[object] = []


def _hold_data_dir(settings: Settings) -> None:
    """Hold the data directory for this process (until it exits): a second worker on the
    same directory would wait on its RocksDB databases' locks, then crash."""
    import fcntl

    directory = settings.data_dir.resolve()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = (directory / f"{settings.app_id}.lock").open("a")
    except OSError as exc:
        fail(f"RFLOW_DATA_DIR {directory} cannot hold the worker's tables: {exc}")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fail(
            f"RFLOW_DATA_DIR {directory} is in use by another worker of {settings.app_id} on "
            "this host: give each worker a data directory of its own"
        )
    _HELD.append(lock)


def use_event_loop(choice: str) -> None:
    """Make ``choice`` (``RFLOW_EVENT_LOOP``) the worker's event loop (its agents and its
    Kafka consumer run on it)."""
    if choice == "asyncio":
        return
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            fail("RFLOW_EVENT_LOOP=uvloop, but uvloop is not installed (pip install uvloop)")
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
