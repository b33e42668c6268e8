"""Rows as column arrays: statements over ``unnest`` take a whole batch as one parameter
per column, so a batch is one statement instead of one per row.

Such parameters are sent in binary (``%b``): in text, psycopg quotes and escapes every
element of an array with regular expressions, which cost more than the statement."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

Row = tuple[Any, ...]


def columns(
    rows: Sequence[Row],
    width: int,
    *,
    unique_by: Callable[[Row], Hashable] | None = None,
    merge: Callable[[Row, Row], Row] | None = None,
) -> list[list[Any]]:
    """``rows`` (each ``width`` long) as ``width`` lists, one per column.

    ``unique_by``: for a statement that updates, each key's row is taken once, its last
    occurrence winning, as when the rows were applied one by one (one statement cannot
    change a row twice); ``merge(earlier, later)`` gives the row that stands for both when
    applying them one by one would not simply leave the later one.
    """
    if unique_by is not None:
        rows = unique(rows, unique_by=unique_by, merge=merge)
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]


def unique(
    rows: Sequence[Row],
    *,
    unique_by: Callable[[Row], Hashable] | None = None,
    merge: Callable[[Row, Row], Row] | None = None,
) -> list[Row]:
    """``rows`` with each key's row taken once (see :func:`columns`); all of them without
    ``unique_by``."""
    if unique_by is None:
        return list(rows)
    kept: dict[Hashable, Row] = {}
    for row in rows:
        key = unique_by(row)
        earlier = kept.get(key)
        kept[key] = row if earlier is None or merge is None else merge(earlier, row)
    return list(kept.values())
