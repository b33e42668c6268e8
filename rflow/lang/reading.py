"""Which files make up a project, and reading them as text.

A folder is read recursively: every ``*.yaml`` and ``*.yml`` below it, in sorted order
of their relative paths, skipping hidden files and folders (names starting with ``.``).
Light on purpose (no models, no checks): :mod:`rflow.lang.loader` validates what is read
here, and :mod:`rflow.lang.sections` reads one section without the rest.
"""

from __future__ import annotations

from pathlib import Path

from rflow.lang.diagnostics import Diagnostic, Location
from rflow.lang.yamlsrc import MAX_FILE_BYTES

YAML_SUFFIXES = (".yaml", ".yml")
MAX_FILES = 1000


def project_files(path: Path) -> list[Path]:
    """The YAML files that make up the project at ``path`` (a file or a folder)."""
    if not path.exists():
        raise FileNotFoundError(f"no such file or folder: {path}")
    if path.is_file():
        return [path]
    found = []
    for candidate in path.rglob("*"):
        relative = candidate.relative_to(path)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if candidate.suffix in YAML_SUFFIXES and candidate.is_file():
            found.append(candidate)
    return sorted(found, key=lambda p: p.relative_to(path).as_posix())


def _read(path: Path) -> tuple[str | None, Diagnostic | None]:
    start = Location(str(path), 1, 1)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            return None, Diagnostic.at(
                start, f"the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB"
            )
        return path.read_bytes().decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return None, Diagnostic.at(start, f"the file is not UTF-8 text (byte {exc.start})")
    except OSError as exc:
        return None, Diagnostic.at(start, f"cannot read the file: {exc.strerror or exc}")


def read_files(path: str | Path) -> tuple[list[tuple[str, str]], list[Diagnostic]]:
    """The ``(file name, text)`` of each YAML file of the project at ``path``, in load
    order, and the problems that kept any from being read (none found is one).

    Raises ``FileNotFoundError`` when ``path`` does not exist.
    """
    root = Path(path)
    files = project_files(root)
    if not files:
        return [], [Diagnostic("error", f"no .yaml or .yml files in {root}", str(root))]
    if len(files) > MAX_FILES:
        return [], [Diagnostic("error", f"more than {MAX_FILES} YAML files", str(root))]
    sources: list[tuple[str, str]] = []
    diagnostics: list[Diagnostic] = []
    for file in files:
        text, problem = _read(file)
        if problem is not None:
            diagnostics.append(problem)
        elif text is not None:
            sources.append((str(file), text))
    return sources, diagnostics
