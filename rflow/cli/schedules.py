"""``rflow schedules``: list the schedules, disable and enable one."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import click

from rflow.cli import main
from rflow.cli.common import current_principal, deployed_project, fail, needs, table, with_database


@main.group()
def schedules() -> None:
    """Schedules: when each fires next, how its runs went; disable and enable them."""


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ") if value else "-"


def _json(value: Any) -> str:
    return json.dumps(
        value, indent=2, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v)
    )


async def _project(conn: Any) -> Any:
    project = await deployed_project(conn)
    if project is None:
        fail("nothing is deployed, or the newest deployment does not load with this environment")
    return project


@schedules.command("ls")
@click.option("--workflow", "-w", default=None, help="Only this workflow's schedules.")
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read")
def list_schedules(workflow: str | None, as_json: bool) -> None:
    """Each schedule of the newest deployment: its cron, whether it fires (and who
    disabled it), its next and last fire times, its consecutive failures and last error."""
    from rflow import schedules as view

    async def work(conn: Any) -> list[dict[str, Any]]:
        project = await _project(conn)
        if workflow is not None and workflow not in project.workflows:
            fail(f"no workflow {workflow!r} is deployed")
        rows = await view.listing(conn, project, datetime.now(UTC))
        return [row for row in rows if workflow is None or row["workflow"] == workflow]

    rows = asyncio.run(with_database(work))
    if not rows:
        fail("no schedule is deployed" + (f" for {workflow}" if workflow else ""))
    if as_json:
        click.echo(_json(rows))
        return
    lines = [
        [
            r["workflow"],
            r["trigger"],
            r["cron"],
            r["timezone"],
            r["state"],
            _when(r["next_fire"]),
            _when(r["last_fire"]),
            r["consecutive_failures"],
            (r["last_error"] or "-")[:80],
        ]
        for r in rows
    ]
    header = [
        "WORKFLOW",
        "TRIGGER",
        "CRON",
        "TZ",
        "STATE",
        "NEXT FIRE",
        "LAST FIRE",
        "FAILURES",
        "LAST ERROR",
    ]
    click.echo(table(lines, header))


@schedules.command()
@click.argument("workflow")
@click.option("--trigger", "-t", default=None, help="The schedule's trigger id (if several).")
@click.option("--reason", default=None, help="Why (default: disabled by <your principal>).")
@click.option("--json", "as_json", is_flag=True)
@needs("schedules.toggle", ("workflow", "workflow"))
def disable(workflow: str, trigger: str | None, reason: str | None, as_json: bool) -> None:
    """Disable WORKFLOW's schedule: it fires nothing until enabled (the workflow's other
    triggers still fire; fire times skipped meanwhile never fire)."""
    from rflow import schedules as view

    by = current_principal().name

    async def work(conn: Any) -> dict[str, Any]:
        project = await _project(conn)
        try:
            return await view.disable(
                conn, project, workflow, trigger, by=by, reason=reason or f"disabled by {by}"
            )
        except view.ScheduleError as exc:
            fail(str(exc))

    done = asyncio.run(with_database(work))
    if as_json:
        click.echo(_json(done))
        return
    note = f" ({done['note']})" if done["note"] else ""
    click.echo(f"disabled schedule {done['trigger']} of {workflow}: it fires nothing{note}")


@schedules.command()
@click.argument("workflow")
@click.option("--trigger", "-t", default=None, help="The schedule's trigger id (if several).")
@click.option("--json", "as_json", is_flag=True)
@needs("schedules.toggle", ("workflow", "workflow"))
def enable(workflow: str, trigger: str | None, as_json: bool) -> None:
    """Enable WORKFLOW's schedule again: it fires from now on, never the times it skipped."""
    from rflow import schedules as view

    async def work(conn: Any) -> dict[str, Any]:
        project = await _project(conn)
        try:
            return await view.enable(conn, project, workflow, trigger, at=datetime.now(UTC))
        except view.ScheduleError as exc:
            fail(str(exc))

    done = asyncio.run(with_database(work))
    if as_json:
        click.echo(_json(done))
        return
    click.echo(
        f"enabled schedule {done['trigger']} of {workflow}: next fire {_when(done['next_fire'])}"
    )
