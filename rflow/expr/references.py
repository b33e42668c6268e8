"""The static member paths an expression reads, for checking workflows before running."""

from __future__ import annotations

from rflow.expr.nodes import Expr, Index, Literal, Member, Name, Unary

Path = tuple[str | int, ...]


def references(expr: Expr) -> frozenset[Path]:
    """The longest chains of literal member accesses and constant indexes from a root.

    ``steps.gate.output[0]`` reads ``('steps', 'gate', 'output', 0)``;
    ``steps[item.key].x`` reads ``('steps',)`` and ``('item', 'key')``. String indexes
    contribute strings and integer indexes ints.
    """
    found: set[Path] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        path = static_path(node)
        if path is not None:
            found.add(path)
        else:
            # A computed index or a call ends a chain; what precedes it is still read.
            stack.extend(node.children())
    return frozenset(found)


def static_path(node: Expr) -> Path | None:
    """The path ``node`` reads if it is a root followed only by constant accesses."""
    keys: list[str | int] = []
    while True:
        if isinstance(node, Name):
            return (node.name, *reversed(keys))
        if isinstance(node, Member):
            keys.append(node.name)
            node = node.obj
        elif isinstance(node, Index) and (key := _constant_key(node.index)) is not None:
            keys.append(key)
            node = node.obj
        else:
            return None


def _constant_key(node: Expr) -> str | int | None:
    if isinstance(node, Literal) and isinstance(node.value, str | int):
        return None if isinstance(node.value, bool) else node.value
    if (
        isinstance(node, Unary)
        and node.op == "-"
        and isinstance(node.operand, Literal)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return None
