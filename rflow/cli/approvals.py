"""``rflow approvals``: the inbox of pending approvals, and answering them as a principal.

The CLI acts as the principal whose token it holds: ``RFLOW_CLI_TOKEN``, else
``RFLOW_API_TOKEN`` (the built-in ``operator``). A token other than the operator's is
resolved against the ``principals`` of the newest deployment (before anything is
deployed, of ``--project`` or ``$RFLOW_PROJECT``), each read from the variable its
``token_env`` names (:func:`rflow.cli.common.acting_principal`). The answer records that
principal; there is no way to name another.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from rflow.cli import main
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


def _json(value: Any) -> str:
    return json.dumps(
        value, indent=2, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v)
    )


def _refuse_by(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        raise click.UsageError(
            "--by is gone: an answer is recorded as the principal whose token the CLI holds "
            "(RFLOW_CLI_TOKEN, else RFLOW_API_TOKEN as 'operator')"
        )


_by_refused = click.option(
    "--by", hidden=True, expose_value=False, callback=_refuse_by, help="No longer accepted."
)


def _decide(
    decision: str,
    run_id: str,
    step: str | None,
    choice: str | None,
    text: str | None,
    as_json: bool,
) -> None:
    principal = current_principal()
    result = operate(
        lambda control: control.decide(
            run_id, step, decision, principal, choice=choice, text=text, via="cli"
        )
    )
    if as_json:
        click.echo(_json(result))
    else:
        done = {"approve": "approved", "reject": "rejected"}[decision]
        note = f" ({text})" if text else ""
        click.echo(f"{done} as {principal.name}: run {run_id} step {result['step']}{note}")


def approve_command(group: click.Group, name: str = "approve") -> Callable[..., None]:
    """Attach ``approve`` to ``group`` (``rflow approvals`` and ``rflow runs`` both have it)."""

    @group.command(name)
    @click.argument("run_id")
    @click.option("--step", default=None, help="The waiting step (needed when several wait).")
    @click.option("--choice", default=None, help="The chosen option's value (choice approvals).")
    @click.option("--text", default=None, help="The answer of a freeform approval, or a note.")
    @project_option
    @_by_refused
    @click.option("--json", "as_json", is_flag=True)
    @needs("approvals.answer", ("run", "run_id"))
    def approve(
        run_id: str,
        step: str | None,
        choice: str | None,
        text: str | None,
        project: Path | None,
        as_json: bool,
    ) -> None:
        """Approve a run waiting for a human decision, as the CLI's principal."""
        _decide("approve", run_id, step, choice, text, as_json)

    return approve


def reject_command(group: click.Group, name: str = "reject") -> Callable[..., None]:
    """Attach ``reject`` to ``group``."""

    @group.command(name)
    @click.argument("run_id")
    @click.option("--step", default=None, help="The waiting step (needed when several wait).")
    @click.option("--text", default=None, help="Why (kept with the answer).")
    @project_option
    @_by_refused
    @click.option("--json", "as_json", is_flag=True)
    @needs("approvals.answer", ("run", "run_id"))
    def reject(
        run_id: str, step: str | None, text: str | None, project: Path | None, as_json: bool
    ) -> None:
        """Reject a run waiting for a human decision, as the CLI's principal (the run ends
        rejected, or goes where the step's on_reject says)."""
        _decide("reject", run_id, step, None, text, as_json)

    return reject


@main.group()
def approvals() -> None:
    """Approvals: the inbox of pending decisions, and answering them."""


def _pending(**filters: Any) -> list[dict[str, Any]]:
    from rflow import approvals as inbox
    from rflow.storage import waits

    async def read(conn: Any) -> list[dict[str, Any]]:
        if filters.get("workflow") is not None:
            await known_workflow(conn, filters["workflow"])
        return await waits.pending_approvals(conn, **filters)

    rows = asyncio.run(with_database(read))
    return [inbox.inbox_entry(row) for row in rows]


@approvals.command("ls")
@click.option("--workflow", "-w", default=None, help="Only approvals of this workflow.")
@click.option("--mine", is_flag=True, help="Only those the CLI's principal may answer.")
@project_option
@click.option("--limit", default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read")
def list_approvals(
    workflow: str | None, mine: bool, project: Path | None, limit: int, as_json: bool
) -> None:
    """Every pending approval, most urgent first (urgent, high, normal, low), then by
    deadline."""
    approver = current_principal().name if mine else None
    found = _pending(workflow=workflow, approver=approver, limit=limit)
    if as_json:
        click.echo(_json(found))
        return
    rows = [
        [
            a["priority"],
            _short(a["deadline"]) + (" (escalated)" if a["escalated_at"] else ""),
            a["run_id"],
            a["workflow"],
            a["step"],
            ",".join(a["approvers"]) or "anyone",
            a["prompt"][:60],
        ]
        for a in found
    ]
    click.echo(
        table(rows, ["PRIORITY", "DEADLINE", "RUN", "WORKFLOW", "STEP", "APPROVERS", "PROMPT"])
    )


@approvals.command("show")
@click.argument("run_id")
@click.option("--step", default=None, help="The waiting step (when several wait).")
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read", ("run", "run_id"))
def show_approval(run_id: str, step: str | None, as_json: bool) -> None:
    """One pending approval: its prompt, context, choices, approvers and deadline."""
    found = [a for a in _pending(run_id=run_id, limit=1000) if step in (None, a["step"])]
    if not found:
        where = f" at step {step!r}" if step else ""
        fail(f"run {run_id} has no pending approval{where}")
    if as_json:
        click.echo(_json(found if len(found) > 1 else found[0]))
        return
    for index, entry in enumerate(found):
        if index:
            click.echo("")
        _print(entry)


def _print(entry: dict[str, Any]) -> None:
    click.echo(f"run       {entry['run_id']}")
    click.echo(f"workflow  {entry['workflow']}")
    click.echo(f"step      {entry['step']}")
    click.echo(f"type      {entry['type']}")
    click.echo(f"priority  {entry['priority']}")
    deadline = _short(entry["deadline"])
    if entry["escalated_at"]:
        deadline += f" (escalated {_short(entry['escalated_at'])})"
    click.echo(f"deadline  {deadline}")
    click.echo(f"approvers {', '.join(entry['approvers']) or 'any principal'}")
    click.echo(f"prompt    {entry['prompt']}")
    if entry["choices"]:
        click.echo("choices")
        for option in entry["choices"]:
            label, value = option["label"], option["value"]
            click.echo(f"  {label}" if label == value else f"  {label} ({value})")
    if entry["context"]:
        click.echo("context")
        for name, value in entry["context"].items():
            click.echo(f"  {name}: {json.dumps(value, default=str)}")


def _short(value: str | None) -> str:
    return value[:19].replace("T", " ") if value else "-"


approve_command(approvals)
reject_command(approvals)
