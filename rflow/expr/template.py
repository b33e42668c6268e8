"""Templates: YAML strings with zero or more ``${{ ... }}`` expressions in them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rflow.expr.errors import limit_error, syntax_error
from rflow.expr.evaluate import evaluate_with
from rflow.expr.jsontext import to_text
from rflow.expr.limits import MAX_SOURCE_LENGTH, MAX_STRING_LENGTH, MAX_TEMPLATE_LENGTH, Budget
from rflow.expr.nodes import Expr
from rflow.expr.parser import parse_at
from rflow.expr.references import Path, references

OPEN = "${{"
CLOSE = "}}"
_INTERESTING = re.compile(r"['\"{}]")
_STRINGS = {
    "'": re.compile(r"'(?:[^'\\]|\\.)*'", re.DOTALL),
    '"': re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL),
}


@dataclass(frozen=True)
class Template:
    """A parsed template: literal text and expressions, in order.

    ``is_single_expression`` is true when the whole string, ignoring surrounding
    whitespace, is one ``${{ }}``; such a template renders to the raw value.
    """

    segments: tuple[str | Expr, ...]
    is_single_expression: bool
    source: str = ""

    def render(self, context: Mapping[str, Any], finish: Callable[[Any], Any] | None = None) -> Any:
        """The value of a single-expression template, else a string in which each value
        is written as text (``null`` empty, booleans ``true``/``false``, lists and
        objects as compact JSON). ``finish``, when given, is applied to each expression's
        value first; the literal text around expressions is kept as it is."""
        budget = Budget()
        if self.is_single_expression:
            expr = next(s for s in self.segments if isinstance(s, Expr))
            value = evaluate_with(expr, context, budget)
            return finish(value) if finish is not None else value
        parts: list[str] = []
        size = 0
        for segment in self.segments:
            if isinstance(segment, str):
                text = segment
            else:
                value = evaluate_with(segment, context, budget)
                text = to_text(finish(value) if finish is not None else value, budget)
            size += len(text)
            if size > MAX_STRING_LENGTH:
                raise limit_error(
                    f"rendered template exceeds the limit of {MAX_STRING_LENGTH} characters",
                    segment.offset if isinstance(segment, Expr) else -1,
                )
            parts.append(text)
        return "".join(parts)

    def references(self) -> frozenset[Path]:
        """The static member paths read by all of the template's expressions."""
        found: set[Path] = set()
        for segment in self.segments:
            if isinstance(segment, Expr):
                found |= references(segment)
        return frozenset(found)


def has_expression(text: str) -> bool:
    """Whether ``text`` contains a ``${{``, i.e. needs :func:`parse_template`."""
    return OPEN in text


def parse_template(text: str) -> Template:
    """Split ``text`` into literal text and parsed expressions.

    Offsets in errors, and of the expression nodes, are positions in ``text``.
    """
    if len(text) > MAX_TEMPLATE_LENGTH:
        raise limit_error(
            f"template is longer than {MAX_TEMPLATE_LENGTH} characters", MAX_TEMPLATE_LENGTH
        )
    segments: list[str | Expr] = []
    pos = 0
    while (start := text.find(OPEN, pos)) >= 0:
        if start > pos:
            segments.append(text[pos:start])
        inner = start + len(OPEN)
        end = _closing(text, inner, start)
        segments.append(parse_at(text[inner:end], inner))
        pos = end + len(CLOSE)
    if pos < len(text):
        segments.append(text[pos:])
    expressions = [s for s in segments if isinstance(s, Expr)]
    single = len(expressions) == 1 and all(isinstance(s, Expr) or not s.strip() for s in segments)
    return Template(tuple(segments), single, text)


def _closing(text: str, pos: int, opened_at: int) -> int:
    """The position of the ``}}`` that closes the expression starting at ``pos``.

    Braces of object literals and the contents of strings do not close it, so that
    ``${{ {'a': {'b': '}}'}} }}`` reads as one expression.
    """
    depth = 0
    limit = pos + MAX_SOURCE_LENGTH
    while (match := _INTERESTING.search(text, pos)) is not None:
        at = match.start()
        if at > limit:
            break
        char = match.group()
        if char in "'\"":
            pos = _string_end(text, at)
            continue
        if char == "{":
            depth += 1
        elif depth:
            depth -= 1
        elif text.startswith(CLOSE, at):
            return at
        pos = at + 1
    if match is not None:
        raise limit_error(f"expression is longer than {MAX_SOURCE_LENGTH} characters", limit)
    raise syntax_error(f"'{OPEN}' is never closed by '{CLOSE}'", opened_at)


def _string_end(text: str, start: int) -> int:
    """The position after the string literal starting at ``start``."""
    match = _STRINGS[text[start]].match(text, start)
    if match is None:
        raise syntax_error("unterminated string literal", start)
    return match.end()
