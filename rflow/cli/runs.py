"""``rflow runs``: list, inspect, answer and cancel runs."""

from __future__ import annotations

import asyncio
import json
import shutil
import textwrap
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import click

from rflow import authz, runtree
from rflow.cli import main
from rflow.cli.approvals import approve_command, reject_command
from rflow.cli.common import (
    current_principal,
    fail,
    known_workflow,
    needs,
    operate,
    project_option,
    table,
    with_database,
)
from rflow.engine.statuses import RunStatus
from rflow.settings import Settings


def _json(value: Any) -> str:
    return json.dumps(
        value, indent=2, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v)
    )


def _duration(span: timedelta) -> str:
    """``850 ms``, ``12.4 s``, ``3 m 05 s``, ``2 h 10 m``."""
    seconds = span.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {rest:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} m"


def _run_duration(run: dict[str, Any]) -> str:
    """From its start to its settling; ``-`` for a run not started or not settled."""
    if run.get("started_at") and run.get("settled_at"):
        return _duration(run["settled_at"] - run["started_at"])
    return "-"


def _wrapped(text: str, width: int, most: int | None) -> list[str]:
    """``text`` in lines of ``width``; past ``most`` lines, a last line saying how much
    more ``--full`` prints."""
    lines = textwrap.wrap(text, width, break_long_words=True, replace_whitespace=False) or [""]
    if most is None or len(lines) <= most:
        return lines
    hidden = len(text) - sum(len(line) for line in lines[:most])
    return [*lines[:most], f"... {hidden} more characters (--full prints them)"]


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


@main.group()
def runs() -> None:
    """Runs: their status, journals, approvals and cancellation (approve and reject are
    the same commands as rflow approvals approve|reject)."""


@runs.command("list")
@click.option("--workflow", "-w", default=None, help="Only runs of this workflow.")
@click.option(
    "--status",
    "-s",
    default=None,
    help="pending (admitted, not started), running, waiting (parked in an approval, a wait "
    "or a delay), succeeded, failed, cancelled, skipped, rejected.",
)
@click.option(
    "--source",
    default=None,
    type=click.Choice(["event", "webhook", "schedule", "manual", "workflow"]),
    help="Only runs fired by this kind of trigger.",
)
@click.option(
    "--failed",
    is_flag=True,
    help="Only dead-lettered runs (the dead-letter queue; failed runs of on_failure: drop "
    "or halt are not in it: --status failed lists every failed run).",
)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read")
def list_runs(
    workflow: str | None,
    status: str | None,
    source: str | None,
    failed: bool,
    limit: int,
    as_json: bool,
) -> None:
    """The newest runs; a pending or waiting run says what it waits for."""
    from rflow.storage import runs as store

    known = [str(s) for s in RunStatus]
    if status is not None and status not in known:
        fail(f"unknown status {status!r}: one of {', '.join(known)}")
    if failed and status not in (None, "failed"):
        fail(f"--failed lists failed runs; it cannot go with --status {status}")

    async def work(conn: Any) -> list[dict[str, Any]]:
        if workflow is not None:
            await known_workflow(conn, workflow)
        return await store.list_runs(
            conn, workflow=workflow, status=status, source=source, dead=failed, limit=limit
        )

    rows = asyncio.run(with_database(work))
    if as_json:
        click.echo(_json(rows))
        return
    lines = [
        [
            r["run_id"],
            r["workflow"],
            r["status"],
            r["source"] or "-",
            _when(r["created_at"]),
            _run_duration(r),
            r["error_kind"] or _pending_note(r),
        ]
        for r in rows
    ]
    header = ["RUN", "WORKFLOW", "STATUS", "SOURCE", "STARTED", "DURATION", "ERROR / WAITING FOR"]
    click.echo(table(lines, header))


def _pending_note(run: dict[str, Any]) -> str:
    """What a pending or waiting run waits for, in a few words."""
    if run["status"] == "pending":
        return f"{run['pending_reason']}: {run['waiting_for']}"
    if run["status"] == "waiting" and run["waiting_for"]:
        return run["waiting_for"]
    return ""


@runs.command("show")
@click.argument("run_id")
@click.option(
    "--live",
    is_flag=True,
    help="Also the run's state in the table of the worker that owns its partition (found "
    "from the workers' reports, else the one at $RFLOW_WEB_PORT).",
)
@click.option(
    "--full", is_flag=True, help="Print outputs and errors whole (default: wrapped, 4 lines)."
)
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read", ("run", "run_id"))
def show(run_id: str, live: bool, full: bool, as_json: bool) -> None:
    """One run's journal, step by step: inputs, outputs, errors and timings, and the budget
    charges of its sends."""
    may_answer = authz.decide(current_principal(), "approvals.answer").allowed
    base = Settings.from_env().base_url
    run = asyncio.run(with_database(lambda conn: _run_with_charges(conn, run_id, base, may_answer)))
    if run is None and not live:
        fail(f"no run {run_id}")
    if live:
        state, source, note = _live(run_id, run)
        if run is None and state is None:
            fail(f"no run {run_id}")
        run = {**(run or {"run_id": run_id}), "live": state, "live_from": source}
        if not as_json:
            if state is not None:
                click.echo(f"live state ({note}):\n{json.dumps(state, indent=2, default=str)}\n")
            else:
                click.echo(f"live state: {note}\n")
        if "steps" not in run:
            click.echo(_json(run))
            return
    if as_json:
        click.echo(_json(run))
        return
    click.echo(f"run       {run['run_id']}")
    click.echo(f"workflow  {run['workflow']} ({run['version']})")
    click.echo(f"trigger   {run['trigger_key']}" + (f" ({run['source']})" if run["source"] else ""))
    click.echo(
        f"status    {run['status']}"
        + (f" ({run['error_kind']}: {run['error_message']})" if run["error_kind"] else "")
    )
    if run["status"] in ("pending", "waiting"):
        click.echo(f"waiting   {_pending_note(run)}")
    for wait in run.get("webhook_waits") or ():
        click.echo(f"resume    POST {wait['resume_url']}  ({wait['step']}, auth {wait['auth']})")
    if run.get("webhook_waits") is None and run["status"] == "waiting":
        click.echo("resume    (a webhook wait's URL is shown to principals who may answer)")
    if run["retry_of"]:
        click.echo(f"retry of  {run['retry_of']}")
    if run["retried_as"]:
        by = f" by {run['retried_by']}" if run.get("retried_by") else ""
        click.echo(f"retried   as {run['retried_as']}{by}")
    if run.get("parent_run_id"):
        click.echo(f"called by {run['parent_run_id']} at step {run['parent_step']}")
    for child in run.get("children") or ():
        click.echo(
            f"child run {child['run_id']} ({child['workflow']}, {child['status']}) "
            f"of step {child['parent_step']}"
        )
    click.echo(
        f"admitted  {_when(run['created_at'])}   started {_when(run['started_at'])}   "
        f"settled {_when(run['settled_at'])}"
    )
    if run["started_at"] and run["settled_at"]:
        click.echo(f"duration  {_run_duration(run)}")
    click.echo("")
    width = max(40, shutil.get_terminal_size((120, 24)).columns - 48)
    rows = []
    for row in runtree.rows(run["steps"]):
        step = row.step
        detail = (
            f"{step['error_kind']}: {step['error_message']}"
            if step["error_kind"]
            else json.dumps(step["output"], default=str)
        )
        child = runtree.child_link(step)
        if child:
            detail = f"child run {child}: {detail}"
        lines = _wrapped(detail, width, None if full else 4)
        name = "  " * row.depth + row.label
        rows.append([name, step["status"], str(step["attempt"]), _took(step), lines[0]])
        rows.extend(["", "", "", "", line] for line in lines[1:])
    click.echo(table(rows, ["STEP", "STATUS", "ATTEMPT", "TOOK", "OUTPUT / ERROR"]))
    if run["sends"]:
        click.echo("")
        lines = [
            [s["send_id"], s["step"] or "-", str(s["nonce"]), s["tx_hash"], s["status"]]
            for s in run["sends"]
        ]
        click.echo(table(lines, ["SEND", "STEP", "NONCE", "TRANSACTION", "STATUS"]))
        for send in run["sends"]:
            if send["status"] == "pending" and send["waiting_for"]:
                click.echo(f"{send['send_id']} waits: {send['waiting_for']}")
    for send in run["deferred_sends"]:
        click.echo(f"{send['id']} ({send['step']}) waits: {send['waiting_for']}")
    if run["charges"]:
        click.echo("")
        charges = [[c["budget"], c["asset"], str(c["amount"]), c["status"]] for c in run["charges"]]
        click.echo(table(charges, ["BUDGET", "ASSET", "AMOUNT", "STATUS"]))
    if run.get("send_controls"):
        click.echo("")
        asked = [
            [_when(c["requested_at"]), c["send_id"], c["action"], c["requested_by"] or "-",
             c["status"]]
            for c in run["send_controls"]
        ]  # fmt: skip
        click.echo(table(asked, ["ASKED", "SEND", "ACTION", "BY", "OUTCOME"]))
    for fork in runtree.forks(run["steps"]):
        click.echo("")
        click.echo(fork.title)
        click.echo(_side_by_side(fork))


def _took(step: dict[str, Any]) -> str:
    if step["started_at"] and step["settled_at"]:
        return f"{(step['settled_at'] - step['started_at']).total_seconds() * 1000:.0f} ms"
    return ""


def _side_by_side(fork: Any) -> str:
    """A parallel's or race's branches as columns: name (the winner marked), status,
    attempts, time, and why a cancelled one stopped."""
    columns = []
    for branch in fork.branches:
        name = branch["path"] + (" (winner)" if branch["path"] == fork.winner else "")
        attempts = f"{branch['attempt']} attempt{'s' if branch['attempt'] != 1 else ''}"
        why = branch["error_message"] if branch["status"] in ("cancelled", "failed") else ""
        columns.append([name, branch["status"], attempts, _took(branch) or "-", why or ""])
    if not columns:
        return "  (no branch started)"
    lines = []
    widths = [min(max(len(cell) for cell in column), 40) for column in columns]
    for index in range(5):
        cells = [
            column[index][:40].ljust(width) for column, width in zip(columns, widths, strict=True)
        ]
        if any(cell.strip() for cell in cells):
            lines.append("  " + " | ".join(cells).rstrip())
    return "\n".join(lines)


def _live(
    run_id: str, run: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str]:
    """The run's live state, from the worker that owns its partition of ``rflow.runs``
    (as the workers report it) when that worker is on this host, else from the one at
    ``$RFLOW_WEB_PORT``; which worker answered (or owns it); and a note saying so."""
    import socket

    from rflow import workers
    from rflow.storage import deployments
    from rflow.streams.topics import Catalog

    settings = Settings.from_env()
    owner = where = None
    if run is not None:
        topic = settings.topic_prefix + "rflow.runs"
        count = Catalog.from_settings(settings).spec("rflow.runs").partitions
        partition = workers.partition_of(workers.run_key(run), count)
        reports = asyncio.run(with_database(deployments.workers, settings))
        owner = workers.owner(reports, settings.app_id, topic, partition)
        where = f"partition {partition} of {topic}"
    if owner is None:
        state = _live_state(run_id, settings.web_port)
        asked = {"worker": f"127.0.0.1:{settings.web_port}", "owner": None}
        if state is not None:
            return state, asked, f"from the worker at port {settings.web_port}"
        why = (
            f"no worker of group {settings.app_id!r} has reported owning {where}"
            if where
            else ("the read model has no row of it yet")
        )
        return None, asked, f"not on the worker at port {settings.web_port}; {why} (rflow workers)"
    host, _, port = owner.worker.rpartition(":")
    source = {
        "worker": owner.worker,
        "client_id": getattr(owner, "client_id", None),
        "owner": True,
        "partition": where,
    }
    if host != socket.gethostname():
        return (
            None,
            source,
            (
                f"{where} is owned by worker {owner.worker} (Kafka client "
                f"{source['client_id']}), on another host: its API answers on that host only; "
                f"ask it there with RFLOW_WEB_PORT={port} rflow runs show {run_id} --live"
            ),
        )
    state = _live_state(run_id, int(port))
    if state is None:
        return (
            None,
            source,
            (
                f"worker {owner.worker}, which owns {where}, holds no live state of it (the run "
                "has settled, or has not started)"
            ),
        )
    return state, source, f"from worker {owner.worker}, which owns {where}"


def _live_state(run_id: str, port: int) -> dict[str, Any] | None:
    """The run's state as the worker at ``port`` holds it (``None`` if it does not hold
    the run's partition)."""
    import urllib.error
    import urllib.request

    settings = Settings.from_env()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/runs/{run_id}")
    if settings.acting_token is not None:
        request.add_header("Authorization", f"Bearer {settings.acting_token.get_secret_value()}")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return json.loads(resp.read()).get("live")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        fail(f"the worker at port {port} answered {exc.code}: {exc.read()[:200]!r}")
    except (urllib.error.URLError, OSError) as exc:
        fail(f"no worker answers on port {port}: {exc}")


async def _run_with_charges(
    conn: Any, run_id: str, base: str, may_answer: bool
) -> dict[str, Any] | None:
    from rflow.storage import budgets, send_controls, sends
    from rflow.storage import runs as store
    from rflow.streams.control import resume_urls
    from rflow.streams.send_actions import deferral_document

    run = await store.get_run(conn, run_id)
    if run is not None:
        run["charges"] = await budgets.run_charges(conn, run_id)
        run["sends"] = await sends.of_run(conn, run_id)
        run["deferred_sends"] = [
            deferral_document(d) for d in await sends.deferrals(conn, run_id=run_id)
        ]
        run["send_controls"] = await send_controls.of_run(conn, run_id)
        # A resume URL answers a wait: shown to whoever may answer.
        run["webhook_waits"] = await resume_urls(conn, run_id, base) if may_answer else None
    return run


approve_command(runs)
reject_command(runs)


@runs.command()
@click.argument("run_id")
@click.argument("name")
@click.option(
    "--data", default=None, help="The signal's data, as JSON (the waiting step's output.data)."
)
@click.option("--json", "as_json", is_flag=True)
@needs("runs.signal", ("run", "run_id"))
def signal(run_id: str, name: str, data: str | None, as_json: bool) -> None:
    """Send signal NAME to a run, as the CLI's principal: the step waiting for it (wait_for:
    {signal: {name}}) takes it; with no step waiting it is kept for a later wait when the
    workflow declares signals: {NAME: {buffer: true}}, and refused otherwise."""
    try:
        value = json.loads(data) if data is not None else None
    except json.JSONDecodeError as exc:
        fail(f"--data is not JSON: {exc}")
    principal = current_principal().name
    result = operate(lambda control: control.signal(run_id, name, value, principal))
    if as_json:
        click.echo(_json(result))
    elif result["kept"]:
        click.echo(f"signal {name} kept by run {run_id} for its next wait for it (as {principal})")
    else:
        click.echo(
            f"signal {name} delivered to run {run_id} at step {result['step']} (as {principal})"
        )


@runs.command()
@click.argument("run_id")
@click.option("--reason", default=None, help="Why (the run's cancellation names you either way).")
@click.option("--json", "as_json", is_flag=True)
@needs("runs.cancel", ("run", "run_id"))
def cancel(run_id: str, reason: str | None, as_json: bool) -> None:
    """Cancel a run at its next step boundary (finally steps still run)."""
    by = current_principal().name
    result = operate(lambda control: control.cancel(run_id, reason, by))
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
@click.option(
    "--from",
    "from_step",
    default=None,
    help="Run this step and every one after it again (an earlier step than the one that "
    "failed); its sends go out again, so it needs --yes.",
)
@click.option("--yes", is_flag=True, help="Confirm sending again what --from sends again.")
@project_option
@click.option("--json", "as_json", is_flag=True)
@needs("runs.retry", ("run", "run_id"))
def retry(
    run_id: str, from_step: str | None, yes: bool, project: Path | None, as_json: bool
) -> None:
    """Continue a failed run as a new run linked to it: every step that settled keeps its
    result (a send that went out is never sent again), and the failed step and those after
    it run again. A matrix combination is retried on its own.

    (--project is not needed: the run's own pinned version is read from the database.)
    """
    who = current_principal()
    result = operate(
        lambda control: control.retry(run_id, from_step, confirm=yes, who=who, via="cli")
    )
    if as_json:
        click.echo(_json(result))
        return
    if result["already"]:
        click.echo(
            f"run {run_id} was already retried as {result['retried_as']} "
            f"({result['status']}); nothing new was started"
        )
        return
    for item in result["resends"]:
        click.echo(f"sending again: {item['path']} (was {item['tx_hash']})")
    click.echo(
        f"retried {run_id} as {result['retried_as']} from step {result['from_step']} "
        f"(keeping {len(result['kept'])} settled step(s))"
    )
