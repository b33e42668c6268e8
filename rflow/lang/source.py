"""A project as text: what a deployment stores, and how it loads again.

``rflow deploy`` stores a project's source, never its loaded model: ``${VAR}`` values
are substituted when a file loads, and each worker loads the source with its own
environment, so a resolved secret never reaches the database. The source is the YAML
files, by the names they were read under, and the ABI files they name, by the path the
YAML resolves them to: loaded again from it, the project names and finds the same files
on any machine.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rflow.lang.diagnostics import ValidationReport, sort_diagnostics
from rflow.lang.files import DiskFiles, StoredFiles
from rflow.lang.loader import read_files, validate_sources


@dataclass(frozen=True)
class ProjectSource:
    """A project's YAML files in load order, and the ABI files they name."""

    files: tuple[tuple[str, str], ...]
    """``(file name, YAML text)``, merged in this order."""
    abis: tuple[tuple[str, str], ...] = ()
    """``(path as the YAML resolves it, text)`` of every ABI file it names."""

    @property
    def digest(self) -> str:
        """``sha256:<hex>`` of the source: equal sources, equal digests."""
        canonical = json.dumps(self.document(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()

    def document(self) -> dict[str, Any]:
        """The source as a JSON document (how the ``deployments`` table keeps it)."""
        return {
            "files": [{"name": name, "text": text} for name, text in self.files],
            "abis": [{"path": path, "text": text} for path, text in self.abis],
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> ProjectSource:
        """The source a :meth:`document` describes; ``ValueError`` if it is not one."""
        try:
            files = tuple((str(f["name"]), str(f["text"])) for f in document["files"])
            abis = tuple((str(a["path"]), str(a["text"])) for a in document.get("abis") or ())
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a project source document: {exc!r}") from None
        return cls(files, abis)

    def validate(self, env: Mapping[str, str]) -> ValidationReport:
        """Validate the source with ``env``, reading ABI files from the source only."""
        return validate_sources(self.files, env, StoredFiles(dict(self.abis)))


def read_source(path: str | Path, env: Mapping[str, str]) -> tuple[ProjectSource, ValidationReport]:
    """Read and validate the project at ``path``: its source (the YAML files, and the
    ABI files the checks read) and the report. Raises ``FileNotFoundError`` when
    ``path`` does not exist."""
    sources, problems = read_files(path)
    disk = DiskFiles()
    report = validate_sources(sources, env, disk) if sources else None
    source = ProjectSource(tuple(sources), tuple(sorted(disk.read.items())))
    if report is None:
        return source, ValidationReport(None, tuple(problems))
    if not problems:
        return source, report
    return source, ValidationReport(
        None, sort_diagnostics([*problems, *report.diagnostics]), report.workflows
    )
