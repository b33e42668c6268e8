"""Findings about a workflow project, each pinned to a place in its YAML."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    from rflow.lang.model.project import Project
    from rflow.lang.yamlsrc import SourceMap

Severity = Literal["error", "warning"]
DataPath = tuple[str | int, ...]
"""Where a value sits in the loaded data: ``('workflows', 'copy-trade', 'steps', 1, 'retry')``."""


class Location(NamedTuple):
    """A place in a YAML file: 1-based line and column."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def format_path(path: Sequence[str | int]) -> str:
    """``('workflows', 'copy-trade', 'steps', 1)`` as ``workflows.copy-trade.steps[1]``."""
    out: list[str] = []
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif part and all(c.isalnum() or c in "_-$" for c in part):
            out.append(f".{part}" if out else part)
        else:
            out.append(f"[{part!r}]")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One error or warning, worded for a person and located in the source.

    ``path`` is the dotted data path the message is about (empty for a whole file);
    ``file``, ``line`` and ``column`` are ``None`` only when no source position exists.
    """

    severity: Severity
    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    path: str = ""

    @classmethod
    def at(
        cls,
        location: Location | None,
        message: str,
        path: Sequence[str | int] = (),
        severity: Severity = "error",
    ) -> Diagnostic:
        """A diagnostic at ``location`` about the value at data ``path``."""
        if location is None:
            return cls(severity, message, path=format_path(path))
        return cls(
            severity, message, location.file, location.line, location.column, format_path(path)
        )

    @property
    def location(self) -> str:
        """``file:line:column`` (as much of it as is known)."""
        parts = [str(p) for p in (self.file, self.line, self.column) if p is not None]
        return ":".join(parts) or "<unknown>"

    def __str__(self) -> str:
        subject = f"{self.path}: " if self.path else ""
        return f"{self.location}: {self.severity}: {subject}{self.message}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping of every field."""
        return {
            "severity": self.severity,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.path,
        }


def _sort_key(d: Diagnostic) -> tuple[str, int, int, str]:
    return (d.file or "", d.line or 0, d.column or 0, d.message)


def sort_diagnostics(diagnostics: Iterable[Diagnostic]) -> tuple[Diagnostic, ...]:
    """Diagnostics in file order, duplicates removed."""
    return tuple(sorted(set(diagnostics), key=_sort_key))


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """The outcome of validating a project: the model when it is valid, and every finding."""

    project: Project | None
    diagnostics: tuple[Diagnostic, ...]
    workflows: tuple[str, ...] = ()
    """Names of the workflows found, even when the project did not validate."""
    source: SourceMap | None = field(default=None, compare=False, repr=False)
    """Where each value of the project is written, to locate findings made later."""

    def with_findings(self, findings: Iterable[tuple[DataPath, Severity, str]]) -> ValidationReport:
        """This report with more findings, each ``(data path, severity, message)``,
        located in the project's files (checks made after validation: a relayer's
        signer asked for its address). An error among them leaves no project."""
        extra = [
            Diagnostic.at(self.source.value(path) if self.source else None, message, path, severity)
            for path, severity, message in findings
        ]
        if not extra:
            return self
        diagnostics = sort_diagnostics([*self.diagnostics, *extra])
        ok = not any(d.severity == "error" for d in diagnostics)
        return ValidationReport(
            self.project if ok else None, diagnostics, self.workflows, self.source
        )

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        """The diagnostics with severity ``error``."""
        return tuple(d for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        """The diagnostics with severity ``warning``."""
        return tuple(d for d in self.diagnostics if d.severity == "warning")

    @property
    def ok(self) -> bool:
        """True when there are no errors (warnings allowed)."""
        return not self.errors


class ConfigError(Exception):
    """A project that does not validate; ``diagnostics`` holds every finding."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        errors = [d for d in self.diagnostics if d.severity == "error"]
        lines = "\n".join(str(d) for d in errors)
        super().__init__(
            f"{len(errors)} error{'s' if len(errors) != 1 else ''} in the workflow project:\n{lines}"
        )
