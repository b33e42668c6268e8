"""The one error type of the expression language."""

from __future__ import annotations

from typing import Literal

ErrorKind = Literal["syntax", "eval", "limit"]


class ExpressionError(Exception):
    """A failure to parse or evaluate an expression.

    ``message`` is a sentence for a human, ``offset`` is the 0-based character offset into
    the source string given to :func:`~rflow.expr.parse` or :func:`~rflow.expr.parse_template`
    (``-1`` when unknown) and ``kind`` is ``'syntax'``, ``'eval'`` or ``'limit'``.
    """

    def __init__(self, message: str, offset: int = -1, kind: ErrorKind = "eval") -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.kind: ErrorKind = kind

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"ExpressionError({self.message!r}, offset={self.offset}, kind={self.kind!r})"

    def excerpt(self, source: str) -> str:
        """``source`` on one line and a caret under the offending character."""
        if self.offset < 0:
            return source
        line_start = source.rfind("\n", 0, self.offset) + 1
        line_end = source.find("\n", self.offset)
        if line_end < 0:
            line_end = len(source)
        return source[line_start:line_end] + "\n" + " " * (self.offset - line_start) + "^"


def syntax_error(message: str, offset: int) -> ExpressionError:
    """An error found while reading the source text."""
    return ExpressionError(message, offset, "syntax")


def eval_error(message: str, offset: int = -1) -> ExpressionError:
    """An error found while evaluating; the evaluator fills in the offset when unknown."""
    return ExpressionError(message, offset, "eval")


def limit_error(message: str, offset: int = -1) -> ExpressionError:
    """A resource limit was hit; see :mod:`rflow.expr.limits`."""
    return ExpressionError(message, offset, "limit")
