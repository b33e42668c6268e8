"""``rflow audit``: the audit trail of operator actions and refused attempts."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import click

from rflow.cli import main
from rflow.cli.common import fail, needs, table, with_database


@main.group()
def audit() -> None:
    """The audit trail: every operator action taken, and every attempt refused."""


@audit.command("ls")
@click.option("--principal", "-p", default=None, help="Only what this principal did or tried.")
@click.option(
    "--action",
    "-a",
    default=None,
    help="Only this action (runs.retry), or a family of actions (runs).",
)
@click.option(
    "--since",
    default=None,
    help="Only rows since a time (2026-05-06T07:08:09Z) or a duration back from now (24h).",
)
@click.option(
    "--outcome",
    type=click.Choice(["done", "failed", "refused"]),
    default=None,
    help="Only rows that ended so: done, failed (the action refused itself) or refused (the "
    "principal may not).",
)
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10000))
@click.option("--json", "as_json", is_flag=True)
@needs("audit.read")
def list_audit(
    principal: str | None,
    action: str | None,
    since: str | None,
    outcome: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """The newest rows of the audit trail first: when, who (and their role), what action
    on what target, with which arguments, how it ended (done, failed, refused) and why,
    and whether through the api, the console or the cli."""
    from rflow.audit import document, since_of, target_text
    from rflow.storage import audit as store

    try:
        after = since_of(since, datetime.now(UTC))
    except ValueError as exc:
        fail(str(exc), 2)

    async def read(conn: Any) -> list[dict[str, Any]]:
        return await store.listing(
            conn, principal=principal, action=action, since=after, outcome=outcome, limit=limit
        )

    rows = asyncio.run(with_database(read))
    if as_json:
        click.echo(json.dumps([document(row) for row in rows], indent=2))
        return
    lines = [
        [
            row["at"].strftime("%Y-%m-%d %H:%M:%S"),
            row["principal"] + (f" ({row['role']})" if row["role"] else ""),
            row["action"],
            target_text(row),
            row["outcome"],
            row["via"],
            " ".join(f"{k}={v}" for k, v in (row["arguments"] or {}).items()) or "-",
            " ".join((row["reason"] or "").split())[:100],
        ]
        for row in rows
    ]
    header = ["AT", "PRINCIPAL", "ACTION", "TARGET", "OUTCOME", "VIA", "ARGUMENTS", "REASON"]
    click.echo(table(lines, header))
