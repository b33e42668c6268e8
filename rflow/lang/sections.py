"""One section of a project read without validating the rest: what a command that lists
a section needs (``rflow budgets ls``), at a fraction of a full validation's cost.

The section is merged from every file and validated on its own. Anything wrong with it
(a file that does not read or parse, a name defined twice, a value its model refuses)
sends the whole project through :func:`rflow.lang.load_project`, so the problem is
reported as ``rflow validate`` reports it, at its file, line and column. Problems
elsewhere in the project, and the cross-checks of the section against other sections
(a budget scoped to an undeclared relayer), are left to ``rflow validate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rflow.lang.reading import read_files
from rflow.lang.yamlsrc import load_yaml

if TYPE_CHECKING:
    from rflow.lang.model.resources import Budget


class _Unclear(Exception):
    """The section is not plainly valid: the full validation says why."""


def _section(path: str | Path, env: Mapping[str, str], name: str) -> dict[str, Any]:
    sources, problems = read_files(path)
    if problems:
        raise _Unclear
    merged: dict[str, Any] = {}
    for file, text in sources:
        loaded = load_yaml(text, file, env)
        if any(d.severity == "error" for d in loaded.diagnostics):
            raise _Unclear
        if not isinstance(loaded.data, dict):
            if loaded.data is None:
                continue
            raise _Unclear
        section = loaded.data.get(name)
        if section is None:
            continue
        if not isinstance(section, dict) or merged.keys() & section.keys():
            raise _Unclear
        merged.update(section)
    return merged


def load_budgets(path: str | Path, env: Mapping[str, str]) -> dict[str, Budget]:
    """The budgets the project at ``path`` declares, by name.

    Raises :class:`~rflow.lang.ConfigError` (with every diagnostic) when the budgets
    section has a problem, and ``FileNotFoundError`` when ``path`` does not exist.
    """
    from pydantic import TypeAdapter, ValidationError

    from rflow.lang.model.common import Name
    from rflow.lang.model.resources import Budget

    try:
        section = _section(path, env, "budgets")
        return TypeAdapter(dict[Name, Budget]).validate_python(section)
    except (_Unclear, ValidationError):
        from rflow.lang.loader import load_project

        return dict(load_project(path, env).budgets)
