"""Pydantic validation errors reworded for a person and located in the YAML."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Tag, ValidationError
from pydantic_core import ErrorDetails

from rflow.lang.diagnostics import DataPath, Diagnostic
from rflow.lang.model.steps import ACTIONS, StepBase
from rflow.lang.model.triggers import TRIGGER_KINDS
from rflow.lang.yamlsrc import SourceMap


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` — did you mean 'x'?`` when ``word`` is close to one of ``candidates``, else ``''``."""
    import difflib  # only a problem's message needs it

    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" — did you mean {close[0]!r}?" if close else ""


def describe(value: Any) -> str:
    """A short, readable rendering of a YAML value for "got ..." in messages."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        return repr(text)
    return repr(value)


def _quoted(expected: str) -> list[str]:
    return re.findall(r"'([^']*)'", expected)


def _join(words: Sequence[str]) -> str:
    quoted = [repr(w) for w in words]
    if len(quoted) <= 1:
        return "".join(quoted)
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]


# --- locating an error in the data -------------------------------------------------


def _split(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = tp.__origin__
    return tp


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _variant(variants: Sequence[Any], part: str | int) -> Any:
    for variant in variants:
        metadata = getattr(variant, "__metadata__", ())
        base = _split(variant)
        if any(isinstance(m, Tag) and m.tag == part for m in metadata):
            return base
        if _is_model(base):
            if base.__name__ == part:
                return base
            for name in ("type", "name"):
                field = base.model_fields.get(name)
                if field is not None and part in typing.get_args(field.annotation):
                    return base
    return None


def _child(tp: Any, part: str | int) -> Any:
    if _is_model(tp):
        field = next((f for n, f in tp.model_fields.items() if (f.alias or n) == part), None)
        return field.annotation if field is not None else None
    origin = typing.get_origin(tp)
    if origin in (list, tuple) and isinstance(part, int):
        return typing.get_args(tp)[0]
    if origin is dict:
        return typing.get_args(tp)[1]
    return None


def _has(container: Any, part: str | int) -> bool:
    if isinstance(container, dict):
        return isinstance(part, str) and part in container
    return isinstance(container, list) and isinstance(part, int) and 0 <= part < len(container)


@dataclass
class Resolved:
    """Where a pydantic ``loc`` points: the data path, the model there (if any), and the
    parts of ``loc`` that are not in the data (a missing field's name)."""

    path: DataPath
    model: type[BaseModel] | None
    leftover: list[str | int]


def resolve(root: type[BaseModel], data: Any, loc: Sequence[str | int]) -> Resolved:
    """Follow ``loc`` through the types from ``root`` and through ``data`` together, so
    union tags (which pydantic puts in ``loc``) are told apart from data keys."""
    tp: Any = root
    current = data
    path: list[str | int] = []
    leftover: list[str | int] = []
    index = 0
    while index < len(loc):
        part = loc[index]
        tp = _split(tp)
        if _is_union(tp):
            variants = [v for v in typing.get_args(tp) if v is not type(None)]
            if len(variants) == 1:
                tp = variants[0]
                continue
            chosen = _variant(variants, part)
            index += 1
            if chosen is not None:
                tp = chosen
                continue
            tp = None  # a tag of a plain union, such as 'int' or 'str'
            if not (isinstance(current, dict) and part in current):
                continue
            index -= 1
        index += 1
        if _has(current, part):
            path.append(part)
            current = current[part]
        else:
            leftover.append(part)
        tp = _child(tp, part) if tp is not None else None
    tp = _split(tp)
    if _is_union(tp):
        variants = [v for v in typing.get_args(tp) if v is not type(None)]
        tp = variants[0] if len(variants) == 1 else None
    return Resolved(tuple(path), tp if _is_model(tp) else None, leftover)


def field_names(model: type[BaseModel]) -> list[str]:
    """The keys ``model`` accepts in YAML (aliases where set)."""
    return [f.alias or n for n, f in model.model_fields.items()]


# --- wording -----------------------------------------------------------------------


class Translator:
    """Turns pydantic errors about ``data`` (loaded with ``source``) into diagnostics."""

    def __init__(self, root: type[BaseModel], data: Any, source: SourceMap) -> None:
        self.root = root
        self.data = data
        self.source = source

    def translate(self, error: ValidationError) -> list[Diagnostic]:
        """One diagnostic per error, in the order pydantic reports them.

        Errors about a string whose ``${VAR}`` substitution failed are dropped: that
        failure is already reported, and the string was kept as written.
        """
        found = []
        for details in error.errors(include_url=False):
            resolved = resolve(self.root, self.data, tuple(details["loc"]))
            if resolved.path in self.source.unresolved:
                continue
            found.append(self._one(details))
        return found

    def _got(self, path: DataPath, value: Any) -> str:
        names = self.source.substituted.get(path)
        if names and isinstance(value, str):
            return "the value of " + ", ".join(f"${{{n}}}" for n in names)
        return describe(value)

    def _one(self, error: ErrorDetails) -> Diagnostic:
        kind = error["type"]
        loc = tuple(error["loc"])
        ctx = error.get("ctx") or {}
        value = error.get("input")
        if kind == "extra_forbidden":
            key = loc[-1]
            parent = resolve(self.root, self.data, loc[:-1])
            hint = did_you_mean(str(key), field_names(parent.model)) if parent.model else ""
            where = self.source.key((*parent.path, key))
            return Diagnostic.at(where, f"unknown field {key!r}{hint}", parent.path)
        resolved = resolve(self.root, self.data, loc)
        path = resolved.path
        tag_field = str(ctx.get("discriminator", "")).strip("'")
        if kind == "union_tag_invalid" and isinstance(value, dict) and tag_field in value:
            path = (*path, tag_field)  # point at the offending `type:` rather than the mapping
        if kind == "missing":
            field = resolved.leftover[-1] if resolved.leftover else loc[-1]
            return Diagnostic.at(self.source.key(path), f"missing required field {field!r}", path)
        if "[key]" in loc:
            return Diagnostic.at(
                self.source.key(path),
                self._message(kind, ctx, path[-1] if path else value, path, error),
                path,
            )
        return Diagnostic.at(
            self.source.value(path), self._message(kind, ctx, value, path, error), path
        )

    def _message(
        self, kind: str, ctx: dict[str, Any], value: Any, path: DataPath, error: ErrorDetails
    ) -> str:
        got = self._got(path, value)
        simple = _SIMPLE.get(kind)
        if simple is not None:
            return f"{simple}, got {got}"
        if kind == "literal_error":
            options = _quoted(str(ctx.get("expected", "")))
            hint = did_you_mean(str(value), options) if isinstance(value, str) else ""
            return f"expected {_join(options)}, got {got}{hint}"
        if kind in _BOUNDS:
            word, key = _BOUNDS[kind]
            return f"must be {word} {ctx.get(key)}, got {got}"
        if kind in ("too_short", "too_long"):
            word = "at least" if kind == "too_short" else "at most"
            count = ctx.get("min_length" if kind == "too_short" else "max_length")
            noun = "item" if count == 1 else "items"
            return f"needs {word} {count} {noun}"
        if kind == "union_tag_invalid":
            field = str(ctx.get("discriminator", "type")).strip("'")
            noun = "command" if field == "name" else field
            options = _quoted(str(ctx.get("expected_tags", "")))
            tag = str(ctx.get("tag"))
            hint = did_you_mean(tag, options)
            return f"unknown {noun} {tag!r}: expected {_join(options)}{hint}"
        if kind == "union_tag_not_found":
            field = str(ctx.get("discriminator", "type")).strip("'")
            return f"missing required field {field!r}"
        if kind == "step_action":
            return _one_key_message(value, "step", "action", ACTIONS, field_names(StepBase))
        if kind == "trigger_kind":
            message = _one_key_message(value, "trigger", "kind", TRIGGER_KINDS, ("id",))
            if isinstance(value, dict) and sum(k in value for k in TRIGGER_KINDS) > 1:
                message += " (several triggers go in a triggers: list, one kind each)"
            return message
        if kind == "rflow":
            return str(ctx.get("message", error["msg"]))
        if kind in ("value_error", "assertion_error"):
            return str(ctx.get("error", error["msg"]))
        return error["msg"]


_SIMPLE = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected a whole number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "string_type": "expected text",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "none_required": "expected nothing",
}
_BOUNDS = {
    "greater_than_equal": ("at least", "ge"),
    "greater_than": ("greater than", "gt"),
    "less_than_equal": ("at most", "le"),
    "less_than": ("less than", "lt"),
}


def _one_key_message(
    value: Any, what: str, noun: str, keys: Sequence[str], common: Sequence[str]
) -> str:
    listed = ", ".join(keys)
    if not isinstance(value, dict):
        return f"expected a {what} (a mapping with one of {listed}), got {describe(value)}"
    present = [key for key in keys if key in value]
    if len(present) > 1:
        return f"a {what} has exactly one {noun}, this one has {len(present)}: {', '.join(present)}"
    unknown = [k for k in value if k not in common and k not in keys]
    hints = [f"{k!r}{did_you_mean(k, keys)}" for k in unknown if did_you_mean(k, keys)]
    hint = f" (unknown field {hints[0]})" if hints else ""
    return f"a {what} needs one of {listed}; found none{hint}"
