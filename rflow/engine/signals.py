"""Signals: a named message sent to one run (``rflow runs signal RUN NAME``).

A step ``wait_for: {signal: {name}}`` parks like any wait. A signal sent while such a
step waits answers it, through its wait row (first answer wins, as an approval's). A
signal sent while no step waits is refused, unless the workflow declares
``signals: {<name>: {buffer: true}}``: then the run keeps it, and its next wait for that
name takes it at once. The rules, one function each:

- :func:`take`: a wait for ``name`` starts: the oldest kept signal of that name, if any.
- :func:`keep`: a signal no step waits for: kept, oldest first, at most
  :data:`MAX_KEPT` per name (one more is dropped).
- :func:`fresh`: a signal already taken (a redelivered record) is taken once.
- :func:`waiter`: which of the steps waiting for ``name`` takes a signal: the one that
  started waiting first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MAX_KEPT = 100
"""Signals of one name a run keeps for a later wait."""
SEEN_KEPT = 256
"""Ids of the latest signals taken that a run remembers (a redelivery comes soon)."""


def take(kept: Mapping[str, list[Any]], name: str) -> tuple[dict[str, list[Any]], Any | None]:
    """The kept signals after a wait for ``name`` took the oldest, and what it took
    (``None``: none was kept)."""
    waiting = kept.get(name) or []
    if not waiting:
        return dict(kept), None
    rest = {**kept, name: waiting[1:]}
    if not rest[name]:
        del rest[name]
    return rest, waiting[0]


def keep(
    kept: Mapping[str, list[Any]], name: str, payload: Any
) -> tuple[dict[str, list[Any]], bool]:
    """The kept signals with ``payload`` added, and whether it was (``False``: that name
    has :data:`MAX_KEPT` already)."""
    waiting = kept.get(name) or []
    if len(waiting) >= MAX_KEPT:
        return dict(kept), False
    return {**kept, name: [*waiting, payload]}, True


def fresh(seen: list[str], signal_id: str) -> tuple[list[str], bool]:
    """The remembered ids with ``signal_id`` added, and whether it is new."""
    if signal_id in seen:
        return seen, False
    return [*seen, signal_id][-SEEN_KEPT:], True


def waiter(waiting: Iterable[tuple[str, Any]]) -> str | None:
    """Of ``(path, started_at)`` of the steps waiting for a signal, the path of the one
    that started waiting first (``None``: no step waits)."""
    ordered = sorted(waiting, key=lambda item: (item[1], item[0]))
    return ordered[0][0] if ordered else None
