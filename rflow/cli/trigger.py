"""``rflow trigger``: start a run by hand (a manual trigger firing)."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from datetime import UTC, datetime

import click

from rflow.cli import main
from rflow.settings import Settings


@main.command()
@click.argument("workflow")
@click.option("--input", "input_json", default="{}", help="The trigger payload, a JSON object.")
@click.option("--key", default=None, help="Idempotency key of this firing (default: a new one).")
@click.option("--group", default=None, help="Concurrency group (the Kafka key).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def trigger(
    workflow: str, input_json: str, key: str | None, group: str | None, as_json: bool
) -> None:
    """Fire WORKFLOW's manual trigger with --input as its payload."""
    from rflow.codecs import TriggerRecord
    from rflow.streams.producer import ProduceError, produce_trigger

    try:
        payload = json.loads(input_json)
    except json.JSONDecodeError as exc:
        click.echo(f"error: --input is not JSON: {exc}", err=True)
        sys.exit(2)
    if not isinstance(payload, dict):
        click.echo("error: --input must be a JSON object", err=True)
        sys.exit(2)
    record = TriggerRecord(
        workflow=workflow,
        trigger_key=key or f"manual:{workflow}:{uuid.uuid4().hex}",
        group=group,
        source="manual",
        payload=payload,
        received_at=datetime.now(UTC),
    )
    try:
        partition, offset = asyncio.run(produce_trigger(Settings.from_env(), record))
    except ProduceError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    result = {
        "workflow": workflow,
        "trigger_key": record.trigger_key,
        "partition": partition,
        "offset": offset,
    }
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(
            f"triggered {workflow}: key {record.trigger_key} (partition {partition}, offset {offset})"
        )
