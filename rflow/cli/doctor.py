"""``rflow doctor``: validate, then check every live dependency of a project."""

from __future__ import annotations

import asyncio
import json
import sys

import click

from rflow.cli import main
from rflow.settings import Settings, environ

_MARK = {"pass": "ok  ", "warn": "warn", "fail": "FAIL"}


@main.command()
@click.argument("path", type=click.Path(exists=True, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def doctor(path: str, as_json: bool) -> None:
    """Validate PATH, then check Kafka, Postgres, RPCs, relayer keys and contracts.

    Exits 0 when no check fails (warnings allowed), 1 otherwise.
    """
    from rflow.cli.validate import with_signers
    from rflow.doctor import Finding, live_checks
    from rflow.lang import validate_path
    from rflow.secrets import process_secrets, scrub_logs

    env = environ()
    report = with_signers(validate_path(path, env), env)
    findings = [
        Finding(
            "validate",
            "pass" if report.ok else "fail",
            f"{len(report.workflows)} workflows, {len(report.errors)} errors, {len(report.warnings)} warnings",
        )
    ]
    settings = Settings.from_env(env)
    scrub_logs(process_secrets(settings, report.project, env))
    findings += asyncio.run(live_checks(settings, report.project, env))
    failed = any(f.status == "fail" for f in findings)
    if as_json:
        document = {
            "ok": not failed,
            "findings": [f.to_dict() for f in findings],
            "diagnostics": [d.to_dict() for d in report.diagnostics],
        }
        click.echo(json.dumps(document, indent=2))
    else:
        for diagnostic in report.diagnostics:
            click.echo(str(diagnostic))
        for finding in findings:
            click.echo(f"{_MARK[finding.status]}  {finding.check:<28} {finding.detail}")
    sys.exit(1 if failed else 0)
