"""``rflow state``: a workflow's durable state, as its steps left it (read only)."""

from __future__ import annotations

import asyncio
import json
import shutil
from datetime import datetime
from typing import Any

import click

from rflow.cli import main
from rflow.cli.common import fail, needs, table, with_database


@main.command("state")
@click.argument("workflow")
@click.argument("key", required=False)
@click.option("--json", "as_json", is_flag=True)
@needs("state.read")
def show_state(workflow: str, key: str | None, as_json: bool) -> None:
    """WORKFLOW's durable state, as state_set, list_add and list_remove left it: every
    key with its value and when a step last wrote it, or KEY's value alone. Read only:
    runs read it as ${{ state.<key> }}."""
    from rflow.durable_state import StateError, read

    async def work(conn: Any) -> dict[str, Any]:
        try:
            return await read(conn, workflow, key)
        except StateError as exc:
            fail(str(exc))

    document = asyncio.run(with_database(work))
    if as_json:
        click.echo(json.dumps(document, indent=2))
        return
    if key is not None:
        click.echo(f"{workflow} state {key} ({document['type']}, written {_when(document)}):")
        click.echo(json.dumps(document["value"], indent=2, ensure_ascii=False))
        return
    keys = document["keys"]
    if not keys:
        click.echo(
            f"workflow {workflow} has no durable state yet: state_set, list_add and "
            "list_remove steps write it"
        )
        return
    width = max(30, shutil.get_terminal_size((120, 24)).columns - 60)
    click.echo(listing(workflow, keys, width))


def listing(workflow: str, keys: list[dict[str, Any]], width: int) -> str:
    """The table of ``keys``, each value cut to ``width`` characters; when one is cut, a
    last line says how to read it whole."""
    rows = [
        [entry["key"], entry["type"], _when(entry), _cut(_compact(entry["value"]), width)]
        for entry in keys
    ]
    text = table(rows, ["KEY", "TYPE", "UPDATED", "VALUE"])
    cut = [entry["key"] for entry in keys if len(_compact(entry["value"])) > width]
    if cut:
        text += (
            f"\n({', '.join(cut)} cut to fit: `rflow state {workflow} KEY` shows one whole, "
            "--json all of them)"
        )
    return text


def _when(entry: dict[str, Any]) -> str:
    return datetime.fromisoformat(entry["updated_at"]).strftime("%Y-%m-%d %H:%M:%S")


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
