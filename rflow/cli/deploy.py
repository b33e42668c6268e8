"""``rflow deploy``: validate a project and publish it to every worker; ``rflow
deployments``: which deployment each worker runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click

from rflow.cli import main
from rflow.cli.common import fail, needs, table, with_database
from rflow.settings import environ

STALE_AFTER = 30.0
"""Seconds without a report after which a worker is shown as gone."""


def actor() -> str:
    """Who publishes from this process, as the deployment records it."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = "unknown"
    return f"rflow deploy ({user}@{socket.gethostname()})"


@main.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--rollback",
    is_flag=True,
    help="Publish PATH even though it is an older deployment's project: going back, "
    "recorded as the action deploy.rollback.",
)
@click.option(
    "--backtest",
    "backtest_since",
    default=None,
    metavar="DURATION",
    help="First replay the firings of this long back (7d) through PATH beside the deployed "
    "version (rflow backtest), and ask before deploying when money would move differently.",
)
@click.option(
    "--yes", is_flag=True, help="Deploy without asking, whatever the backtest found (scripts)."
)
@click.option("--json", "as_json", is_flag=True)
@needs("deploy", when={"rollback": "deploy.rollback"})
def deploy(
    path: Path, rollback: bool, backtest_since: str | None, yes: bool, as_json: bool
) -> None:
    """Validate the project at PATH, then publish it as the new deployment.

    Every worker takes it up within seconds, without a restart: new workflows start
    firing, removed ones stop (their firings are refused), changed ones start new runs
    with their new version while a run in flight keeps its own; every send is checked
    against the new permissions, budgets and breakers. Publishing the deployed project
    again changes nothing. Deployments move forward: a project that is an older
    deployment's (by its content, against the order of deployments) is published only
    with --rollback. Exits 1, publishing nothing, when PATH has errors or is older.

    With --backtest, the report of the backtest comes first; when the new version would
    move money differently (a send added, removed or changed, or another total spent)
    the deploy asks before publishing, and publishes nothing unless told yes (exit 1).
    A backtest that cannot run publishes nothing (exit 2).
    """
    from rflow.deployment import Changes, older_message, resource_changes
    from rflow.engine.keys import deployable
    from rflow.lang import ProjectSource, read_source
    from rflow.storage import deployments

    source, report = read_source(path, environ())
    if report.project is None or not report.ok:
        for diagnostic in report.errors:
            click.echo(str(diagnostic), err=True)
        raise SystemExit(1)
    definitions = deployable(report.project.workflows)
    if backtest_since is not None:
        _backtest_first(path, backtest_since, yes=yes, as_json=as_json)

    async def publish(conn: Any) -> tuple[Any, Any]:
        latest = await deployments.latest_id(conn)
        stored = await deployments.get(conn, latest) if latest is not None else None
        try:
            published = await deployments.publish(
                conn,
                digest=source.digest,
                source=source.document(),
                definitions=definitions,
                rollback=rollback,
                actor=actor(),
            )
        except deployments.Older as older:
            fail(older_message(path, older), 1)
        return published, stored

    published, stored = asyncio.run(with_database(publish))
    previous = (
        ProjectSource.from_document(stored.source).validate(environ()).project
        if stored is not None
        else None
    )
    resources = resource_changes(previous, report.project) if published.created else []
    before = published.before
    after = {name: version for name, (version, _) in definitions.items()}
    changes = Changes.between(before, after)
    rows: list[dict[str, Any]] = [
        {
            "workflow": name,
            "version": version,
            "previous": before.get(name),
            "changed": before.get(name) != version,
        }
        for name, version in sorted(after.items())
    ]
    rows += [
        {"workflow": name, "version": None, "previous": before[name], "changed": True}
        for name in changes.removed
    ]
    summary = (
        f"deployment {published.id}: {changes.summary()}"
        if published.created
        else f"deployment {published.id} is this project already: nothing new to take up"
    )
    if published.action == deployments.ROLLBACK:
        summary = f"rolled back: {summary} (deploy.rollback from deployment {stored.id})"
    check = (
        "workers take it up within seconds; see which deployment each one runs with "
        "`rflow deployments` (or GET /healthz on a worker)"
    )
    if resources:
        summary += "; " + "; ".join(resources)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        click.echo(f"{summary}; {check}", err=True)
        return
    lines = [[row["workflow"], row["version"] or "-", _deployed(row)] for row in rows]
    click.echo(table(lines, ["WORKFLOW", "VERSION", "DEPLOYED"]))
    click.echo(f"\n{summary}")
    if published.created:
        click.echo(check[0].upper() + check[1:] + ".")


def _backtest_first(path: Path, since: str, *, yes: bool, as_json: bool) -> None:
    """Backtest PATH over ``since`` and stop the deploy unless it may go on."""
    from rflow.backtest.report import text
    from rflow.cli.backtest import perform
    from rflow.cli.common import fail

    found, stored = perform(path, since=since)
    click.echo(text(found), err=as_json)
    if stored is not None:
        click.echo(
            f"(kept as backtest {stored}: the console's Backtests page shows it)", err=as_json
        )
    click.echo("", err=as_json)
    if found.outcome == "failed":
        fail(
            "nothing deployed: the backtest could not run (deploy without --backtest to skip it)",
            2,
        )
    if not found.money_moves or yes:
        return
    try:
        go = click.confirm(
            "Money would move differently with this version (see above). Deploy it anyway?",
            default=False,
            err=True,
        )
    except click.Abort:
        go = False
    if not go:
        fail("nothing deployed", 1)


def _deployed(row: dict[str, Any]) -> str:
    if row["version"] is None:
        return f"removed (was {row['previous']})"
    if not row["changed"]:
        return "unchanged"
    if row["previous"] is None:
        return "added"
    return f"changed (was {row['previous']})"


@main.command("deployments")
@click.option("--limit", default=5, show_default=True, help="How many deployments to list.")
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read")
def list_deployments(limit: int, as_json: bool) -> None:
    """The newest deployments, and which one each worker runs (and any it could not load)."""
    from rflow.storage import deployments

    async def read(conn: Any) -> tuple[Any, Any]:
        return await deployments.recent(conn, limit), await deployments.workers(conn)

    recent, workers = asyncio.run(with_database(read))
    if as_json:
        click.echo(
            json.dumps(
                {
                    "deployments": [
                        {
                            "id": d.id,
                            "deployed_at": d.deployed_at.isoformat(),
                            "digest": d.digest,
                            "workflows": d.versions,
                            "action": d.action,
                            "replaced": d.replaced,
                            "actor": d.actor,
                        }
                        for d in recent
                    ],
                    "workers": [
                        {
                            "worker": w.worker,
                            "app_id": w.app_id,
                            "deployment": w.deployment,
                            "failed": w.failed,
                            "error": w.error,
                            "seen_at": w.seen_at.isoformat(),
                            "gone": w.seen_ago > STALE_AFTER,
                        }
                        for w in workers
                    ],
                },
                indent=2,
            )
        )
        return
    if not recent:
        click.echo(
            "no deployment yet: `rflow deploy PATH` publishes one (a worker started "
            "with a project does too)"
        )
    else:
        lines = [
            [
                d.id,
                d.deployed_at.strftime("%Y-%m-%d %H:%M:%S"),
                f"rollback from {d.replaced}" if d.action == deployments.ROLLBACK else "deploy",
                ", ".join(sorted(d.versions)),
            ]
            for d in recent
        ]
        click.echo(table(lines, ["DEPLOYMENT", "DEPLOYED", "ACTION", "WORKFLOWS"]))
    if not workers:
        click.echo("\nno worker has reported yet")
        return
    lines = [
        [
            w.worker,
            w.app_id,
            w.deployment if w.deployment is not None else "-",
            f"{w.seen_ago:.0f}s ago" + (" (gone)" if w.seen_ago > STALE_AFTER else ""),
            f"deployment {w.failed} does not load here: {_one_line(w.error)}"
            if w.failed is not None
            else "",
        ]
        for w in workers
    ]
    click.echo("\n" + table(lines, ["WORKER", "APP", "RUNS", "SEEN", "PROBLEM"]))


def _one_line(text: str | None) -> str:
    return "; ".join(line.strip() for line in (text or "").splitlines() if line.strip())
