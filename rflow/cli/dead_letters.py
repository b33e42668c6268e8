"""``rflow dead-letters``: records that could not be processed; show one, replay one.

A dead-lettered *run* is a failed run: ``rflow runs list --failed`` and ``rflow runs
retry``. These are the *records* a worker could not take (``rflow.dlq``, stored in the
``dead_letters`` table), with where they came from and why.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

import click

from rflow.cli import main
from rflow.cli.common import current_principal, fail, needs, operate, table, with_database
from rflow.settings import Settings

REASON_WIDTH = 100
"""Characters of a reason ``ls`` shows; ``show`` prints it whole."""


def _when(text: str | None) -> str:
    return datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M:%S") if text else "-"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


@main.group("dead-letters")
def dead_letters() -> None:
    """Dead-lettered records: list them, show one, replay one (failed runs: rflow runs
    list --failed and rflow runs retry)."""


@dead_letters.command("ls")
@click.option(
    "--topic",
    default=None,
    help="Only records from this topic, named as the workers name it ($RFLOW_TOPIC_PREFIX"
    "rflow.triggers) or as topics.yaml declares it (rflow.triggers).",
)
@click.option("--replayed/--not-replayed", default=None, help="Only those replayed, or not.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read")
def list_letters(topic: str | None, replayed: bool | None, limit: int, as_json: bool) -> None:
    """The newest dead letters: where each record came from, why, and its replay."""
    from rflow.storage import dead_letters as store

    settings = Settings.from_env()
    full = None
    if topic is not None:
        from rflow.streams.topics import Catalog, TopicsError

        catalog = Catalog.from_settings(settings)
        try:
            full = catalog.full_name(catalog.declared(topic))
        except TopicsError as exc:
            fail(str(exc))

    async def work(conn: Any) -> list[dict[str, Any]]:
        rows = await store.listing(conn, topic=full, replayed=replayed, limit=limit)
        return [row.document() for row in rows]

    rows = asyncio.run(with_database(work, settings))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no dead letters")
        return
    lines = [
        [
            r["id"],
            r["topic"],
            f"{r['partition']}@{r['offset']}",
            _cut(r["key"] or "-", 30),
            _when(r["failed_at"]),
            _when(r["replayed_at"]),
            _cut(" ".join(r["reason"].split()), REASON_WIDTH),
        ]
        for r in rows
    ]
    header = ["ID", "TOPIC", "FROM", "KEY", "FAILED", "REPLAYED", "REASON"]
    click.echo(table(lines, header))


@dead_letters.command("show")
@click.argument("letter_id", type=int)
@click.option("--json", "as_json", is_flag=True)
@needs("runs.read", ("dead_letter", "letter_id"))
def show_letter(letter_id: int, as_json: bool) -> None:
    """One dead letter: its record whole, why it failed, and whether it can be replayed."""
    from rflow.streams.dead_letter_actions import describe

    settings = Settings.from_env()
    document = asyncio.run(
        with_database(lambda conn: describe(conn, letter_id, settings.topic_prefix), settings)
    )
    if document is None:
        fail(f"no dead letter {letter_id} (rflow dead-letters ls)")
    if as_json:
        click.echo(json.dumps(document, indent=2))
        return
    replayed = document["replayed_to"]
    fields = [
        ("dead letter", str(document["id"])),
        (
            "from",
            f"{document['topic']} partition {document['partition']} offset {document['offset']}",
        ),
        ("key", document["key"] if document["key"] is not None else "(none)"),
        ("failed", _when(document["failed_at"])),
        ("reason", document["reason"]),
        (
            "replayed",
            f"{_when(document['replayed_at'])} (partition {replayed['partition']}, offset "
            f"{replayed['offset']})"
            if replayed
            else "no",
        ),
        (
            "replay",
            f"rflow dead-letters replay {letter_id}"
            if document["replayable"]
            else f"no: {document['why_not']}",
        ),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        click.echo(f"{name.ljust(width)}  {value}")
    click.echo(f"\nrecord ({document['size']} bytes):")
    click.echo(_pretty(document["record"]))


def _pretty(raw: str) -> str:
    try:
        return json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    except ValueError:
        return raw


@dead_letters.command("replay")
@click.argument("letter_id", type=int)
@click.option("--json", "as_json", is_flag=True)
@needs("dead_letters.replay", ("dead_letter", "letter_id"))
def replay_letter(letter_id: int, as_json: bool) -> None:
    """Produce a dead letter's record back to its topic, under its key, once.

    Refused, with the reason, when the stored record is not the original (cut, or bytes
    that were not UTF-8), would be dead-lettered again (it does not decode, its workflow
    is not deployed, its key is not its group), or was replayed already. A firing
    replayed twice still starts one run: the triggers gate admits it once.
    """
    by = current_principal().name
    done = operate(lambda control: control.dead_letters.replay(letter_id, by=by))
    if as_json:
        click.echo(json.dumps(done, indent=2))
        return
    where = f"{done['topic']} under key {done['key']!r} (partition {done['partition']}, offset {done['offset']})"
    if done["record"] in ("trigger", "retry"):
        click.echo(
            f"dead letter {letter_id}: the {done['record']} of workflow {done['workflow']} "
            f"produced back to {where}; the triggers gate admits {done['gate']!r} once: "
            f"rflow runs show {done['run_id']}"
        )
    else:
        click.echo(f"dead letter {letter_id}: the {done['record']} record produced back to {where}")
