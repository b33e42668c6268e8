"""The ``${{ ... }}`` expression language of workflow files.

A small, safe language: our own tokenizer, parser and tree-walking evaluator, with no
access to Python objects beyond dict lookups, exact integer and decimal arithmetic, and
limits on every resource so that untrusted text stays cheap.

    >>> evaluate(parse("trigger.args.amount * 2"), {"trigger": {"args": {"amount": 21}}})
    42
    >>> parse_template("run ${{ run.id }} ended ${{ run.status }}").render(
    ...     {"run": {"id": 7, "status": "succeeded"}})
    'run 7 ended succeeded'
"""

from rflow.expr.errors import ExpressionError
from rflow.expr.evaluate import evaluate
from rflow.expr.functions import FUNCTIONS
from rflow.expr.nodes import (
    ROOTS,
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
    unparse,
)
from rflow.expr.parser import parse
from rflow.expr.references import references
from rflow.expr.template import Template, has_expression, parse_template

__all__ = [
    "FUNCTIONS",
    "ROOTS",
    "Binary",
    "Call",
    "Expr",
    "ExpressionError",
    "Index",
    "ListExpr",
    "Literal",
    "Member",
    "Name",
    "ObjectExpr",
    "Template",
    "Unary",
    "evaluate",
    "has_expression",
    "parse",
    "parse_template",
    "references",
    "unparse",
]
