"""Parsing: the tree, the printer, syntax errors and parse-time limits."""

from __future__ import annotations

from decimal import Decimal

import pytest

from rflow.expr import (
    Binary,
    Call,
    ExpressionError,
    Index,
    ListExpr,
    Literal,
    Member,
    Name,
    ObjectExpr,
    Unary,
    parse,
    unparse,
)


def syntax(source: str) -> ExpressionError:
    with pytest.raises(ExpressionError) as info:
        parse(source)
    return info.value


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("42", 42),
        ("0x2a", 42),
        ("0XFF", 255),
        ("1.5", Decimal("1.5")),
        ("0.000001", Decimal("0.000001")),
        ("'it\\'s'", "it's"),
        ('"say \\"hi\\""', 'say "hi"'),
        ("'a\\nb\\tc\\\\'", "a\nb\tc\\"),
        ("'\\u00e9'", "é"),
        ("'\\ud83d\\ude00'", "😀"),
        ("true", True),
        ("false", False),
        ("null", None),
        (str(2**1024), 2**1024),
    ],
)
def test_literals(source: str, value: object) -> None:
    assert parse(source) == Literal(value)


def test_literal_types_are_distinct() -> None:
    assert parse("1") != parse("true")
    assert parse("1") != parse("1.0")


def test_member_index_call_shapes() -> None:
    assert parse("steps.gate.output") == Member(Member(Name("steps"), "gate"), "output")
    assert parse("item[0]['k']") == Index(Index(Name("item"), Literal(0)), Literal("k"))
    assert parse("length(item)") == Call("length", (Name("item"),))
    assert parse("from_json(item).x") == Member(Call("from_json", (Name("item"),)), "x")
    assert parse("[1, 'a']") == ListExpr((Literal(1), Literal("a")))
    assert parse("{a: 1, 'b c': 2}") == ObjectExpr((("a", Literal(1)), ("b c", Literal(2))))
    assert parse("[1, 2,]") == parse("[1, 2]")
    assert parse("item.in.not") == Member(Member(Name("item"), "in"), "not")


def test_precedence() -> None:
    one, two, three = Literal(1), Literal(2), Literal(3)
    assert parse("1 + 2 * 3") == Binary("+", one, Binary("*", two, three))
    assert parse("1 - 2 - 3") == Binary("-", Binary("-", one, two), three)
    assert parse("-1 * 2") == Binary("*", Unary("-", one), two)
    assert parse("-item.x") == Unary("-", Member(Name("item"), "x"))
    assert parse("not 1 == 2") == Unary("not", Binary("==", one, two))
    assert parse("not 1 and 2") == Binary("and", Unary("not", one), two)
    assert parse("1 or 2 and 3") == Binary("or", one, Binary("and", two, three))
    assert parse("1 + 2 in [3]") == Binary("in", Binary("+", one, two), ListExpr((three,)))
    assert parse("1 not in [2]") == Binary("not in", one, ListExpr((two,)))
    assert parse("(1 + 2) * 3") == Binary("*", Binary("+", one, two), three)
    assert parse("1 // 2 % 3") == Binary("%", Binary("//", one, two), three)


def test_symbolic_aliases() -> None:
    assert parse("!item && item || item") == parse("not item and item or item")


def test_offsets() -> None:
    expr = parse("steps.gate . output + 1")
    assert isinstance(expr, Binary)
    assert expr.offset == 20
    assert isinstance(expr.left, Member)
    assert expr.left.offset == 11
    assert expr.right.offset == 22


def test_offsets_do_not_affect_equality() -> None:
    assert parse("1+2") == parse("  1 +   2")
    assert hash(parse("1+2")) == hash(parse("  1 +   2"))


@pytest.mark.parametrize(
    ("source", "printed"),
    [
        ("1+2*3", "1 + 2 * 3"),
        ("(1+2)*3", "(1 + 2) * 3"),
        ("1-(2-3)", "1 - (2 - 3)"),
        ("- -1", "--1"),
        ("1 - -1", "1 - -1"),
        ("-(1+2)", "-(1 + 2)"),
        ("!(item == 1)", "not item == 1"),
        ("(not item) == true", "(not item) == true"),
        ("(1 < 2) == true", "(1 < 2) == true"),
        ("0x10", "16"),
        ("0.0000001", "0.0000001"),
        ("'it\\'s\\n'", "'it\\'s\\n'"),
        ('"\\u0001"', "'\\u0001'"),
        ("{a: [1, 2.50]}", "{'a': [1, 2.50]}"),
        ("(-1).x", "(-1).x"),
        ("1 .x", "1.x"),
        ("format('{0}', item[-1])", "format('{0}', item[-1])"),
    ],
)
def test_unparse(source: str, printed: str) -> None:
    expr = parse(source)
    assert unparse(expr) == printed
    assert str(expr) == printed
    assert parse(printed) == expr


@pytest.mark.parametrize(
    ("source", "message", "offset"),
    [
        ("steps.gate.", "expected a member name after '.', found end of expression", 11),
        ("1 +", "expected an expression, found end of expression", 3),
        (
            "foo.bar",
            "unknown name 'foo' — expected one of: env, error, inputs, item, item_index, "
            "matrix, run, state, steps, trigger, wait",
            0,
        ),
        ("item == 'abc", "unterminated string literal", 8),
        ("", "expected an expression, found end of expression", 0),
        ("item item", "expected an operator or the end of the expression, found 'item'", 5),
        ("(1 + 2", "expected ')' to close '(', found end of expression", 6),
        ("[1 2]", "expected ']' or ',' in a list, found a number", 3),
        ("item[0", "expected ']' to close '[', found end of expression", 6),
        ("item.0", "expected a member name after '.', found a number", 5),
        ("1 = 1", "unexpected '=' — did you mean '=='?", 2),
        ("1 & 1", "unexpected '&' — did you mean '&&'?", 2),
        ("1 # 1", "unexpected character '#'", 2),
        ("0x", "invalid hex literal: expected digits after '0x'", 0),
        ("12abc", "invalid number literal '12abc'", 0),
        ("1e18", "invalid number literal '1e18'", 0),
        ("'\\q'", "invalid escape '\\q' in string literal", 1),
        ("'\\u12'", "invalid '\\u' escape: expected 4 hex digits", 1),
        ("'\\udc00'", "invalid '\\u' escape: unpaired surrogate", 1),
        ("length", "'length' is a function; call it as length(...)", 0),
        ("item(1)", "'item' is not a function", 0),
        ("length(1, 2)", "length() takes 1 argument, got 2", 0),
        ("join()", "join() takes 1 to 2 arguments, got 0", 0),
        ("format()", "format() takes at least 1 argument, got 0", 0),
        ("1 < 2 < 3", "comparisons cannot be chained; use 'and' or add parentheses", 6),
        ("1 == not 2", "'not' needs parentheses here, e.g. a == (not b)", 5),
        ("{a: 1, a: 2}", "duplicate key 'a' in object", 7),
        ("{1: 2}", "expected an object key (a string or a name), found a number", 1),
        ("{a 1}", "expected ':' after an object key, found a number", 3),
        ("and", "expected an expression, found 'and'", 0),
    ],
)
def test_syntax_errors(source: str, message: str, offset: int) -> None:
    error = syntax(source)
    assert (error.message, error.offset, error.kind) == (message, offset, "syntax")
    assert str(error) == message


def test_unknown_function_lists_the_registry() -> None:
    error = syntax("item + nope(1)")
    assert error.offset == 7
    assert error.message.startswith("unknown function 'nope' — expected one of: abs, contains,")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("lenght(item)", "unknown function 'lenght' — did you mean 'length'?"),
        ("tolower(item)", "unknown function 'tolower' — did you mean 'lower'?"),
        ("trigers.amount", "unknown name 'trigers' — did you mean 'trigger'?"),
    ],
)
def test_a_near_miss_suggests_the_nearest_name(source: str, message: str) -> None:
    error = syntax(source)
    assert (error.message, error.offset) == (message, 0)


def test_error_excerpt_points_at_the_offset() -> None:
    error = syntax("steps.gate.")
    assert error.excerpt("steps.gate.") == "steps.gate.\n           ^"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("1" * 4097, "expression is longer than 4096 characters"),
        ("(" * 100_000, "expression is longer than 4096 characters"),
        ("(" * 65 + "1" + ")" * 65, "expression nests deeper than 64 levels"),
        ("[" * 1000, "expression nests deeper than 64 levels"),
        ("{a:" * 1000, "expression nests deeper than 64 levels"),
        ("abs(" * 1000, "expression nests deeper than 64 levels"),
        ("item" + "[0" * 1000, "expression nests deeper than 64 levels"),
        ("not " * 1000 + "true", "expression nests deeper than 64 levels"),
        ("!" * 4000 + "true", "expression nests deeper than 64 levels"),
        ("-" * 4000 + "1", "expression nests deeper than 64 levels"),
        ("1" + " + 1" * 1000, "expression is nested deeper than 128 operations"),
        ("item" + ".a" * 1000, "expression is nested deeper than 128 operations"),
        (str(2**1024 + 1), "integer literal exceeds the limit of 2**1024"),
        ("9" * 400, "number literal exceeds the limit of 2**1024"),
        ("0x" + "f" * 300, "integer literal exceeds the limit of 2**1024"),
    ],
)
def test_parse_limits(source: str, message: str) -> None:
    error = syntax(source)
    assert (error.kind, error.message) == ("limit", message)


def test_nesting_at_the_limit_parses() -> None:
    assert parse("(" * 64 + "1" + ")" * 64) == Literal(1)
    assert parse("-" * 63 + "1") is not None
    assert parse("1" + " + 1" * 127) is not None


# --- step ids with hyphens (GitHub Actions' steps.<id>) ------------------------------


@pytest.mark.parametrize(
    ("source", "step_id"),
    [
        ("steps.first-step", "first-step"),
        ("steps.a-b-c.output", "a-b-c"),
        ("steps.step-2b.status", "step-2b"),
        ("steps.x-1", "x-1"),
        ("steps.x--y.tx", "x--y"),
        ("steps.trailing-.output", "trailing-"),
        ("steps._private-id", "_private-id"),
    ],
)
def test_after_steps_dot_a_hyphen_is_part_of_the_step_id(source: str, step_id: str) -> None:
    tree = parse(source)
    while isinstance(tree, Member) and tree.obj != Name("steps"):
        tree = tree.obj
    assert tree == Member(Name("steps"), step_id)
    assert parse(unparse(parse(source))) == parse(source)


@pytest.mark.parametrize(
    ("source", "tree"),
    [
        # With spaces, '-' subtracts, after a step id too.
        ("steps.a - item", Binary("-", Member(Name("steps"), "a"), Name("item"))),
        ("steps.a -item", Binary("-", Member(Name("steps"), "a"), Name("item"))),
        (
            "steps.a-b - 1",
            Binary("-", Member(Name("steps"), "a-b"), Literal(1)),
        ),
        # Only the id right after the root `steps.`: a field stays a plain name.
        (
            "steps.a.output-1",
            Binary("-", Member(Member(Name("steps"), "a"), "output"), Literal(1)),
        ),
        (
            "steps.a.output-steps.b-c.output",
            Binary(
                "-",
                Member(Member(Name("steps"), "a"), "output"),
                Member(Member(Name("steps"), "b-c"), "output"),
            ),
        ),
        # A member that happens to be called steps is not the root.
        (
            "trigger.steps.a-item",
            Binary("-", Member(Member(Name("trigger"), "steps"), "a"), Name("item")),
        ),
        # Elsewhere '-' is an operator, spaces or not.
        ("item-1", Binary("-", Name("item"), Literal(1))),
        ("trigger.a-item", Binary("-", Member(Name("trigger"), "a"), Name("item"))),
        ("steps['a-b']", Index(Name("steps"), Literal("a-b"))),
    ],
)
def test_a_hyphen_subtracts_everywhere_else(source: str, tree: object) -> None:
    assert parse(source) == tree


def test_a_hyphenated_step_id_written_with_spaces_says_how_to_write_it() -> None:
    err = syntax("steps.first - step.status")
    assert err.message == (
        "unknown name 'step' — a step id with '-' is written without spaces: "
        "steps.first-step (with spaces, '-' subtracts)"
    )
    assert err.offset == len("steps.first - ")
