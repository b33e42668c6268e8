"""``rflow budgets ls`` and ``rflow spend``: what the budgets' caps have consumed, and what
the sends have cost."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import click

from rflow.cli import main
from rflow.cli.common import fail, needs, project_option, table, with_database
from rflow.settings import Settings, environ


def _window(ctx: click.Context, param: click.Parameter, value: str) -> timedelta | None:
    """``--window``: a duration, or ``all`` (None) for everything recorded."""
    from rflow.lang import UnitError, parse_duration

    if value == "all":
        return None
    try:
        return parse_duration(value)
    except UnitError as exc:
        raise click.BadParameter(str(exc)) from None


@main.group()
def budgets() -> None:
    """Durable spend budgets: their caps and what the window has consumed."""


@budgets.command("ls")
@project_option
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read")
def list_budgets(project: Path | None, as_json: bool) -> None:
    """Each cap of each budget in its rolling window, in raw units (wei, token units).

    consumed is reserved (sends in flight) plus spent (settled) inside the window: what
    counts against the cap now. Only the project's budgets are read (rflow validate
    checks the rest).
    """
    from rflow.lang.diagnostics import ConfigError
    from rflow.lang.sections import load_budgets
    from rflow.storage import budgets as store

    path = project or Settings.from_env().project_path
    if path is None:
        fail("no project: give --project or set RFLOW_PROJECT")
    try:
        declared = load_budgets(path, environ())
    except FileNotFoundError as exc:
        fail(str(exc), 2)
    except ConfigError as exc:
        fail(f"{path} has {len(exc.diagnostics)} problems; run rflow validate {path}", 2)
    if not declared:
        if as_json:
            click.echo("[]")
        else:
            click.echo(f"no budgets declared in {path}")
        return
    rows = asyncio.run(with_database(lambda conn: store.usage(conn, declared)))
    if as_json:
        click.echo(json.dumps([row.document() for row in rows], indent=2))
        return
    lines = [
        [
            row.budget,
            row.asset,
            str(row.cap),
            str(row.consumed),
            str(row.reserved),
            str(row.remaining),
            store.format_window(row.window),
        ]
        for row in rows
    ]
    header = ["budget", "asset", "cap", "consumed", "reserved", "remaining", "window"]
    click.echo(table(lines, header))


@main.command()
@click.option(
    "--window",
    default="24h",
    show_default=True,
    callback=_window,
    help="How far back to count, e.g. 1h or 7d; 'all' for everything recorded.",
)
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read")
def spend(window: timedelta | None, as_json: bool) -> None:
    """Gas paid and native value moved by rflow's sends, per network and relayer (wei).

    Read from the receipt-derived ledger that max_gas_spend breakers check.
    """
    from rflow.storage import budgets as store

    rows = asyncio.run(with_database(lambda conn: store.spend(conn, window=window)))
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "network": row.network,
                        "relayer": row.relayer,
                        "transactions": row.transactions,
                        "gas_spent": row.gas_cost,
                        "value_moved": row.value,
                    }
                    for row in rows
                ],
                indent=2,
            )
        )
        return
    if not rows:
        span = "ever" if window is None else f"in the last {store.format_window(window)}"
        click.echo(f"no sends recorded {span}")
        return
    lines = [
        [row.network, row.relayer, str(row.transactions), str(row.gas_cost), str(row.value)]
        for row in rows
    ]
    header = ["network", "relayer", "transactions", "gas_spent_wei", "value_moved_wei"]
    click.echo(table(lines, header))
