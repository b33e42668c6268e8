"""``rflow deploy``: validate a project and publish its workflows as new versions."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from rflow.cli import main
from rflow.cli.common import table, with_database
from rflow.settings import environ


@main.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def deploy(path: Path, as_json: bool) -> None:
    """Validate the workflows at PATH, then publish each as an immutable version.

    New runs start with the deployed version within a second on every worker; a run in
    flight keeps the version it started with. Publishing an unchanged workflow changes
    nothing. Exits 1 (publishing nothing) when PATH has errors.
    """
    from rflow.engine.keys import deployable
    from rflow.lang import validate_path
    from rflow.storage import versions

    report = validate_path(str(path), environ())
    if not report.ok:
        for diagnostic in report.errors:
            click.echo(str(diagnostic), err=True)
        raise SystemExit(1)
    definitions = deployable(report.project.workflows)
    changed = asyncio.run(with_database(lambda conn: versions.deploy(conn, definitions)))
    rows = [
        {
            "workflow": name,
            "version": version,
            "previous": changed[name][0] if name in changed else version,
            "changed": name in changed,
        }
        for name, (version, _) in sorted(definitions.items())
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    lines = [
        [
            row["workflow"],
            row["version"],
            f"new (was {row['previous'] or 'none'})" if row["changed"] else "unchanged",
        ]
        for row in rows
    ]
    click.echo(table(lines, ["WORKFLOW", "VERSION", "DEPLOYED"]))
