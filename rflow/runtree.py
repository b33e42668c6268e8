"""How a run's steps nest, for ``rflow runs show`` and the console: each block's steps
right under it, a parallel's or race's branches side by side (the winner and the
cancelled ones marked), compensations under the step they undo.

Pure functions over the read model's step rows (``parent``, ``role`` and ``detail``
come from the journal; foreach iterations sit under their step by their path).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FORKS = ("parallel", "race")


@dataclass(frozen=True)
class Row:
    """One step row in display order: how deep it sits, and what to call it."""

    step: Mapping[str, Any]
    depth: int
    label: str
    """``venue_a``, ``refund (compensates pay)``..."""


@dataclass(frozen=True)
class Fork:
    """A parallel or race, with its branches' rows side by side."""

    step: Mapping[str, Any]
    kind: str
    branches: list[Mapping[str, Any]] = field(default_factory=list)
    winner: str | None = None
    cancelled: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        path = self.step["path"]
        if self.kind == "race":
            won = f"won by {self.winner}" if self.winner else str(self.step["status"])
            return f"{path} (race): {won}"
        return f"{path} (parallel): {self.step['status']}"


def _owner(step: Mapping[str, Any]) -> str | None:
    if step.get("parent"):
        return str(step["parent"])
    path = str(step["path"])
    return path[: path.index("[")] if "[" in path else None


def rows(steps: Sequence[Mapping[str, Any]]) -> list[Row]:
    """Every step row, each block's (and foreach's) steps right after it, one level
    deeper, in the order they were journaled."""
    latest = {}
    for step in steps:
        latest[step["path"]] = step
    under: dict[str | None, list[Mapping[str, Any]]] = {}
    for step in steps:
        owner = _owner(step)
        if owner is not None and owner not in latest:
            owner = None  # its block has no row (an older run): shown at the top
        under.setdefault(owner, []).append(step)
    found: list[Row] = []

    def add(owner: str | None, depth: int) -> None:
        for step in under.get(owner, []):
            found.append(Row(step, depth, label(step)))
            if step is latest.get(step["path"]):
                add(str(step["path"]), depth + 1)

    add(None, 0)
    return found


def label(step: Mapping[str, Any]) -> str:
    """A step's name as shown: a compensation says what it undoes."""
    if step.get("role") == "compensate":
        return f"{step['path']} (compensates {step['parent']})"
    return str(step["path"])


def forks(steps: Sequence[Mapping[str, Any]]) -> list[Fork]:
    """Each parallel and race of the run, with its branches in the order written."""
    found = []
    for step in steps:
        if step.get("kind") not in FORKS:
            continue
        detail = step.get("detail") or {}
        branches = [
            s for s in steps if s.get("parent") == step["path"] and s.get("role") == "branch"
        ]
        found.append(
            Fork(
                step,
                str(step["kind"]),
                branches,
                detail.get("winner"),
                tuple(detail.get("cancelled") or ()),
            )
        )
    return found


def child_link(step: Mapping[str, Any]) -> str | None:
    """The child run a call_workflow step started, if any."""
    detail = step.get("detail") or {}
    return detail.get("child_run")
