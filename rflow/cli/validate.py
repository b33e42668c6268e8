"""``rflow validate`` and ``rflow schema``: check workflow files, publish their schema."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from pathlib import Path

import click

from rflow.cli import main
from rflow.lang import ValidationReport, schema_text, validate_path
from rflow.settings import environ


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def summary(path: str, report: ValidationReport) -> str:
    """``examples/: 6 workflows, 0 errors, 1 warning``."""
    return (
        f"{path}: {_plural(len(report.workflows), 'workflow')}, "
        f"{_plural(len(report.errors), 'error')}, {_plural(len(report.warnings), 'warning')}"
    )


def with_signers(report: ValidationReport, env: Mapping[str, str]) -> ValidationReport:
    """``report`` with what each relayer's signer says of its address, located at the
    relayer's declaration (:func:`rflow.relayer.signing.address_findings`)."""
    if report.project is None or not report.project.relayers:
        return report
    from rflow.relayer.signing import address_findings

    return report.with_findings(asyncio.run(address_findings(report.project, env)))


@main.command()
@click.argument("path", type=click.Path(exists=True, path_type=str))
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text for people, json for machines",
)
@click.option("--json", "as_json", is_flag=True, help="the same as --format json")
def validate(path: str, output_format: str, as_json: bool) -> None:
    """Check the workflow files at PATH (a file or a folder) without running anything.

    Exits 0 when there are no errors (warnings are printed), 1 when there are errors.
    A relayer that declares its ``address`` has its signer asked which address it signs
    for (its key, its HSM or its KMS): a different one is an error.
    """
    env = environ()
    report = with_signers(validate_path(path, env), env)
    if output_format == "json" or as_json:
        document = {
            "ok": report.ok,
            "errors": [d.to_dict() for d in report.errors],
            "warnings": [d.to_dict() for d in report.warnings],
            "workflows": list(report.workflows),
        }
        click.echo(json.dumps(document, indent=2))
    else:
        for diagnostic in report.diagnostics:
            click.echo(str(diagnostic))
        click.echo(summary(path, report))
    sys.exit(0 if report.ok else 1)


@main.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="write the schema to this file instead of standard output",
)
def schema(output: Path | None) -> None:
    """Print the JSON Schema of workflow files (for editor completion and hover docs)."""
    text = schema_text()
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}", err=True)
