"""What the command modules share: failing with a message, and one database call."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import click

from rflow.settings import Settings

T = TypeVar("T")


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


async def with_database(work: Callable[[Any], Awaitable[T]], settings: Settings | None = None) -> T:
    """Run ``work`` on a connection to the configured schema; a clear error if unreachable."""
    from rflow import storage

    try:
        conn = await storage.connect(settings or Settings.from_env())
    except storage.StorageError as exc:
        fail(str(exc))
    async with conn:
        return await work(conn)
