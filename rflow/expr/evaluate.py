"""The tree-walking evaluator."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rflow.expr.errors import ExpressionError
from rflow.expr.functions import FUNCTIONS
from rflow.expr.limits import Budget, check_list_length
from rflow.expr.nodes import (
    Binary,
    Call,
    Expr,
    Index,
    ListExpr,
    Literal,
    Member,
    Name,
    ObjectExpr,
    Unary,
)
from rflow.expr.operators import binary, index, member, negate
from rflow.expr.values import size_of, truthy


def evaluate(expr: Expr, context: Mapping[str, Any]) -> Any:
    """The value of ``expr`` with root names looked up in ``context``.

    A root missing from ``context`` is ``null``. Raises
    :class:`~rflow.expr.ExpressionError` of kind ``'eval'`` or ``'limit'``, with the
    offset of the node that failed. Evaluation is deterministic and has no side effects.
    """
    return evaluate_with(expr, context, Budget())


def evaluate_with(expr: Expr, context: Mapping[str, Any], budget: Budget) -> Any:
    """:func:`evaluate` charging a budget shared with other evaluations (a template's)."""
    return _Evaluator(context, budget).eval(expr)


class _Evaluator:
    def __init__(self, context: Mapping[str, Any], budget: Budget) -> None:
        self._context = context
        self._budget = budget
        self._dispatch: dict[type, Callable[[Any], Any]] = {
            Literal: self._literal,
            Name: self._name,
            Member: self._member,
            Index: self._index,
            Call: self._call,
            Unary: self._unary,
            Binary: self._binary,
            ListExpr: self._list,
            ObjectExpr: self._object,
        }

    def eval(self, node: Expr) -> Any:
        self._budget.charge()
        try:
            return self._dispatch[type(node)](node)
        except ExpressionError as exc:
            # Helpers raise without knowing where they are; the innermost node does.
            if exc.offset < 0:
                exc.offset = node.offset
            raise

    def _literal(self, node: Literal) -> Any:
        return node.value

    def _name(self, node: Name) -> Any:
        return self._context.get(node.name)

    def _member(self, node: Member) -> Any:
        return member(self.eval(node.obj), node.name)

    def _index(self, node: Index) -> Any:
        return index(self.eval(node.obj), self.eval(node.index))

    def _call(self, node: Call) -> Any:
        args = [self.eval(arg) for arg in node.args]
        # Functions charge for the elements they visit one by one; what they build in
        # bulk is charged here.
        result = FUNCTIONS[node.name].impl(self._budget, *args)
        self._budget.charge_bulk(size_of(result))
        return result

    def _unary(self, node: Unary) -> Any:
        operand = self.eval(node.operand)
        return not truthy(operand) if node.op == "not" else negate(operand)

    def _binary(self, node: Binary) -> Any:
        if node.op == "and":
            return truthy(self.eval(node.left)) and truthy(self.eval(node.right))
        if node.op == "or":
            return truthy(self.eval(node.left)) or truthy(self.eval(node.right))
        return binary(node.op, self.eval(node.left), self.eval(node.right), self._budget)

    def _list(self, node: ListExpr) -> list[Any]:
        check_list_length(len(node.items))
        return [self.eval(item) for item in node.items]

    def _object(self, node: ObjectExpr) -> dict[str, Any]:
        return {key: self.eval(value) for key, value in node.entries}
