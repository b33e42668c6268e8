"""Loading a project from one YAML file or a folder of them, with every finding located.

A folder is read recursively: every ``*.yaml`` and ``*.yml`` below it, in sorted order
of their relative paths, skipping hidden files and folders (names starting with ``.``).
The files' top-level sections are merged; a name defined in two files (two workflows
called the same, a network declared twice, a ``config`` setting given twice) is an error
that names both places.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from rflow.lang.checks import Checker, ProjectView, WorkflowView, nested
from rflow.lang.deferred import NESTED_LISTS, check_placeholders
from rflow.lang.diagnostics import (
    ConfigError,
    Diagnostic,
    Location,
    ValidationReport,
    sort_diagnostics,
)
from rflow.lang.files import Files
from rflow.lang.messages import Translator
from rflow.lang.model.common import Name
from rflow.lang.model.project import SECTIONS, Project
from rflow.lang.model.resources import (
    Budget,
    Channel,
    CommandSpec,
    Config,
    Contract,
    Network,
    Principal,
    Relayer,
)
from rflow.lang.model.steps import Step
from rflow.lang.model.triggers import Trigger
from rflow.lang.model.workflow import CircuitBreaker, Permissions, Strategy, Workflow
from rflow.lang.money import MoneyChecker
from rflow.lang.reading import read_files
from rflow.lang.references import ReferenceChecker, check_outside_workflows
from rflow.lang.yamlsrc import SourceMap, load_yaml

_SINGULAR = {
    "networks": "network",
    "contracts": "contract",
    "relayers": "relayer",
    "channels": "channel",
    "commands": "command",
    "budgets": "budget",
    "principals": "principal",
    "workflows": "workflow",
    "config": "config setting",
}


def validate_path(
    path: str | Path, env: Mapping[str, str], files: Files | None = None
) -> ValidationReport:
    """Validate the project in a YAML file or a folder of them; ``files`` reads the ABI
    files it names (default: from the disk).

    Raises ``FileNotFoundError`` when ``path`` does not exist; every problem with the
    project itself is a diagnostic in the report.
    """
    sources, diagnostics = read_files(path)
    if not sources and diagnostics:
        return ValidationReport(None, tuple(diagnostics))
    report = validate_sources(sources, env, files)
    return ValidationReport(
        report.project if not diagnostics else None,
        sort_diagnostics([*diagnostics, *report.diagnostics]),
        report.workflows,
        report.source,
    )


def load_project(path: str | Path, env: Mapping[str, str]) -> Project:
    """The validated project at ``path``; :class:`ConfigError` lists every error."""
    report = validate_path(path, env)
    if report.project is None or not report.ok:
        raise ConfigError(report.diagnostics)
    return report.project


def validate_text(text: str, env: Mapping[str, str], file: str = "<string>") -> ValidationReport:
    """Validate a project given as one YAML text; ``file`` names it in diagnostics."""
    return validate_sources([(file, text)], env)


def validate_sources(
    sources: Iterable[tuple[str, str]], env: Mapping[str, str], files: Files | None = None
) -> ValidationReport:
    """Validate a project made of ``(file name, YAML text)`` pairs, merged in order;
    ``files`` reads the ABI files it names (default: from the disk).

    The ABI a contract names by file is in the valid project's model as a list of
    entries, as if written inline: a loaded project needs no file.
    """
    diagnostics: list[Diagnostic] = []
    data: dict[str, Any] = {}
    source = SourceMap()
    for file, text in sources:
        loaded = load_yaml(text, file, env)
        diagnostics.extend(loaded.diagnostics)
        if loaded.data is None:
            continue
        if not isinstance(loaded.data, dict):
            diagnostics.append(
                Diagnostic.at(
                    loaded.source.value(()) or Location(file, 1, 1),
                    "the top level of a workflow file must be a mapping of sections: "
                    + ", ".join(SECTIONS),
                )
            )
            continue
        diagnostics.extend(_merge(data, source, loaded.data, loaded.source))
    project, found = _validate(data, source, env, files)
    diagnostics.extend(found)
    workflows = data.get("workflows")
    names = tuple(n for n in workflows if isinstance(n, str)) if isinstance(workflows, dict) else ()
    report = sort_diagnostics(diagnostics)
    ok = not any(d.severity == "error" for d in report)
    return ValidationReport(project if ok else None, report, names, source)


def _merge(
    data: dict[str, Any], source: SourceMap, new: dict[str, Any], new_source: SourceMap
) -> list[Diagnostic]:
    diagnostics: list[Diagnostic] = []
    accepted: set[tuple[str, str]] = set()
    fresh: set[str] = set()
    for section, value in new.items():
        if section not in data:
            data[section] = dict(value) if isinstance(value, dict) else value
            fresh.add(section)
            continue
        existing = data[section]
        if not (isinstance(existing, dict) and isinstance(value, dict)):
            first = source.key((section,))
            diagnostics.append(
                Diagnostic.at(
                    new_source.key((section,)),
                    f"section {section!r} is given in two files and is not a mapping of names (first at {first})",
                    (section,),
                )
            )
            continue
        kind = _SINGULAR.get(section, f"{section!r} entry")
        for name, item in value.items():
            if name in existing:
                first = source.key((section, name))
                diagnostics.append(
                    Diagnostic.at(
                        new_source.key((section, name)),
                        f"{kind} {name!r} is defined twice: here and at {first}",
                        (section, name),
                    )
                )
                continue
            existing[name] = item
            accepted.add((section, name))

    def keep(path: tuple[Any, ...]) -> bool:
        return (
            (len(path) >= 1 and path[0] in fresh)
            or (len(path) >= 2 and (path[0], path[1]) in accepted)
            or len(path) <= 1
        )

    source.merge(new_source, keep)
    return diagnostics


def _validate(
    data: dict[str, Any], source: SourceMap, env: Mapping[str, str], files: Files | None
) -> tuple[Project | None, list[Diagnostic]]:
    diagnostics: list[Diagnostic] = []
    for section, value in data.items():
        if section != "workflows":
            diagnostics.extend(check_outside_workflows(section, value, source))
    diagnostics.extend(check_placeholders(data, source))
    project: Project | None
    try:
        project = Project.model_validate(data)
        view = ProjectView.of(project)
    except ValidationError as exc:
        diagnostics.extend(Translator(Project, data, source).translate(exc))
        project = None
        view = _lenient(data)
    checker = Checker(view, source, env, files)
    diagnostics.extend(checker.run())
    diagnostics.extend(MoneyChecker(view, source).run())
    if project is not None and checker.abi_files:
        project = _with_abis(project, checker.abi_files)
    workflows = data.get("workflows")
    if isinstance(workflows, dict):
        for name, raw in workflows.items():
            if isinstance(raw, dict):
                diagnostics.extend(
                    ReferenceChecker(name, raw, source, checker.event_args.get(name)).run()
                )
    return project, diagnostics


def _with_abis(project: Project, entries: Mapping[str, list[Any]]) -> Project:
    """``project`` with the ABI of each contract that names a file given inline instead."""
    contracts = {
        name: contract.model_copy(update={"abi": entries[name]})
        if isinstance(contract.abi, str) and name in entries
        else contract
        for name, contract in project.contracts.items()
    }
    return project.model_copy(update={"contracts": contracts})


@functools.cache
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


def _try(tp: Any, value: Any) -> Any:
    try:
        return _adapter(tp).validate_python(value)
    except ValidationError:
        return None


def _section(data: dict[str, Any], section: str) -> dict[str, Any]:
    value = data.get(section)
    return value if isinstance(value, dict) else {}


def _lenient(data: dict[str, Any]) -> ProjectView:
    """The parts of ``data`` that validate on their own, for cross-reference checks."""
    view = ProjectView(
        declared={
            s: frozenset(k for k in _section(data, s) if isinstance(k, str)) for s in SECTIONS
        }
    )
    for section, tp in (
        ("networks", Network),
        ("contracts", Contract),
        ("relayers", Relayer),
        ("channels", Channel),
        ("commands", CommandSpec),
        ("budgets", Budget),
        ("principals", Principal),
    ):
        target = getattr(view, section)
        for name, raw in _section(data, section).items():
            if _try(Name, name) is not None and (value := _try(tp, raw)) is not None:
                target[name] = value
    view.config = _try(Config, data.get("config") or {}) or Config()
    for name, raw in _section(data, "workflows").items():
        if not isinstance(raw, dict):
            continue
        workflow = _try(Workflow, raw)
        view.workflows[name] = (
            WorkflowView.of(workflow) if workflow is not None else _lenient_workflow(raw)
        )
    return view


def _lenient_workflow(raw: dict[str, Any]) -> WorkflowView:
    steps: list[tuple[tuple[str | int, ...], Any]] = []
    for block in ("steps", "on_error", "finally"):
        steps += _lenient_steps(raw.get(block), (block,))
    return WorkflowView(
        permissions=_try(Permissions, raw.get("permissions") or {}) or Permissions(),
        budgets=_try(list[Name], raw.get("budgets") or []) or [],
        circuit_breaker=_try(CircuitBreaker, raw["circuit_breaker"])
        if "circuit_breaker" in raw
        else None,
        strategy=_try(Strategy, raw["strategy"]) if "strategy" in raw else None,
        triggers=_lenient_triggers(raw),
        steps=steps,
    )


def _lenient_steps(items: Any, path: tuple[str | int, ...]) -> list[tuple[Any, Any]]:
    """The steps of a raw list that validate, at any depth: a block that does not
    validate as a whole still offers the steps inside it that do."""
    found: list[tuple[Any, Any]] = []
    for index, item in enumerate(items if isinstance(items, list) else []):
        step = _try(Step, item)
        if step is not None:
            found += nested((*path, index), step)
        elif isinstance(item, dict):
            for key in NESTED_LISTS:
                found += _lenient_steps(item.get(key), (*path, index, key))
    return found


def _lenient_triggers(raw: dict[str, Any]) -> list[tuple[tuple[str | int, ...], Any]]:
    """The triggers of ``raw`` that validate on their own, with their paths."""
    found: list[tuple[tuple[str | int, ...], Any]] = []
    if "trigger" in raw and (trigger := _try(Trigger, raw["trigger"])) is not None:
        found.append((("trigger",), trigger))
    listed = raw.get("triggers")
    for index, item in enumerate(listed if isinstance(listed, list) else []):
        if (trigger := _try(Trigger, item)) is not None:
            found.append((("triggers", index), trigger))
    return found
