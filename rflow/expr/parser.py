"""A Pratt parser from tokens to the syntax tree of :mod:`rflow.expr.nodes`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from rflow.expr.errors import limit_error, syntax_error
from rflow.expr.functions import FUNCTIONS
from rflow.expr.lexer import Token, tokenize
from rflow.expr.limits import MAX_NESTING, MAX_SOURCE_LENGTH, MAX_TREE_DEPTH
from rflow.expr.nodes import (
    BINARY_PRECEDENCE,
    PREC_COMPARE,
    PREC_NEG,
    PREC_NOT,
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
)

_T = TypeVar("_T")
_CONSTANTS = {"true": True, "false": False, "null": None}
_KEYWORDS = frozenset({"and", "or", "not", "in"})
_OPERATOR_ALIASES = {"&&": "and", "||": "or"}


def _nearest(word: str, known: Iterable[str]) -> str:
    """`` — did you mean 'x'?`` for a close name, else the list of every known one."""
    import difflib  # an error's path only: parsing valid text does not pay for it

    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    if close:
        return f" — did you mean '{close[0]}'?"
    return " — expected one of: " + ", ".join(sorted(known))


def parse(source: str) -> Expr:
    """Parse the inside of ``${{ }}`` (without the delimiters).

    Raises :class:`~rflow.expr.ExpressionError` of kind ``'syntax'``, or ``'limit'`` when
    the text is too long or nests too deeply; offsets are positions in ``source``.
    """
    return parse_at(source, 0)


def parse_at(source: str, base: int) -> Expr:
    """:func:`parse` for text found at offset ``base`` of a larger string."""
    if len(source) > MAX_SOURCE_LENGTH:
        raise limit_error(
            f"expression is longer than {MAX_SOURCE_LENGTH} characters", base + MAX_SOURCE_LENGTH
        )
    expr = _Parser(tokenize(source, base)).parse()
    _check_depth(expr)
    return expr


def _check_depth(expr: Expr) -> None:
    # Evaluation, printing and comparison of trees recurse; a long chain such as
    # a + b + c + ... is flat to the parser but deep as a tree.
    stack = [(expr, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_TREE_DEPTH:
            raise limit_error(
                f"expression is nested deeper than {MAX_TREE_DEPTH} operations", node.offset
            )
        stack.extend((child, depth + 1) for child in node.children())


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self._tokens = tokens
        self._pos = 0
        self._nesting = 0

    def parse(self) -> Expr:
        expr = self._expression(0)
        token = self._peek()
        if token.kind != "end":
            raise syntax_error(
                f"expected an operator or the end of the expression, found {token.describe()}",
                token.offset,
            )
        return expr

    def _peek(self, ahead: int = 0) -> Token:
        return self._tokens[min(self._pos + ahead, len(self._tokens) - 1)]

    def _advance(self) -> Token:
        token = self._peek()
        self._pos = min(self._pos + 1, len(self._tokens) - 1)
        return token

    def _is_op(self, op: str) -> bool:
        token = self._peek()
        return token.kind == "op" and token.value == op

    def _expect(self, op: str, context: str) -> Token:
        token = self._advance()
        if token.kind != "op" or token.value != op:
            raise syntax_error(f"expected '{op}' {context}, found {token.describe()}", token.offset)
        return token

    def _enter(self, token: Token) -> None:
        self._nesting += 1
        if self._nesting > MAX_NESTING:
            raise limit_error(f"expression nests deeper than {MAX_NESTING} levels", token.offset)

    def _leave(self) -> None:
        self._nesting -= 1

    def _expression(self, min_prec: int) -> Expr:
        left = self._prefix(min_prec)
        while (infix := self._infix()) is not None:
            op, width = infix
            prec = BINARY_PRECEDENCE[op]
            if prec < min_prec:
                break
            token = self._peek()
            for _ in range(width):
                self._advance()
            right = self._expression(prec + 1)
            left = Binary(op, left, right, token.offset)  # type: ignore[arg-type]
            after = self._infix() if prec == PREC_COMPARE else None
            if after is not None and BINARY_PRECEDENCE[after[0]] == PREC_COMPARE:
                raise syntax_error(
                    "comparisons cannot be chained; use 'and' or add parentheses",
                    self._peek().offset,
                )
        return left

    def _infix(self) -> tuple[str, int] | None:
        """The binary operator at the cursor and how many tokens spell it."""
        token = self._peek()
        if token.kind == "op":
            op = _OPERATOR_ALIASES.get(token.value, token.value)  # type: ignore[arg-type]
            return (op, 1) if op in BINARY_PRECEDENCE else None
        if token.kind == "name":
            if token.value in ("and", "or", "in"):
                return token.value, 1  # type: ignore[return-value]
            following = self._peek(1)
            if token.value == "not" and following.kind == "name" and following.value == "in":
                return "not in", 2
        return None

    def _prefix(self, min_prec: int) -> Expr:
        token = self._peek()
        if (token.kind == "name" and token.value == "not") or self._is_op("!"):
            if min_prec > PREC_NOT:
                raise syntax_error(
                    f"'{token.value}' needs parentheses here, e.g. a == (not b)", token.offset
                )
            return self._unary("not", PREC_NOT)
        if self._is_op("-"):
            return self._unary("-", PREC_NEG)
        return self._postfix(self._primary())

    def _unary(self, op: str, prec: int) -> Expr:
        token = self._advance()
        self._enter(token)
        operand = self._expression(prec)
        self._leave()
        return Unary(op, operand, token.offset)  # type: ignore[arg-type]

    def _postfix(self, expr: Expr) -> Expr:
        while True:
            token = self._peek()
            if self._is_op("."):
                self._advance()
                name = self._advance()
                if name.kind != "name":
                    raise syntax_error(
                        f"expected a member name after '.', found {name.describe()}", name.offset
                    )
                expr = Member(expr, name.value, token.offset)  # type: ignore[arg-type]
            elif self._is_op("["):
                self._advance()
                self._enter(token)
                index = self._expression(0)
                self._expect("]", "to close '['")
                self._leave()
                expr = Index(expr, index, token.offset)
            else:
                return expr

    def _primary(self) -> Expr:
        token = self._advance()
        if token.kind in ("number", "string"):
            return Literal(token.value, token.offset)
        if token.kind == "name":
            return self._name(token)
        if token.kind == "op":
            if token.value == "(":
                self._enter(token)
                expr = self._expression(0)
                self._expect(")", "to close '('")
                self._leave()
                return expr
            if token.value == "[":
                self._enter(token)
                items = self._sequence("]", self._expression)
                self._leave()
                return ListExpr(tuple(items), token.offset)
            if token.value == "{":
                self._enter(token)
                entries = self._sequence("}", self._entry)
                self._leave()
                return _object(entries, token.offset)
        raise syntax_error(f"expected an expression, found {token.describe()}", token.offset)

    def _name(self, token: Token) -> Expr:
        name = str(token.value)
        if name in _CONSTANTS:
            return Literal(_CONSTANTS[name], token.offset)
        if self._is_op("("):
            return self._call(token)
        if name in ROOTS:
            return Name(name, token.offset)
        if name in _KEYWORDS:
            raise syntax_error(f"expected an expression, found '{name}'", token.offset)
        if name in FUNCTIONS:
            raise syntax_error(f"'{name}' is a function; call it as {name}(...)", token.offset)
        hint = self._spaced_step_id(token) or _nearest(name, ROOTS)
        raise syntax_error(f"unknown name '{name}'{hint}", token.offset)

    def _spaced_step_id(self, token: Token) -> str | None:
        """A hint for ``steps.first - step``: a step id holding ``-`` written with spaces,
        which reads as a subtraction (``token`` is the name after the ``-``)."""
        at = self._pos - 1
        if at < 4:
            return None
        steps, dot, head, minus = self._tokens[at - 4 : at]
        if (steps.kind, steps.value, dot.value, head.kind, minus.value) != (
            "name",
            "steps",
            ".",
            "name",
            "-",
        ):
            return None
        return (
            f" — a step id with '-' is written without spaces: steps.{head.value}-{token.value}"
            f" (with spaces, '-' subtracts)"
        )

    def _call(self, token: Token) -> Expr:
        name = str(token.value)
        function = FUNCTIONS.get(name)
        if function is None:
            if name in ROOTS:
                raise syntax_error(f"'{name}' is not a function", token.offset)
            raise syntax_error(
                f"unknown function '{name}'{_nearest(name, FUNCTIONS)}", token.offset
            )
        self._enter(self._advance())
        args = self._sequence(")", self._expression)
        self._leave()
        problem = function.arity_problem(len(args))
        if problem:
            raise syntax_error(problem, token.offset)
        return Call(name, tuple(args), token.offset)

    def _entry(self, _min_prec: int) -> tuple[Token, Expr]:
        key = self._advance()
        if key.kind not in ("string", "name"):
            raise syntax_error(
                f"expected an object key (a string or a name), found {key.describe()}", key.offset
            )
        self._expect(":", "after an object key")
        return key, self._expression(0)

    def _sequence(self, close: str, item: Callable[[int], _T]) -> list[_T]:
        """Comma-separated items up to ``close``; a trailing comma is allowed."""
        items: list[_T] = []
        while not self._is_op(close):
            items.append(item(0))
            if not self._is_op(","):
                break
            self._advance()
        self._expect(close, f"or ',' in a {_SEQUENCE_NAMES[close]}")
        return items


_SEQUENCE_NAMES = {"]": "list", "}": "object", ")": "call"}


def _object(entries: list[tuple[Token, Expr]], offset: int) -> ObjectExpr:
    seen: set[str] = set()
    for key, _ in entries:
        if key.value in seen:
            raise syntax_error(f"duplicate key '{key.value}' in object", key.offset)
        seen.add(str(key.value))
    return ObjectExpr(tuple((str(key.value), value) for key, value in entries), offset)
