"""``rflow run``: start a run of a workflow with a manual trigger, checked against its project."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from rflow.cli import main
from rflow.cli.common import authorized, fail, needs, project_or_warn, with_database
from rflow.engine.keys import firing_runs
from rflow.settings import Settings


def _fail(message: str, code: int = 2) -> NoReturn:
    """Usage problems exit 2, the project's convention for bad input to a command."""
    fail(message, code)


def parse_inputs(values: tuple[str, ...]) -> dict[str, Any]:
    """Merge ``--input`` values: JSON objects, or ``NAME=VALUE`` pairs (the value a string).

    Raises :class:`click.BadParameter` naming the value that is neither.
    """
    inputs: dict[str, Any] = {}
    for value in values:
        if value.lstrip().startswith("{"):
            try:
                doc = json.loads(value)
            except json.JSONDecodeError as exc:
                raise click.BadParameter(f"{value!r} is not JSON: {exc}") from None
            if not isinstance(doc, dict):
                raise click.BadParameter(f"{value!r} is not a JSON object")
            inputs.update(doc)
            continue
        name, sep, text = value.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{value!r}: give a JSON object or NAME=VALUE")
        inputs[name.strip()] = text
    return inputs


@main.command("run")
@click.argument("workflow")
@click.option(
    "--input",
    "input_values",
    multiple=True,
    metavar="JSON|NAME=VALUE",
    help="The run's inputs: a JSON object, or NAME=VALUE (repeatable).",
)
@click.option("--key", default=None, help="Idempotency key: the same key starts one run only.")
@click.option(
    "--project",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="The workflow files (default: $RFLOW_PROJECT).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--wait",
    is_flag=True,
    help="Follow the run step by step (progress on stderr) until it settles; exit 1 "
    "unless it succeeded.",
)
@click.option("--timeout", default=600.0, show_default=True, help="Seconds --wait waits.")
@needs("runs.run", ("workflow", "workflow"), late=True)
def run_workflow(
    workflow: str,
    input_values: tuple[str, ...],
    key: str | None,
    project: Path | None,
    as_json: bool,
    wait: bool,
    timeout: float,
) -> None:
    """Start a run of WORKFLOW through its manual trigger.

    With a project (--project or $RFLOW_PROJECT) the workflow must exist, have a manual
    trigger and take exactly the given inputs, and the record is keyed by its concurrency
    group. Prints the run's trigger key once Kafka has acknowledged the firing.
    """
    from rflow.ingress import ManualRunError, manual_record, manual_workflow
    from rflow.streams.producer import ProduceError, produce_trigger

    try:
        inputs = parse_inputs(input_values)
    except click.BadParameter as exc:
        _fail(f"--input {exc.message}")
    settings = Settings.from_env()
    path = project or settings.project_path
    loaded = project_or_warn(
        path,
        "the workflow and its inputs are not checked, and the record is keyed by its trigger "
        "key; a worker dead-letters it if the workflow declares a concurrency group",
    )
    try:
        definition = None if loaded is None else manual_workflow(loaded, workflow)
        record = manual_record(
            workflow,
            definition,
            inputs,
            run_id=key or uuid.uuid4().hex,
            received_at=datetime.now(UTC),
        )
    except ManualRunError as exc:
        _fail(exc.reason)
    authorized()
    held = asyncio.run(with_database(lambda conn: _held(conn, workflow, definition), settings))
    try:
        partition, offset = asyncio.run(produce_trigger(settings, record))
    except ProduceError as exc:
        _fail(str(exc), code=1)
    strategy = definition.strategy if definition is not None else None
    runs = firing_runs(workflow, record.trigger_key, strategy.matrix if strategy else None)
    result = {
        "workflow": workflow,
        "trigger_key": record.trigger_key,
        "run_ids": [rid for _, rid in runs],
        "group": record.group,
        "partition": partition,
        "offset": offset,
        "status": "accepted",
    }
    line = f"{record.trigger_key} -> run {', '.join(result['run_ids'])}"
    if held:
        skipped = definition is not None and definition.paused_firings == "skip"
        result["status"] = "skipped" if skipped else "held"
        result[result["status"]] = held
        if skipped:
            line += f" skipped: {held}; with paused_firings: skip it never starts"
        else:
            line += f" held: {held}; it starts when the workflow is resumed"
            if wait:
                line += " (not waited for)"
                wait = False
    if not wait:
        click.echo(json.dumps(result) if as_json else line)
        return
    click.echo(line, err=True)
    settled = asyncio.run(follow(settings, result["run_ids"], timeout))
    if settled is None:
        _fail(f"not settled within {timeout:g}s; follow it with rflow runs show", code=1)
    result["runs"] = settled
    if as_json:
        click.echo(json.dumps(result, default=str))
    else:
        for run in settled:
            click.echo(f"run {run['run_id']} {run['status']}")
    raise SystemExit(0 if all(run["status"] == "succeeded" for run in settled) else 1)


async def _held(conn: Any, name: str, definition: Any) -> str | None:
    """Why a firing of ``name`` would be held now (it is paused), or ``None``. Without a
    project to check it against, the workflow must have been deployed: else this exits
    with the reason."""
    from rflow.storage import controls, versions

    if definition is None and name not in await versions.current(conn):
        fail(f"no workflow {name!r} is deployed (rflow deploy, or start a worker with it)")
    if definition is not None and definition.paused:
        return f"workflow {name} is paused in its definition"
    paused = await controls.paused(conn)
    if name in paused:
        by, reason = paused[name]
        return f"workflow {name} is paused by {by}" + (f": {reason}" if reason else "")
    return None


async def follow(settings: Settings, run_ids: list[str], timeout: float) -> list | None:
    """Print each step of ``run_ids`` as it settles (stderr); the runs once all settled."""
    from rflow import storage
    from rflow.storage import runs as store

    shown: set[tuple[str, str, int]] = set()
    deadline = asyncio.get_running_loop().time() + timeout
    conn = await storage.connect(settings)
    async with conn:
        while True:
            found = [await store.get_run(conn, rid) for rid in run_ids]
            for run in filter(None, found):
                for step in run["steps"]:
                    mark = (run["run_id"], step["path"], step["visit"])
                    if step["settled_at"] is None or mark in shown:
                        continue
                    shown.add(mark)
                    began = step["started_at"] or step["settled_at"]
                    took = (step["settled_at"] - began).total_seconds() * 1000
                    error = f"  {step['error_kind']}: {step['error_message']}" * bool(
                        step["error_kind"]
                    )
                    line = f"  {step['path']:<24} {step['status']:<10} {took:7.0f} ms{error}"
                    click.echo(line if len(run_ids) == 1 else f"{run['run_id']} {line}", err=True)
            if all(run is not None and run["settled_at"] for run in found):
                return found
            if asyncio.get_running_loop().time() > deadline:
                return None
            await asyncio.sleep(0.25)
