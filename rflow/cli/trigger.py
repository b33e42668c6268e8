"""``rflow trigger``: produce one trigger record, as any Kafka producer would.

Where ``rflow run`` is rflow's own manual ingress (it vouches for the firing with
``RFLOW_INGRESS_KEYS``), this command writes the raw record of
``schemas/trigger-record.schema.json`` as an outside producer does: source ``manual``, no
proof, the trigger key as given (outside rflow's own key namespaces). With a project at
hand it keys the record by the workflow's concurrency group and refuses, with the reason,
what a worker would refuse (a workflow without a manual trigger, inputs other than the
declared ones).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from rflow.cli import main
from rflow.cli.common import authorized, fail, needs, project_or_warn
from rflow.settings import Settings


def _fail(message: str, code: int = 2) -> NoReturn:
    """Usage problems exit 2, the project's convention for bad input to a command."""
    fail(message, code)


def _payload(text: str) -> dict[str, Any]:
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        _fail(f"--input is not JSON: {exc}")
    if not isinstance(payload, dict):
        _fail("--input must be a JSON object")
    return payload


def _project(path: Path | None):
    """The loaded project at ``path``, or ``None`` (with a warning) without one."""
    return project_or_warn(
        path,
        "the workflow is not checked and the record is keyed by --group, else by its trigger "
        "key; a worker dead-letters it if the workflow's concurrency group says otherwise",
    )


@main.command()
@click.argument("workflow")
@click.option(
    "--input",
    "input_json",
    default="{}",
    metavar="JSON",
    help="The trigger payload, a JSON object.",
)
@click.option(
    "--key",
    default=None,
    help="The trigger key, the firing's idempotency key: the same key starts one run only "
    "(default: trigger:WORKFLOW:<new id>; event:, webhook:, schedule:, manual:, their "
    "<kind>@ forms and retry-of: are rflow's own).",
)
@click.option(
    "--group",
    default=None,
    help="The concurrency group (the Kafka key) when there is no project to compute it from.",
)
@click.option(
    "--project",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="The workflow files (default: $RFLOW_PROJECT).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@needs("runs.run", ("workflow", "workflow"), late=True)
def trigger(
    workflow: str,
    input_json: str,
    key: str | None,
    group: str | None,
    project: Path | None,
    as_json: bool,
) -> None:
    """Produce a trigger record for WORKFLOW with --input as its payload.

    With a project (--project or $RFLOW_PROJECT) the workflow must exist, and the record
    carries, and is keyed by, the concurrency group its expression computes from the
    payload. Prints the run id(s) once Kafka has acknowledged the record.
    """
    from rflow.codecs import TriggerRecord
    from rflow.engine import provenance
    from rflow.engine.keys import firing_runs
    from rflow.failures import RflowError
    from rflow.streams.producer import ProduceError, produce_trigger
    from rflow.triggering import trigger_record

    payload = _payload(input_json)
    settings = Settings.from_env()
    loaded = _project(project or settings.project_path)
    trigger_key = key or f"trigger:{workflow}:{uuid.uuid4().hex}"
    received_at = datetime.now(UTC)
    definition = None
    if loaded is None:
        record = TriggerRecord(
            workflow=workflow,
            trigger_key=trigger_key,
            group=group,
            source="manual",
            payload=payload,
            received_at=received_at,
        )
    else:
        definition = loaded.workflows.get(workflow)
        if definition is None:
            known = ", ".join(sorted(loaded.workflows)) or "none"
            _fail(f"no workflow {workflow!r} (the project has: {known})")
        try:
            record = trigger_record(
                workflow,
                definition,
                source="manual",
                trigger_key=trigger_key,
                payload=payload,
                received_at=received_at,
            )
        except RflowError as exc:
            _fail(exc.message)
        # A worker would dead-letter a record whose group disagrees: refuse it here.
        if group is not None and record.group is None:
            _fail(f"--group {group!r} given, but workflow {workflow} has no concurrency group")
        if group is not None and group != record.group:
            _fail(
                f"--group {group!r} disagrees with the concurrency group {record.group!r} "
                f"that workflow {workflow} computes from --input"
            )
    accepts = provenance.Accepts.of(workflow, definition) if definition is not None else None
    verdict = provenance.judge(record, provenance.Keyring(), accepts)
    if isinstance(verdict, provenance.Refused):
        _fail(f"a worker would refuse this record: {verdict.reason}")
    authorized()
    try:
        partition, offset = asyncio.run(produce_trigger(settings, record, vouching=False))
    except ProduceError as exc:
        _fail(str(exc), code=1)
    strategy = definition.strategy if definition is not None else None
    run_ids = [
        rid
        for _, rid in firing_runs(
            workflow, record.trigger_key, strategy.matrix if strategy else None
        )
    ]
    result = {
        "workflow": workflow,
        "trigger_key": record.trigger_key,
        "run_ids": run_ids,
        "group": record.group,
        "topic": settings.topic_prefix + "rflow.triggers",
        "key": record.partition_key,
        "partition": partition,
        "offset": offset,
    }
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(
            f"{record.trigger_key} -> run {', '.join(run_ids)} "
            f"({result['topic']} key {record.partition_key!r}, partition {partition}, "
            f"offset {offset})"
        )
