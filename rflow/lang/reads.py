"""What a workflow's expressions read, asked of the parsed expressions themselves.

A run needs the workflow's durable state at its start only if some expression of the
workflow reads ``state``: ``${{ state.count }}``, ``${{ state['count'] }}``,
``${{ keys(state) }}``. The text ``state.`` in a URL or a message is not such a read,
and ``state['count']`` is one although it holds no ``state.``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rflow.expr import ExpressionError, has_expression, parse_template
from rflow.lang.model.workflow import Workflow


def roots_read(value: Any) -> frozenset[str] | None:
    """The roots (``trigger``, ``steps``, ``state``...) read by every expression inside
    ``value`` (a string, or lists and mappings of them); ``None`` when one of them does
    not parse, so that a caller can assume the worst."""
    found: set[str] = set()
    for text in _expressions(value):
        try:
            template = parse_template(text)
        except ExpressionError:
            return None
        found |= {str(path[0]) for path in template.references()}
    return frozenset(found)


def reads_state(workflow: Workflow) -> bool:
    """Whether some expression of ``workflow`` reads its durable state (an expression
    that does not parse counts as one: fetching the state is the safe mistake)."""
    roots = roots_read(workflow.model_dump(mode="json", by_alias=True))
    return roots is None or "state" in roots


def _expressions(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if has_expression(value):
            yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from _expressions(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _expressions(inner)
