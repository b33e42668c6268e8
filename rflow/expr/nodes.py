"""The syntax tree: frozen, hashable nodes that remember where they came from.

Nodes compare and hash by structure only; ``offset`` (the 0-based character offset of the
node in the parsed text) is left out so that a tree printed by :func:`unparse` and parsed
again equals the original.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal as TypingLiteral

ROOTS: frozenset[str] = frozenset(
    {
        "trigger",
        "steps",
        "item",
        "item_index",
        "matrix",
        "run",
        "error",
        "state",
        "env",
        "inputs",
        "wait",
    }
)
"""The names an expression may start from."""

Scalar = int | Decimal | str | bool | None
UnaryOp = TypingLiteral["not", "-"]
BinaryOp = TypingLiteral[
    "or", "and", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "+", "-", "*", "/", "//", "%"
]


class Expr:
    """Base class of every node."""

    __slots__ = ()
    offset: int

    def children(self) -> tuple[Expr, ...]:
        """The direct sub-expressions, left to right."""
        return ()

    def __str__(self) -> str:
        return unparse(self)


@dataclass(frozen=True, slots=True, eq=False)
class Literal(Expr):
    """``42``, ``0x2a``, ``1.5``, ``'text'``, ``true``, ``false`` or ``null``."""

    value: Scalar
    offset: int = 0

    # True == 1 and Decimal(1) == 1 in Python; literals of different types are different.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Literal):
            return NotImplemented
        return type(self.value) is type(other.value) and self.value == other.value

    def __hash__(self) -> int:
        return hash((type(self.value).__name__, self.value))


@dataclass(frozen=True, slots=True)
class Name(Expr):
    """A root name such as ``steps`` or ``trigger`` (one of :data:`ROOTS`)."""

    name: str
    offset: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Member(Expr):
    """``obj.name``: a key lookup on an object."""

    obj: Expr
    name: str
    offset: int = field(default=0, compare=False)

    def children(self) -> tuple[Expr, ...]:
        return (self.obj,)


@dataclass(frozen=True, slots=True)
class Index(Expr):
    """``obj[index]``: a list position or an object key."""

    obj: Expr
    index: Expr
    offset: int = field(default=0, compare=False)

    def children(self) -> tuple[Expr, ...]:
        return (self.obj, self.index)


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """``name(args...)``: a call of one of the registered functions."""

    name: str
    args: tuple[Expr, ...]
    offset: int = field(default=0, compare=False)

    def children(self) -> tuple[Expr, ...]:
        return self.args


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    """``not x`` (also written ``!x``) or ``-x``."""

    op: UnaryOp
    operand: Expr
    offset: int = field(default=0, compare=False)

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    """``left op right``; ``and``/``or`` short-circuit."""

    op: BinaryOp
    left: Expr
    right: Expr
    offset: int = field(default=0, compare=False)

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, slots=True)
class ListExpr(Expr):
    """``[a, b, ...]``."""

    items: tuple[Expr, ...]
    offset: int = field(default=0, compare=False)

    def children(self) -> tuple[Expr, ...]:
        return self.items


@dataclass(frozen=True, slots=True)
class ObjectExpr(Expr):
    """``{'key': value, ...}``."""

    entries: tuple[tuple[str, Expr], ...]
    offset: int = field(default=0, compare=False)

    def children(self) -> tuple[Expr, ...]:
        return tuple(value for _, value in self.entries)


# Binding strength, weakest first; the parser and the printer share it.
PREC_OR = 1
PREC_AND = 2
PREC_NOT = 3
PREC_COMPARE = 4
PREC_ADD = 5
PREC_MUL = 6
PREC_NEG = 7
PREC_POSTFIX = 8

BINARY_PRECEDENCE: dict[str, int] = {
    "or": PREC_OR,
    "and": PREC_AND,
    **dict.fromkeys(("==", "!=", "<", "<=", ">", ">=", "in", "not in"), PREC_COMPARE),
    "+": PREC_ADD,
    "-": PREC_ADD,
    **dict.fromkeys(("*", "/", "//", "%"), PREC_MUL),
}


def unparse(expr: Expr) -> str:
    """Source text that parses back to a tree equal to ``expr``."""
    return _unparse(expr, 0)


def _unparse(expr: Expr, context: int) -> str:
    prec, text = _render(expr)
    return f"({text})" if prec < context else text


def _render(expr: Expr) -> tuple[int, str]:
    match expr:
        case Literal(value=value):
            return PREC_POSTFIX, format_literal(value)
        case Name(name=name):
            return PREC_POSTFIX, name
        case Member(obj=obj, name=name):
            return PREC_POSTFIX, f"{_unparse(obj, PREC_POSTFIX)}.{name}"
        case Index(obj=obj, index=index):
            return PREC_POSTFIX, f"{_unparse(obj, PREC_POSTFIX)}[{_unparse(index, 0)}]"
        case Call(name=name, args=args):
            return PREC_POSTFIX, f"{name}({', '.join(_unparse(a, 0) for a in args)})"
        case ListExpr(items=items):
            return PREC_POSTFIX, f"[{', '.join(_unparse(i, 0) for i in items)}]"
        case ObjectExpr(entries=entries):
            body = ", ".join(f"{quote(k)}: {_unparse(v, 0)}" for k, v in entries)
            return PREC_POSTFIX, "{" + body + "}"
        case Unary(op="not", operand=operand):
            return PREC_NOT, f"not {_unparse(operand, PREC_NOT)}"
        case Unary(operand=operand):
            return PREC_NEG, f"-{_unparse(operand, PREC_NEG)}"
        case Binary(op=op, left=left, right=right):
            prec = BINARY_PRECEDENCE[op]
            # Left-associative, and comparisons do not chain: a comparison on the left
            # needs parentheses too.
            left_context = prec + 1 if prec == PREC_COMPARE else prec
            return prec, f"{_unparse(left, left_context)} {op} {_unparse(right, prec + 1)}"
    raise TypeError(f"not an expression node: {expr!r}")


def format_literal(value: Scalar) -> str:
    """The source text of a literal value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, Decimal):
        text = format(value, "f")
        return text if "." in text else text + ".0"
    return str(value)


_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t"}


def quote(text: str) -> str:
    """``text`` as a single-quoted string literal."""
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char < " " or char == "\x7f":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "'" + "".join(out) + "'"
