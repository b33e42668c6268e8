"""What the command modules share: failing with a message, and one database call."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from rflow.settings import Settings

if TYPE_CHECKING:
    from rflow.lang import Project

T = TypeVar("T")


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


async def with_database(work: Callable[[Any], Awaitable[T]], settings: Settings | None = None) -> T:
    """Run ``work`` on a connection to the configured schema; a clear error if the
    database is unreachable or refuses the query (a schema not migrated, say)."""
    from rflow import storage

    try:
        conn = await storage.connect(settings or Settings.from_env())
    except storage.StorageError as exc:
        fail(str(exc))
    async with conn:
        try:
            return await work(conn)
        except storage.StorageError as exc:
            fail(str(exc))


def operate(action: Callable[[Any], Awaitable[T]], project: Project | None = None) -> T:
    """Run an operator action (:class:`rflow.streams.control.Control`) with a connection
    and a producer of the CLI's own; a refusal is printed and exits 1."""
    import asyncio

    from rflow.storage import StorageError
    from rflow.streams.control import ControlError, connected
    from rflow.streams.producer import ProduceError

    async def act() -> T:
        async with connected(Settings.from_env(), project) as control:
            return await action(control)

    try:
        return asyncio.run(act())
    except (ControlError, ProduceError, StorageError) as exc:
        fail(str(exc))


async def known_workflow(conn: Any, name: str) -> None:
    """Exit with the reason unless ``name`` is a deployed workflow or has runs."""
    from rflow.storage import versions

    if not await versions.known(conn, name):
        fail(f"no workflow {name!r}: none is deployed under that name, and none has runs")


async def deployed_project(conn: Any) -> Project | None:
    """The project of the newest deployment, as this environment loads it (``None`` when
    nothing is deployed or it does not load here)."""
    from rflow.lang import ProjectSource
    from rflow.settings import environ
    from rflow.storage import deployments

    latest = await deployments.latest_id(conn)
    stored = await deployments.get(conn, latest) if latest is not None else None
    if stored is None:
        return None
    return ProjectSource.from_document(stored.source).validate(environ()).project


def project_or_warn(path: Path | None, unchecked: str) -> Project | None:
    """The project at ``path``; without one, a warning saying what goes ``unchecked``.

    A project with errors prints each diagnostic and exits 2.
    """
    from rflow.lang import ConfigError, load_project
    from rflow.settings import environ

    if path is None:
        click.echo(f"warning: no project (--project or RFLOW_PROJECT): {unchecked}", err=True)
        return None
    try:
        return load_project(path, environ())
    except FileNotFoundError as exc:
        fail(str(exc), 2)
    except ConfigError as exc:
        for diagnostic in exc.diagnostics:
            click.echo(str(diagnostic), err=True)
        fail(f"{path} has errors", 2)


project_option = click.option(
    "--project",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Default: $RFLOW_PROJECT.",
)
"""The ``--project PATH`` option of commands that read the workflows."""


def table(rows: list[list[Any]], header: list[str]) -> str:
    """Rows under a header, in columns as wide as their widest cell."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )
