"""``rflow runs``: list, inspect, answer and cancel runs."""

from __future__ import annotations

import asyncio
import getpass
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from rflow.cli import main
from rflow.cli.common import fail, operate, project_option, table, with_database
from rflow.settings import Settings


def _json(value: Any) -> str:
    return json.dumps(
        value, indent=2, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v)
    )


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


@main.group()
def runs() -> None:
    """Runs: their status, journals, approvals and cancellation."""


@runs.command("list")
@click.option("--workflow", "-w", default=None, help="Only runs of this workflow.")
@click.option("--status", "-s", default=None, help="running, succeeded, failed, cancelled...")
@click.option("--failed", is_flag=True, help="Only failed runs (the dead-letter queue).")
@click.option("--limit", default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def list_runs(
    workflow: str | None, status: str | None, failed: bool, limit: int, as_json: bool
) -> None:
    """The newest runs."""
    from rflow.storage import runs as store

    rows = asyncio.run(
        with_database(
            lambda conn: store.list_runs(
                conn, workflow=workflow, status="failed" if failed else status, limit=limit
            )
        )
    )
    if as_json:
        click.echo(_json(rows))
        return
    lines = [
        [r["run_id"], r["workflow"], r["status"], _when(r["created_at"]), r["error_kind"] or ""]
        for r in rows
    ]
    click.echo(table(lines, ["RUN", "WORKFLOW", "STATUS", "STARTED", "ERROR"]))


@runs.command("show")
@click.argument("run_id")
@click.option(
    "--live",
    is_flag=True,
    help="Also the run's state in the table of the worker at $RFLOW_WEB_PORT (the one "
    "holding the run's partition knows it).",
)
@click.option("--json", "as_json", is_flag=True)
def show(run_id: str, live: bool, as_json: bool) -> None:
    """One run's journal, step by step: inputs, outputs, errors and timings, and the budget
    charges of its sends."""
    run = asyncio.run(with_database(lambda conn: _run_with_charges(conn, run_id)))
    if run is None and not live:
        fail(f"no run {run_id}")
    if live:
        state = _live_state(run_id)
        if run is None and state is None:
            fail(f"no run {run_id}")
        run = {**(run or {"run_id": run_id}), "live": state}
        if not as_json:
            shown = json.dumps(state, indent=2, default=str) if state else "(not on this worker)"
            click.echo(f"live state:\n{shown}\n")
        if "steps" not in run:
            click.echo(_json(run))
            return
    if as_json:
        click.echo(_json(run))
        return
    click.echo(f"run       {run['run_id']}")
    click.echo(f"workflow  {run['workflow']} ({run['version']})")
    click.echo(f"trigger   {run['trigger_key']}")
    click.echo(
        f"status    {run['status']}"
        + (f" ({run['error_kind']}: {run['error_message']})" if run["error_kind"] else "")
    )
    click.echo(f"started   {_when(run['created_at'])}   settled {_when(run['settled_at'])}")
    click.echo("")
    rows = []
    for step in run["steps"]:
        took = ""
        if step["started_at"] and step["settled_at"]:
            took = f"{(step['settled_at'] - step['started_at']).total_seconds() * 1000:.0f} ms"
        detail = (
            f"{step['error_kind']}: {step['error_message']}"
            if step["error_kind"]
            else json.dumps(step["output"], default=str)
        )
        rows.append([step["path"], step["status"], str(step["attempt"]), took, detail[:80]])
    click.echo(table(rows, ["STEP", "STATUS", "ATTEMPT", "TOOK", "OUTPUT / ERROR"]))
    if run["charges"]:
        click.echo("")
        charges = [[c["budget"], c["asset"], str(c["amount"]), c["status"]] for c in run["charges"]]
        click.echo(table(charges, ["BUDGET", "ASSET", "AMOUNT", "STATUS"]))


def _live_state(run_id: str) -> dict[str, Any] | None:
    """The run's state as the worker at ``$RFLOW_WEB_PORT`` holds it (``None`` if it does
    not hold the run's partition)."""
    import urllib.error
    import urllib.request

    settings = Settings.from_env()
    request = urllib.request.Request(f"http://127.0.0.1:{settings.web_port}/api/runs/{run_id}")
    if settings.api_token is not None:
        request.add_header("Authorization", f"Bearer {settings.api_token.get_secret_value()}")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return json.loads(resp.read()).get("live")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        fail(f"the worker at port {settings.web_port} answered {exc.code}: {exc.read()[:200]!r}")
    except (urllib.error.URLError, OSError) as exc:
        fail(f"no worker answers on port {settings.web_port}: {exc}")


async def _run_with_charges(conn: Any, run_id: str) -> dict[str, Any] | None:
    from rflow.storage import budgets
    from rflow.storage import runs as store

    run = await store.get_run(conn, run_id)
    if run is not None:
        run["charges"] = await budgets.run_charges(conn, run_id)
    return run


def _answer(run_id: str, step: str | None, payload: dict[str, Any], as_json: bool) -> None:
    result = operate(lambda control: control.answer(run_id, step, payload))
    click.echo(
        _json(result)
        if as_json
        else f"{payload.get('decision', 'answered')}: run {run_id} step {result['step']}"
    )


@runs.command()
@click.argument("run_id")
@click.option("--step", default=None, help="The waiting step (needed when several wait).")
@click.option("--by", default=None, help="Who decides (default: the current user).")
@click.option("--choice", default=None, help="The chosen option, for a choice approval.")
@click.option("--text", default=None, help="Free text, for a freeform approval.")
@click.option("--json", "as_json", is_flag=True)
def approve(
    run_id: str,
    step: str | None,
    by: str | None,
    choice: str | None,
    text: str | None,
    as_json: bool,
) -> None:
    """Approve a run waiting for a human decision."""
    payload: dict[str, Any] = {"decision": "approve", "by": by or getpass.getuser()}
    if choice is not None:
        payload["choice"] = choice
    if text is not None:
        payload["text"] = text
    _answer(run_id, step, payload, as_json)


@runs.command()
@click.argument("run_id")
@click.option("--step", default=None, help="The waiting step (needed when several wait).")
@click.option("--by", default=None, help="Who decides (default: the current user).")
@click.option("--json", "as_json", is_flag=True)
def reject(run_id: str, step: str | None, by: str | None, as_json: bool) -> None:
    """Reject a run waiting for a human decision (its step fails)."""
    _answer(run_id, step, {"decision": "reject", "by": by or getpass.getuser()}, as_json)


@runs.command()
@click.argument("run_id")
@click.option("--reason", default="cancelled by an operator", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def cancel(run_id: str, reason: str, as_json: bool) -> None:
    """Cancel a run at its next step boundary (finally steps still run)."""
    result = operate(lambda control: control.cancel(run_id, reason))
    if as_json:
        click.echo(_json(result))
        return
    click.echo(f"cancel requested: run {run_id}")
    for send_id in result["pending_sends"]:
        click.echo(
            f"its send {send_id} is pending: the run stops once it settles; "
            f"`rflow sends cancel {send_id}` stops it sooner"
        )


@runs.command()
@click.argument("run_id")
@project_option
@click.option("--json", "as_json", is_flag=True)
def retry(run_id: str, project: Path | None, as_json: bool) -> None:
    """Fire a dead-lettered run's trigger again, as a new run linked to the old one."""
    from rflow.lang import ConfigError, load_project
    from rflow.settings import environ

    path = project or Settings.from_env().project_path
    if path is None:
        fail("no project: give --project or set RFLOW_PROJECT (the workflow's definition)")
    try:
        loaded = load_project(path, environ())
    except ConfigError as exc:
        fail(f"{path} has {len(exc.diagnostics)} problems; run rflow validate {path}")
    result = operate(lambda control: control.retry(run_id), loaded)
    click.echo(_json(result) if as_json else f"retried {run_id} as {result['retried_as']}")
