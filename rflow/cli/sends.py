"""``rflow sends``: the pending transactions, and speeding one up or cancelling it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click

from rflow.cli import main
from rflow.cli.common import (
    current_principal,
    deployed_project,
    fail,
    needs,
    operate,
    table,
    with_database,
)

WAIT_HELP = "Seconds to wait for the worker that owns the send's relayer to carry it out."


def _amount(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """A fee per gas: ``30 gwei``, ``2.5gwei``, or an integer of wei."""
    from rflow.lang import UnitError
    from rflow.lang.units import parse_amount

    if value is None:
        return None
    try:
        return parse_amount(value)
    except UnitError as exc:
        raise click.BadParameter(str(exc)) from None


def _age(seconds: float) -> str:
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole // 60 % 60:02d}m"
    return f"{whole // 86400}d{whole // 3600 % 24:02d}h"


@main.group()
def sends() -> None:
    """Pending transactions: list them, speed one up, cancel one.

    A send is named by its id (as `rflow sends ls` shows it), its send key, or the hash of
    any of its transactions.
    """


@sends.command("ls")
@click.option("--network", default=None, help="Only sends on this network.")
@click.option("--relayer", default=None, help="Only sends of this relayer.")
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read")
def list_sends(network: str | None, relayer: str | None, as_json: bool) -> None:
    """The sends not settled yet, in nonce order per relayer and network, with the fees of
    their latest transaction (max fee / tip), their age and how many transactions each has
    signed (bumps and speed-ups included)."""
    from rflow.relayer.fees import gwei
    from rflow.storage import sends as store
    from rflow.streams.send_actions import deferral_document, pending_document

    async def read(conn: Any) -> list[dict[str, Any]]:
        found = await store.pending(conn, network=network, relayer=relayer)
        if found or (network is None and relayer is None):
            return found
        # Nothing pending: say so only of names that exist (deployed, or that ever sent).
        project = await deployed_project(conn)
        for what, name, declared in (
            ("network", network, project.networks if project else {}),
            ("relayer", relayer, project.relayers if project else {}),
        ):
            if (
                name is not None
                and name not in declared
                and not await store.ever(conn, **{what: name})
            ):
                known = ", ".join(sorted(declared)) or "none deployed"
                fail(f"no {what} {name!r}: the deployed project has {known}, and none sent")
        return found

    async def read_all(conn: Any) -> tuple[list[dict[str, Any]], list[Any]]:
        relayers = [relayer] if relayer is not None else None
        deferred = await store.deferrals(conn, network=network, relayers=relayers)
        return await read(conn), deferred

    found, deferred = asyncio.run(with_database(read_all))
    rows = [pending_document(row) for row in found]
    waiting = [deferral_document(row) for row in deferred]
    if as_json:
        click.echo(json.dumps(rows + waiting, indent=2))
        return
    if waiting:
        click.echo("not signed yet (each waits for the base fee to fall under its cap):")
        for row in waiting:
            click.echo(f"{row['id']} run {row['run_id']} step {row['step']}: {row['waiting_for']}")
        click.echo("")
    if not rows:
        click.echo("no pending sends")
        return
    lines = [
        [
            row["id"],
            row["relayer"],
            row["network"],
            str(row["nonce"]),
            gwei(row["max_fee_per_gas"]),
            gwei(row["max_priority_fee_per_gas"]),
            _age(row["age_seconds"]),
            str(row["attempts"]),
            row["run_id"] or "-",
            row["step"] or "-",
            row["state"],
        ]
        for row in rows
    ]
    header = [
        "ID", "RELAYER", "NETWORK", "NONCE", "MAX FEE", "TIP", "AGE", "ATTEMPTS", "RUN",
        "STEP", "STATE",
    ]  # fmt: skip
    click.echo(table(lines, header))
    for row in rows:
        if row["waiting_for"]:
            click.echo(f"{row['id']} waits: {row['waiting_for']}")


@sends.command()
@click.argument("send")
@click.option(
    "--max-fee",
    callback=_amount,
    help="Max fee per gas, e.g. '40 gwei' (default: 12.5 % more than now, or what the "
    "network asks if higher, up to the send's fee cap).",
)
@click.option(
    "--tip",
    callback=_amount,
    help="Priority fee per gas, e.g. '2 gwei' (default: 12.5 % more than now, or what the "
    "network asks if higher).",
)
@click.option(
    "--above-cap",
    is_flag=True,
    help="Allow a max fee above the send's fee cap (its step's max_fee_per_gas, else four "
    "times its first fee).",
)
@click.option("--wait", default=30.0, show_default=True, type=click.FloatRange(0.1), help=WAIT_HELP)
@click.option("--json", "as_json", is_flag=True)
@needs("sends.speedup", ("send", "send"))
def speedup(
    send: str,
    max_fee: int | None,
    tip: int | None,
    above_cap: bool,
    wait: float,
    as_json: bool,
) -> None:
    """Replace a pending send's transaction with one paying more, at the same nonce.

    Both fees must be at least 10 % above the current transaction's (what a node asks
    to replace it). Whichever transaction of the send is mined settles it.
    """
    by = current_principal().name
    result = operate(
        lambda control: control.sends.speedup(
            send, max_fee=max_fee, tip=tip, above_cap=above_cap, wait=wait, by=by
        )
    )
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(
        f"send {result['id']}: speed-up signed as transaction {result['tx_hash']} "
        f"({_fees(result)}), {_answer(result)}; whichever of the send's transactions is "
        "mined settles it"
    )


@sends.command()
@click.argument("send")
@click.option("--wait", default=30.0, show_default=True, type=click.FloatRange(0.1), help=WAIT_HELP)
@click.option("--json", "as_json", is_flag=True)
@needs("sends.cancel", ("send", "send"))
def cancel(send: str, wait: float, as_json: bool) -> None:
    """Cancel a pending send: a zero-value transfer to the relayer itself takes its nonce,
    paying more than the send (or what the network asks, if higher).

    Once that transfer is mined the step fails with kind cancelled (its run is cancelled,
    finally steps still run) and its budget reservations are released; if the send's own
    transaction is mined first, that outcome stands.
    """
    by = current_principal().name
    result = operate(lambda control: control.sends.cancel(send, wait=wait, by=by))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(
        f"send {result['id']}: cancel signed as transaction {result['tx_hash']}, a "
        f"zero-value self-transfer ({_fees(result)}), {_answer(result)}; the send settles "
        "cancelled once that is mined, or keeps its own outcome if it is mined first"
    )


def _fees(result: dict[str, Any]) -> str:
    from rflow.relayer.fees import gwei

    if result["max_fee_per_gas"] is None:
        return f"nonce {result['nonce']}"
    return (
        f"nonce {result['nonce']}, max fee {gwei(result['max_fee_per_gas'])}, "
        f"tip {gwei(result['max_priority_fee_per_gas'])}"
    )


def _answer(result: dict[str, Any]) -> str:
    return result["broadcast"] or "its broadcast not answered yet (the relayer retries it)"
