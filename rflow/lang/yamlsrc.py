"""YAML loading that remembers where every key and value came from.

The loader walks PyYAML's event stream (iterative, so deep nesting cannot exhaust the
Python stack) and builds plain data and a :class:`SourceMap` in one pass. On the way it
refuses what PyYAML would silently accept or expand:

* duplicate mapping keys (PyYAML keeps the last one);
* more than :data:`MAX_ALIASES` aliases, or aliases that expand past :data:`MAX_NODES`
  nodes (the "billion laughs" YAML bomb); anchors and aliases are otherwise allowed;
* merge keys (``<<``), explicit tags (``!!python/object`` ...), complex keys, and more
  than one document per file;
* nesting deeper than :data:`MAX_DEPTH`.

Scalars follow the JSON-like core of YAML: ``true``/``false``, ``null``/``~``, decimal
integers and decimal floats. Everything else is a string, so ``0xA0b8...`` addresses,
``on``/``yes`` and ``2025-01-01`` stay exactly as written. Mapping keys are always strings.
``${VAR}`` environment substitution is applied to string values (see :mod:`.envsubst`),
except inside workflow steps: there the text is checked but kept as written, to be filled
in when the step's effect runs (:data:`SourceMap.deferred` lists such strings).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from rflow.lang.diagnostics import DataPath, Diagnostic, Location
from rflow.lang.envsubst import EnvSubstitutionError, substitute

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
MAX_ALIASES = 100
MAX_NODES = 250_000

_Parser: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_SPECIAL = {
    "": None, "~": None, "null": None, "Null": None, "NULL": None,
    "true": True, "True": True, "TRUE": True,
    "false": False, "False": False, "FALSE": False,
    ".inf": float("inf"), ".Inf": float("inf"), ".INF": float("inf"),
    "+.inf": float("inf"), "-.inf": float("-inf"), "-.Inf": float("-inf"),
    ".nan": float("nan"), ".NaN": float("nan"), ".NAN": float("nan"),
}  # fmt: skip
_STR_TAG = "tag:yaml.org,2002:str"
_STEP_LISTS = ("steps", "finally", "on_error")
_COLLECTION_TAGS = {None, "!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


def _short_tag(tag: str) -> str:
    return tag.replace("tag:yaml.org,2002:", "!!")


def in_steps(path: DataPath) -> bool:
    """Whether ``path`` lies inside a workflow's ``steps``, ``finally`` or ``on_error`` list, where
    ``${VAR}`` is filled in when an effect runs instead of when the file loads."""
    return len(path) >= 3 and path[0] == "workflows" and path[2] in _STEP_LISTS


class SourceMap:
    """Locations of keys and values by data path.

    ``origins`` holds, for single-line strings written exactly as loaded, the position of
    their first character, so an offset into the string maps to a column. ``substituted``
    names the environment variables a string was built from, so messages can avoid
    echoing values that may be secret. ``deferred`` holds the strings inside steps that
    were kept as written although substitution would change them (``${VAR}`` or ``$${``),
    with the variables each names.
    """

    __slots__ = ("deferred", "keys", "origins", "substituted", "unresolved", "values")

    def __init__(self) -> None:
        self.values: dict[DataPath, Location] = {}
        self.keys: dict[DataPath, Location] = {}
        self.origins: dict[DataPath, Location] = {}
        self.substituted: dict[DataPath, tuple[str, ...]] = {}
        self.deferred: dict[DataPath, tuple[str, ...]] = {}
        self.unresolved: set[DataPath] = set()
        """Strings whose substitution failed (already reported; kept as written)."""

    def value(self, path: DataPath) -> Location | None:
        """Where the value at ``path`` starts, or the nearest enclosing value's start."""
        for end in range(len(path), -1, -1):
            found = self.values.get(path[:end])
            if found is not None:
                return found
        return None

    def key(self, path: DataPath) -> Location | None:
        """Where the key naming ``path`` is written, falling back to :meth:`value`."""
        return self.keys.get(path) or self.value(path)

    def at_offset(self, path: DataPath, offset: int) -> Location | None:
        """The position ``offset`` characters into the string at ``path``, when known."""
        origin = self.origins.get(path)
        if origin is None or offset < 0:
            return self.value(path)
        return Location(origin.file, origin.line, origin.column + offset)

    def merge(self, other: SourceMap, keep: Any = None) -> None:
        """Add ``other``'s entries whose path satisfies ``keep`` (all when ``None``)."""
        for mine, theirs in (
            (self.values, other.values),
            (self.keys, other.keys),
            (self.origins, other.origins),
            (self.substituted, other.substituted),
            (self.deferred, other.deferred),
        ):
            for path, item in theirs.items():
                if (keep is None or keep(path)) and path not in mine:
                    mine[path] = item
        self.unresolved |= {p for p in other.unresolved if keep is None or keep(p)}


@dataclass
class LoadedYaml:
    """One parsed file: its data (``None`` when it could not be read), locations, findings."""

    data: Any
    source: SourceMap
    diagnostics: list[Diagnostic] = field(default_factory=list)


class _Abort(Exception):
    def __init__(self, diagnostic: Diagnostic) -> None:
        self.diagnostic = diagnostic


@dataclass(slots=True)
class _Frame:
    container: Any
    path: DataPath
    record: bool
    anchor: str | None = None
    nodes_at_start: int = 0
    log_at_start: int = 0
    key: str = ""
    have_key: bool = False
    discard: bool = False
    key_lines: dict[str, int] = field(default_factory=dict)


class _Builder:
    def __init__(self, text: str, file: str, env: Mapping[str, str]) -> None:
        self.text = text
        self.file = file
        self.env = env
        self.source = SourceMap()
        self.diagnostics: list[Diagnostic] = []
        self.stack: list[_Frame] = []
        self.anchors: dict[
            str, tuple[Any, DataPath, int, list[tuple[str, DataPath, Location]]]
        ] = {}
        self.log: list[tuple[str, DataPath, Location]] = []
        self.root: Any = None
        self.nodes = 0
        self.aliases = 0
        self.documents = 0

    def loc(self, mark: Any) -> Location:
        return Location(self.file, mark.line + 1, mark.column + 1)

    def abort(self, mark: Any, message: str) -> _Abort:
        return _Abort(Diagnostic.at(self.loc(mark), message))

    def run(self) -> Any:
        for event in yaml.parse(self.text, Loader=_Parser):
            kind = type(event)
            if kind is yaml.ScalarEvent:
                self.scalar(event)
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                self.start(event, {} if kind is yaml.MappingStartEvent else [])
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                self.end()
            elif kind is yaml.AliasEvent:
                self.alias(event)
            elif kind is yaml.DocumentStartEvent:
                self.documents += 1
                if self.documents > 1:
                    raise self.abort(
                        event.start_mark, "a file holds one YAML document; found a second '---'"
                    )
        for kind, path, location in self.log:
            (self.source.keys if kind == "k" else self.source.values)[path] = location
        return self.root

    def awaiting_key(self) -> bool:
        if not self.stack:
            return False
        top = self.stack[-1]
        return isinstance(top.container, dict) and not top.have_key

    def count(self, mark: Any, nodes: int = 1) -> None:
        self.nodes += nodes
        if self.nodes > MAX_NODES:
            raise self.abort(
                mark,
                f"the document expands to more than {MAX_NODES} values "
                "(through aliases?); refusing to load it",
            )

    def attach(self, value: Any, mark: Any) -> tuple[DataPath, bool]:
        if not self.stack:
            self.root = value
            path: DataPath = ()
            record = True
        else:
            top = self.stack[-1]
            if isinstance(top.container, list):
                path = (*top.path, len(top.container))
                top.container.append(value)
                record = top.record
            else:
                path = (*top.path, top.key)
                record = top.record and not top.discard
                if record:
                    top.container[top.key] = value
                top.have_key = False
        if record:
            self.log.append(("v", path, self.loc(mark)))
        return path, record

    def key(self, event: Any) -> None:
        top = self.stack[-1]
        key = event.value
        if key == "<<" and not event.style:
            raise self.abort(
                event.start_mark,
                "merge keys (<<) are not supported: repeat the fields, "
                "or point an alias at the whole value",
            )
        if event.tag not in (None, "!", _STR_TAG):
            raise self.abort(
                event.start_mark, f"YAML tags ({_short_tag(event.tag)}) are not supported"
            )
        top.key, top.have_key = key, True
        top.discard = False
        if not top.record:
            return
        path = (*top.path, key)
        if key in top.key_lines:
            top.discard = True
            self.diagnostics.append(
                Diagnostic.at(
                    self.loc(event.start_mark),
                    f"duplicate key {key!r} (first defined on line {top.key_lines[key]})",
                    path,
                )
            )
            return
        top.key_lines[key] = event.start_mark.line + 1
        self.log.append(("k", path, self.loc(event.start_mark)))

    def scalar(self, event: Any) -> None:
        if self.awaiting_key():
            self.key(event)
            return
        self.count(event.start_mark)
        value = self.resolve(event)
        path, record = self.attach(value, event.start_mark)
        if isinstance(value, str) and record:
            value = self.substitute(value, path, event)
        if event.anchor is not None:
            self.anchors[event.anchor] = (value, path, 1, [("v", path, self.loc(event.start_mark))])

    def resolve(self, event: Any) -> Any:
        value = event.value
        tag = event.tag
        if tag not in (None, "!", _STR_TAG):
            raise self.abort(event.start_mark, f"YAML tags ({_short_tag(tag)}) are not supported")
        if event.style or tag is not None or not event.implicit[0]:
            return value
        if value in _SPECIAL:
            return _SPECIAL[value]
        if _INT.fullmatch(value):
            return int(value)
        if _FLOAT.fullmatch(value):
            return float(value)
        return value

    def substitute(self, value: str, path: DataPath, event: Any) -> str:
        try:
            new, used = substitute(value, self.env)
        except EnvSubstitutionError as exc:
            self.diagnostics.append(Diagnostic.at(self.loc(event.start_mark), str(exc), path))
            self.source.unresolved.add(path)
            return value
        if in_steps(path):
            # Checked, but filled in only when the step's effect runs: the value never
            # enters the definition, the run state or the journal.
            if new != value:
                self.source.deferred[path] = used
            new = value
        elif used:
            self.source.substituted[path] = used
        if new is not value:
            self.replace(path, new)
        if "${{" in new:
            # Measured back from the end so an anchor or tag before the value does not count.
            start, end = event.start_mark, event.end_mark
            quote = int(event.style in ('"', "'"))
            first = end.index - quote - len(new)
            if start.line == end.line and self.text[first : end.index - quote] == new:
                column = end.column - quote - len(new) + 1
                self.source.origins[path] = Location(self.file, end.line + 1, column)
        return new

    def replace(self, path: DataPath, value: Any) -> None:
        if not self.stack:
            self.root = value
            return
        container = self.stack[-1].container
        container[path[-1]] = value

    def start(self, event: Any, container: dict[str, Any] | list[Any]) -> None:
        if self.awaiting_key():
            raise self.abort(event.start_mark, "mapping keys must be plain text, not a collection")
        if event.tag not in _COLLECTION_TAGS:
            raise self.abort(
                event.start_mark, f"YAML tags ({_short_tag(event.tag)}) are not supported"
            )
        if len(self.stack) >= MAX_DEPTH:
            raise self.abort(event.start_mark, f"nesting is deeper than {MAX_DEPTH} levels")
        self.count(event.start_mark)
        path, record = self.attach(container, event.start_mark)
        self.stack.append(
            _Frame(container, path, record, event.anchor, self.nodes, len(self.log) - 1)
        )

    def end(self) -> None:
        frame = self.stack.pop()
        if frame.anchor is not None:
            size = self.nodes - frame.nodes_at_start + 1
            entries = self.log[max(frame.log_at_start, 0) :] if frame.record else []
            self.anchors[frame.anchor] = (frame.container, frame.path, size, entries)

    def alias(self, event: Any) -> None:
        if self.awaiting_key():
            raise self.abort(event.start_mark, "mapping keys must be plain text, not an alias")
        self.aliases += 1
        if self.aliases > MAX_ALIASES:
            raise self.abort(
                event.start_mark,
                f"more than {MAX_ALIASES} aliases (*name) in one file; "
                "refusing it as a possible YAML bomb",
            )
        found = self.anchors.get(event.anchor)
        if found is None:
            raise self.abort(event.start_mark, f"alias *{event.anchor} names no earlier anchor")
        value, anchor_path, size, entries = found
        self.count(event.start_mark, size)
        path, record = self.attach(value, event.start_mark)
        if record:
            cut = len(anchor_path)
            self.log.extend((kind, (*path, *p[cut:]), loc) for kind, p, loc in entries[1:])
            if in_steps(path) != in_steps(anchor_path):
                self.across_steps(event, anchor_path, path)
            # Rare per-string facts are copied by scanning; aliases are few (MAX_ALIASES).
            for table in (self.source.substituted, self.source.deferred, self.source.origins):
                for p, fact in list(table.items()):
                    if p[:cut] == anchor_path:
                        table[(*path, *p[cut:])] = fact  # type: ignore[index]
            for p in list(self.source.unresolved):
                if p[:cut] == anchor_path:
                    self.source.unresolved.add((*path, *p[cut:]))

    def across_steps(self, event: Any, anchor_path: DataPath, path: DataPath) -> None:
        """An alias copying ``${VAR}`` into a step from outside (where it was substituted,
        so the value would become part of the step), or out of a step (where it was kept
        as written, so it would never be filled in): refused either way."""
        cut = len(anchor_path)
        table = self.source.deferred if in_steps(anchor_path) else self.source.substituted
        used = sorted({n for p, names in table.items() if p[:cut] == anchor_path for n in names})
        if not used:
            return
        listed = ", ".join(f"${{{n}}}" for n in used)
        where = "into a step" if in_steps(path) else "out of a step"
        self.diagnostics.append(
            Diagnostic.at(
                self.loc(event.start_mark),
                f"this alias copies {listed} {where}: write {listed} where it is used "
                "(inside steps it is filled in when the step runs, elsewhere when the file loads)",
                path,
            )
        )
        self.source.unresolved.add(path)


def load_yaml(text: str, file: str, env: Mapping[str, str]) -> LoadedYaml:
    """Parse ``text`` (the contents of ``file``) into plain data with locations.

    Never raises for bad input: problems are returned as diagnostics, and ``data`` is
    ``None`` when the file could not be read at all.
    """
    builder = _Builder(text, file, env)
    try:
        data = builder.run()
    except _Abort as abort:
        return LoadedYaml(None, SourceMap(), [*builder.diagnostics, abort.diagnostic])
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        location = Location(file, mark.line + 1, mark.column + 1) if mark else Location(file, 1, 1)
        problem = exc.problem or exc.context or "the text is not valid YAML"
        context = f" ({exc.context})" if exc.context and exc.problem else ""
        message = f"YAML syntax error: {problem}{context}"
        return LoadedYaml(
            None, SourceMap(), [*builder.diagnostics, Diagnostic.at(location, message)]
        )
    except yaml.YAMLError as exc:
        message = f"YAML syntax error: {exc}"
        return LoadedYaml(None, SourceMap(), [Diagnostic.at(Location(file, 1, 1), message)])
    return LoadedYaml(data, builder.source, builder.diagnostics)
