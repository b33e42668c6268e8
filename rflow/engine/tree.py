"""Where each step of a workflow sits: its list, the block that holds it, its role.

Step ids are unique across a workflow, blocks included, so a run keeps one record per
step id whatever its depth. A step sits in one list: the workflow's ``steps``,
``on_error`` or ``finally`` (its owner is ``None``), a block's branches, a try's ``try``
or ``catch`` list, or the ``compensate`` list of the step it undoes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rflow.lang.model import Workflow

TOP = ("main", "on_error", "finally")
"""The roles of the workflow's own lists (``main`` is ``steps``)."""


@dataclass(frozen=True, slots=True)
class Place:
    """Where one step sits."""

    step: Any
    owner: str | None
    """The step whose list holds it (a block, or the step a compensation undoes)."""
    role: str
    """main, on_error or finally (the workflow's lists), branch, try, catch or compensate."""
    index: int
    top: str
    """The workflow's list it is in, at whatever depth: main, on_error or finally."""


@dataclass
class Tree:
    """The places of every step of one workflow definition."""

    places: dict[str, Place] = field(default_factory=dict)
    lists: dict[tuple[str | None, str], list[Any]] = field(default_factory=dict)

    def step(self, step_id: str) -> Any:
        return self.places[step_id].step

    def list_of(self, owner: str | None, role: str) -> list[Any]:
        """The steps of one list (``[]`` for a list the step does not have)."""
        return self.lists.get((owner, role), [])

    def scope(self, step_id: str) -> str | None:
        """The try block whose compensations ``step_id`` joins: the nearest one holding
        it in its ``try`` list (through branches, and through the catch of an inner try);
        ``None`` outside any, and for a compensation step."""
        place = self.places[step_id]
        while place.owner is not None:
            if place.role == "compensate":
                return None
            if place.role == "try":
                return place.owner
            place = self.places[place.owner]
        return None

    def within(self, step_id: str) -> list[str]:
        """The ids of every step inside ``step_id`` (its lists, at any depth)."""
        found: list[str] = []
        stack = [step_id]
        while stack:
            current = stack.pop()
            for (owner, _), steps in self.lists.items():
                if owner == current:
                    for step in steps:
                        found.append(step.id)
                        stack.append(step.id)
        return found

    def compensating(self, step_id: str) -> bool:
        """Whether ``step_id`` is part of a compensation (at any depth)."""
        place = self.places[step_id]
        while place.owner is not None:
            if place.role == "compensate":
                return True
            place = self.places[place.owner]
        return False

    def after_failure(self, step_id: str) -> str | None:
        """The try block whose failure ``step_id`` runs for (in its catch, or in one of
        its compensations), if any: such a step reads that failure as ``error``."""
        place = self.places[step_id]
        while place.owner is not None:
            if place.role == "catch":
                return place.owner
            if place.role == "compensate":
                return self.scope(place.owner)
            place = self.places[place.owner]
        return None


def tree(workflow: Workflow) -> Tree:
    """The places of ``workflow``'s steps (built once per definition)."""
    found = _TREES.get(id(workflow))
    if found is not None and found[0] is workflow:
        return found[1]
    built = Tree()
    for role, steps in (
        ("main", workflow.steps),
        ("on_error", workflow.on_error),
        ("finally", workflow.finally_),
    ):
        _add(built, steps, None, role, role)
    if len(_TREES) >= _TREES_KEPT:
        _TREES.clear()
    _TREES[id(workflow)] = (workflow, built)
    return built


def _add(built: Tree, steps: list[Any], owner: str | None, role: str, top: str) -> None:
    built.lists[(owner, role)] = list(steps)
    for index, step in enumerate(steps):
        built.places[step.id] = Place(step, owner, role, index, top)
        for inner_role, inner in step.lists():
            _add(built, inner, step.id, inner_role, top)


_TREES: dict[int, tuple[Workflow, Tree]] = {}
"""id of a definition -> (the definition, its tree); the definition kept, so its id is
not reused."""
_TREES_KEPT = 1024
