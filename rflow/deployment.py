"""The deployment a worker runs, and how a component reads the current one.

A deployment is a project's source (:class:`~rflow.lang.ProjectSource`) stored by
``rflow deploy`` under an increasing id; each worker loads it with its own environment
and swaps it in whole (:class:`Deployment` is never changed in place). Components never
keep a project of their own: they are given a :data:`ProjectAt`, a function answering
the current project when they need it, and :class:`Derived` recomputes what they build
from it (webhook routes, schedules) when it changes.

Pure: no database, no Faust, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from rflow.engine.keys import workflow_version
from rflow.lang import ConfigError, Project, ProjectSource

T = TypeVar("T")

ProjectAt = Callable[[], Project | None]
"""Answers the project to use now (``None``: the worker runs none)."""


@dataclass(frozen=True)
class Deployment:
    """A loaded project, and which stored deployment it is."""

    id: int | None
    """Its id in the ``deployments`` table; ``None`` while it is not stored there (a
    worker's own project before it deployed it, or a project given in memory)."""
    project: Project | None
    digest: str | None = None
    """The digest of its source (``None``: a project given in memory, without one)."""
    versions: Mapping[str, str] = field(default_factory=dict)
    """The version of each workflow (the hash of its definition, as this worker loaded it)."""

    @classmethod
    def of(
        cls, project: Project | None, id: int | None = None, digest: str | None = None
    ) -> Deployment:
        """The deployment of ``project``, with its workflows' versions."""
        workflows = project.workflows if project is not None else {}
        versions = {name: workflow_version(wf) for name, wf in workflows.items()}
        return cls(id, project, digest, versions)

    def stored_as(self, id: int) -> Deployment:
        """The same project, known as deployment ``id``."""
        return replace(self, id=id)

    @property
    def label(self) -> str:
        """How messages name it."""
        return f"deployment {self.id}" if self.id is not None else "an unstored project"


def load(source: ProjectSource, env: Mapping[str, str], id: int | None) -> Deployment:
    """Deployment ``id`` loaded from ``source`` with ``env``; :class:`ConfigError` with
    every diagnostic when it does not validate here."""
    report = source.validate(env)
    if report.project is None or not report.ok:
        raise ConfigError(report.diagnostics)
    return Deployment.of(report.project, id, source.digest)


@dataclass(frozen=True)
class Changes:
    """What a deployment changes, workflow by workflow (names sorted)."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()

    @classmethod
    def between(cls, before: Mapping[str, str], after: Mapping[str, str]) -> Changes:
        """From workflow versions ``before`` to ``after``."""
        return cls(
            added=tuple(sorted(after.keys() - before.keys())),
            changed=tuple(sorted(n for n in after.keys() & before.keys() if after[n] != before[n])),
            removed=tuple(sorted(before.keys() - after.keys())),
            unchanged=tuple(
                sorted(n for n in after.keys() & before.keys() if after[n] == before[n])
            ),
        )

    @property
    def any(self) -> bool:
        """Whether a workflow was added, changed or removed."""
        return bool(self.added or self.changed or self.removed)

    def summary(self) -> str:
        """``added a; changed b; removed c; 2 unchanged``."""
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (
                ("added", self.added),
                ("changed", self.changed),
                ("removed", self.removed),
            )
            if names
        ]
        if self.unchanged:
            parts.append(f"{len(self.unchanged)} unchanged")
        return "; ".join(parts) or "no workflows"


def project_reader(project: Project | ProjectAt | None) -> ProjectAt:
    """``project`` as a :data:`ProjectAt`: a fixed project answers itself."""
    if callable(project):
        return project
    return lambda: project


class Derived(Generic[T]):
    """A value built from the current project, built again when the project changes."""

    def __init__(self, current: ProjectAt, build: Callable[[Project | None], T]) -> None:
        self.current = current
        self.build = build
        self._of: object = object()
        self._value: T | None = None

    def __call__(self) -> T:
        project = self.current()
        if project is not self._of:
            self._value, self._of = self.build(project), project
        return self._value  # type: ignore[return-value]


RESOURCES = ("networks", "contracts", "relayers", "channels", "commands", "budgets", "principals")
"""The sections of a project besides its workflows and config that a deploy can change."""


def resource_changes(before: Project | None, after: Project) -> list[str]:
    """What a deployment changes besides workflows, one line per section that changed
    (``budgets: changed daily``), ``config`` included; empty when nothing did."""
    lines = []
    for section in RESOURCES:
        old = {n: v.model_dump(mode="json") for n, v in getattr(before, section, {}).items()}
        new = {n: v.model_dump(mode="json") for n, v in getattr(after, section).items()}
        parts = [
            f"{verb} {', '.join(sorted(names))}"
            for verb, names in (
                ("added", new.keys() - old.keys()),
                ("changed", {n for n in new.keys() & old.keys() if new[n] != old[n]}),
                ("removed", old.keys() - new.keys()),
            )
            if names
        ]
        if parts:
            lines.append(f"{section}: {'; '.join(parts)}")
    if before is not None and before.config != after.config:
        lines.append("config: changed")
    return lines


def older_message(path: object, older: Any, then: str = "it is not deployed") -> str:
    """What to say of the project at ``path`` when it is an older deployment's
    (``older``: :class:`rflow.storage.deployments.Older`): which is newer, what happens
    now (``then``), how to run the newest, and how to go back on purpose."""
    newest_at = older.newest_at.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    return (
        f"{path} is deployment {older.project}, older than deployment {older.newest} (the "
        f"newest, deployed {newest_at}): deploying it would roll every worker back, so {then}. "
        "To run the newest, start workers without a project (they follow the newest "
        f"deployment) or with the files deployment {older.newest} was deployed from; to go "
        f"back to {path} on purpose, an operator's action recorded as deploy.rollback: "
        f"rflow deploy --rollback {path} (or rflow worker --rollback)"
    )
