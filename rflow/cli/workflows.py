"""``rflow workflow``: list the project's workflows, pause and resume them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click

from rflow.cli import main
from rflow.cli.common import current_principal, fail, needs, project_option, table, with_database
from rflow.settings import Settings, environ


@main.group()
def workflow() -> None:
    """Workflows: list them, pause and resume them."""


@workflow.command("ls")
@project_option
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read")
def list_workflows(project: Path | None, as_json: bool) -> None:
    """Each workflow of the project, its triggers and whether it is paused.

    The project is PATH (--project, $RFLOW_PROJECT), else the newest deployment.
    """
    from rflow.lang import ConfigError, ProjectSource, load_project
    from rflow.storage import controls, deployments

    path = project or Settings.from_env().project_path

    async def read(conn: Any) -> tuple[Any, Any]:
        latest = await deployments.latest_id(conn)
        stored = await deployments.get(conn, latest) if latest is not None else None
        return await controls.paused(conn), stored

    paused, stored = asyncio.run(with_database(read))
    if path is not None:
        try:
            loaded = load_project(path, environ())
        except ConfigError as exc:
            fail(f"{path} has {len(exc.diagnostics)} problems; run rflow validate {path}")
    elif stored is not None:
        report = ProjectSource.from_document(stored.source).validate(environ())
        if report.project is None or not report.ok:
            fail(
                f"deployment {stored.id} does not load with this environment "
                f"({len(report.errors)} errors); give the project with --project"
            )
        loaded = report.project
    else:
        fail("no project: give --project or set RFLOW_PROJECT (nothing is deployed yet)")
    rows = []
    for name, definition in loaded.workflows.items():
        trigger = ", ".join(definition.trigger_kinds)
        state = (
            "paused (definition)"
            if definition.paused
            else ("paused " + " ".join(filter(None, paused[name])) if name in paused else "active")
        )
        rows.append({"workflow": name, "trigger": trigger, "state": state})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    lines = [[row["workflow"], row["trigger"], row["state"]] for row in rows]
    click.echo(table(lines, ["WORKFLOW", "TRIGGERS", "STATE"]))
    if stored is not None:
        listed = f"the project at {path}" if path is not None else f"deployment {stored.id}"
        click.echo(
            f"\nlisted: {listed}; newest deployment: {stored.id}; which deployment each "
            "worker runs: rflow deployments"
        )


async def _known(conn, name: str) -> str:
    """What a pause does to the firings of ``name`` (``held`` or ``skipped``, by its
    deployed definition's ``paused_firings``); exits with the reason unless it is deployed."""
    from rflow.storage import versions

    deployed = await versions.current(conn)
    if name not in deployed:
        known = ", ".join(sorted(deployed)) or "none"
        fail(f"no workflow {name!r} is deployed (deployed: {known})")
    stored = await versions.definition(conn, deployed[name])
    mode = (stored[1] if stored is not None else {}).get("paused_firings", "hold")
    return "skipped" if mode == "skip" else "held"


def _announce(name: str, *, paused: bool) -> None:
    """Tell the workers through the triggers topic before answering (see
    :func:`rflow.streams.control.announce`); a refusal fails the command with why."""
    from rflow.settings import Settings
    from rflow.streams.control import ControlError, announce
    from rflow.streams.producer import ProduceError, Producer

    async def tell() -> None:
        async with Producer(Settings.from_env()) as producer:
            await announce(producer, name, paused=paused)

    try:
        asyncio.run(tell())
    except (ControlError, ProduceError) as exc:
        fail(str(exc))


@workflow.command()
@click.argument("name")
@click.option("--reason", default=None, help="Why (default: paused by <your principal>).")
@click.option("--json", "as_json", is_flag=True)
@needs("workflows.pause", ("workflow", "name"))
def pause(name: str, reason: str | None, as_json: bool) -> None:
    """Pause NAME: its firings are held (or skipped, with paused_firings: skip) until it is
    resumed; runs in flight go on."""
    from rflow.storage import controls

    by = current_principal().name
    reason = reason or f"paused by {by}"

    async def work(conn):
        firings = await _known(conn, name)
        before = (await controls.paused(conn)).get(name)
        await controls.pause(conn, name, by=by, reason=reason)
        return firings, before

    firings, before = asyncio.run(with_database(work))
    _announce(name, paused=True)
    if as_json:
        document = {"workflow": name, "paused": True, "reason": reason, "firings": firings}
        click.echo(json.dumps({**document, "was_paused_by": before[0] if before else None}))
    elif before:
        click.echo(f"paused {name} (it was paused already, by {before[0]})")
    elif firings == "skipped":
        click.echo(
            f"paused {name}: its firings are skipped (paused_firings: skip) until it is resumed"
        )
    else:
        click.echo(f"paused {name}: its firings are held until it is resumed")


@workflow.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@needs("workflows.pause", ("workflow", "name"))
def resume(name: str, as_json: bool) -> None:
    """Resume NAME after a pause (an operator's, on_failure: halt, or a breaker's): the
    firings held meanwhile start, in the order they arrived."""
    from rflow.storage import controls

    async def work(conn):
        firings = await _known(conn, name)
        return firings, await controls.resume(conn, name)

    firings, resumed = asyncio.run(with_database(work))
    if not resumed:
        fail(
            f"workflow {name} was not paused (by an operator, a halt or a breaker): nothing to resume"
        )
    _announce(name, paused=False)
    if as_json:
        click.echo(json.dumps({"workflow": name, "paused": False}))
    elif firings == "skipped":
        click.echo(f"resumed {name}: new firings start (those of the pause were skipped)")
    else:
        click.echo(f"resumed {name}: its held firings start in the order they arrived")
