"""Rows as column arrays: statements over ``unnest`` take a whole batch as one parameter
per column, so a batch is one statement instead of one per row.

Such parameters are sent in binary (``%b``): in text, psycopg quotes and escapes every
element of an array with regular expressions, which cost more than the statement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """``rows`` (each ``width`` long) as ``width`` lists, one per column."""
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]
