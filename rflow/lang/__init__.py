"""The rflow workflow language: YAML files in, a validated, frozen model out.

Two entry points, both pure (no network, no database, no chain) and both taking the
environment explicitly (the CLI passes :func:`rflow.settings.environ`):

``load_project(path, env) -> Project``
    The validated project in a YAML file or a folder of YAML files. Raises
    :class:`ConfigError` whose ``diagnostics`` hold every error (and warning) found.

``validate_path(path, env) -> ValidationReport``
    Never raises for a bad project: the report carries the project (``None`` when
    there are errors), every :class:`Diagnostic` in file order, and the names of the
    workflows found. Raises ``FileNotFoundError`` only when ``path`` does not exist.

``validate_text(text, env, file)`` and ``validate_sources([(file, text), ...], env)``
do the same for YAML held in memory. ``read_source(path, env)`` also returns the
project's :class:`ProjectSource` (its YAML and ABI files as text, what a deployment
stores), which validates again anywhere with ``source.validate(env)``.

A :class:`Diagnostic` is an error or a warning with a message worded for a person, the
file, 1-based line and column, and the dotted data path it is about. Warnings (an
unset secret, a budget token with no matching contract) never make a project invalid.

``${VAR}`` and ``${VAR:-default}`` in string values are replaced from ``env`` when the
files load (``$${`` is a literal ``${``); ``${{ ... }}`` expressions are checked here and
evaluated at run time by :mod:`rflow.expr`. Amounts and durations parse with
:mod:`rflow.lang.units`.

The names below are imported from their module when first used, so a reader of one
submodule (``rflow.lang.units``, say: the CLI's budget listing) does not pay for the
models, the checks and the YAML loader.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rflow.lang.diagnostics import (
        ConfigError,
        Diagnostic,
        Location,
        Severity,
        ValidationReport,
        format_path,
    )
    from rflow.lang.loader import load_project, validate_path, validate_sources, validate_text
    from rflow.lang.model import Project, Step, Workflow
    from rflow.lang.reading import project_files
    from rflow.lang.schema import project_schema, schema_text
    from rflow.lang.source import ProjectSource, read_source
    from rflow.lang.units import (
        UnitError,
        format_amount,
        format_duration,
        parse_amount,
        parse_duration,
        parse_token_amount,
    )

_HOMES = {
    **dict.fromkeys(
        ("ConfigError", "Diagnostic", "Location", "Severity", "ValidationReport", "format_path"),
        "diagnostics",
    ),
    **dict.fromkeys(
        ("load_project", "validate_path", "validate_sources", "validate_text"), "loader"
    ),
    **dict.fromkeys(("Project", "Step", "Workflow"), "model"),
    "project_files": "reading",
    **dict.fromkeys(("project_schema", "schema_text"), "schema"),
    **dict.fromkeys(("ProjectSource", "read_source"), "source"),
    **dict.fromkeys(
        (
            "UnitError",
            "format_amount",
            "format_duration",
            "parse_amount",
            "parse_duration",
            "parse_token_amount",
        ),
        "units",
    ),
}
"""Each exported name and the submodule that defines it."""


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'rflow.lang' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rflow.lang.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ConfigError",
    "Diagnostic",
    "Location",
    "Project",
    "ProjectSource",
    "Severity",
    "Step",
    "UnitError",
    "ValidationReport",
    "Workflow",
    "format_amount",
    "format_duration",
    "format_path",
    "load_project",
    "parse_amount",
    "parse_duration",
    "parse_token_amount",
    "project_files",
    "project_schema",
    "read_source",
    "schema_text",
    "validate_path",
    "validate_sources",
    "validate_text",
]
