"""Where the files a project names (its ABI files) are read from: the disk, or a stored
deployment's copy of them.

A project's YAML files are read by the loader; the ABI files they name are read while
the project is checked, through a :class:`Files`. On the disk (:class:`DiskFiles`, which
also records what it read, so that ``rflow deploy`` can store it), or from the texts a
deployment stored (:class:`StoredFiles`): a worker then loads the project exactly as the
deploying machine did, whatever is on its own disk.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from rflow.lang.yamlsrc import MAX_FILE_BYTES


class FileTooLarge(Exception):
    """A file over :data:`~rflow.lang.yamlsrc.MAX_FILE_BYTES`."""


def file_key(path: Path | str) -> str:
    """The name a file read through :class:`Files` is known by: its path, normalised
    (``a/./b/../c.json`` is ``a/c.json``), as the YAML that names it resolves it."""
    return os.path.normpath(str(path))


class Files(Protocol):
    """Reads the text of a file a project names."""

    def read_text(self, path: Path) -> str:
        """The file's text; ``FileNotFoundError``, :class:`FileTooLarge`, ``OSError`` or
        ``UnicodeDecodeError`` when it cannot be had."""
        ...


class DiskFiles:
    """Files on the disk; :attr:`read` keeps the text of each one read, by its key."""

    def __init__(self) -> None:
        self.read: dict[str, str] = {}

    def read_text(self, path: Path) -> str:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise FileTooLarge(str(path))
        text = path.read_bytes().decode("utf-8")
        self.read[file_key(path)] = text
        return text


class StoredFiles:
    """Files as a deployment stored them, by key; nothing is read from the disk."""

    def __init__(self, texts: Mapping[str, str]) -> None:
        self.texts = texts

    def read_text(self, path: Path) -> str:
        text = self.texts.get(file_key(path))
        if text is None:
            raise FileNotFoundError(str(path))
        return text
