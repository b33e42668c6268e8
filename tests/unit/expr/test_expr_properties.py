"""Properties that must hold for any input, checked with generated inputs."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rflow.expr import (
    FUNCTIONS,
    ROOTS,
    Binary,
    Call,
    Expr,
    ExpressionError,
    Index,
    ListExpr,
    Literal,
    Member,
    Name,
    ObjectExpr,
    Unary,
    evaluate,
    parse,
    parse_template,
    references,
    unparse,
)
from rflow.lang.model.common import NAME_PATTERN

MAX_INT = 2**1024

# --- generated values ----------------------------------------------------------------

decimals = st.from_regex(r"-?[0-9]{1,25}\.[0-9]{1,25}", fullmatch=True).map(Decimal)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**300), 2**300),
    st.integers(-5, 5),
    decimals,
    st.text(max_size=12),
    st.sampled_from(["", "0x1f", "1.5", "42", '{"a": [1, 2.5]}', "[1, [2]]", "a,b", "{0}"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["a", "b", "x", "kind", "output"]), inner, max_size=4),
    ),
    max_leaves=20,
)
contexts = st.dictionaries(st.sampled_from(sorted(ROOTS)), values, max_size=len(ROOTS))

# --- generated source text -----------------------------------------------------------

VOCABULARY = sorted(ROOTS) + sorted(FUNCTIONS) + [
    "(", ")", "[", "]", "{", "}", ",", ":", ".", "+", "-", "*", "/", "//", "%",
    "==", "!=", "<", "<=", ">", ">=", "&&", "||", "!", "and", "or", "not", "in",
    "true", "false", "null", "0", "1", "-1", "2", "0x10", "1.5", "0.0", "'a'", "''",
    "'{0}'", "','", '"x"', "a", "x", "output", "kind", str(2**200), "${{", "}}", "'",
]  # fmt: skip
token_soup = st.lists(st.sampled_from(VOCABULARY), max_size=25).map(" ".join)
dense_soup = st.lists(st.sampled_from(VOCABULARY), max_size=25).map("".join)
any_text = st.one_of(st.text(max_size=60), token_soup, dense_soup)


def outcome(function: Any, *args: Any) -> tuple[str, Any]:
    """The result, or the error as comparable data; any other exception escapes."""
    try:
        return "ok", function(*args)
    except ExpressionError as exc:
        assert exc.kind in ("syntax", "eval", "limit")
        assert isinstance(exc.message, str) and exc.message
        assert isinstance(exc.offset, int)
        return "error", (exc.kind, exc.message, exc.offset)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(text=any_text, context=contexts)
def test_any_text_raises_only_expression_errors(text: str, context: dict[str, Any]) -> None:
    status, expr = outcome(parse, text)
    if status == "ok":
        first = outcome(evaluate, expr, context)
        assert outcome(evaluate, expr, context) == first
        references(expr)
        assert parse(unparse(expr)) == expr
    status, template = outcome(parse_template, text)
    if status == "ok":
        first = outcome(template.render, context)
        assert outcome(template.render, context) == first


@settings(max_examples=200)
@given(text=any_text)
def test_errors_point_inside_the_text(text: str) -> None:
    for function in (parse, parse_template):
        status, result = outcome(function, text)
        if status == "error":
            _, _, offset = result
            assert 0 <= offset <= len(text)


# --- generated trees -----------------------------------------------------------------

identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
literals = st.one_of(
    st.integers(0, MAX_INT).map(Literal),
    st.from_regex(r"[0-9]{1,20}\.[0-9]{1,20}", fullmatch=True).map(lambda s: Literal(Decimal(s))),
    st.text(max_size=8).map(Literal),
    st.sampled_from([True, False, None]).map(Literal),
)
names = st.sampled_from(sorted(ROOTS)).map(Name)
BINARY_OPS = [
    "or", "and", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "+", "-", "*", "/", "//", "%",
]  # fmt: skip


def _calls(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    def build(name: str) -> st.SearchStrategy[Expr]:
        function = FUNCTIONS[name]
        most = function.max_args if function.max_args is not None else function.min_args + 2
        return st.lists(children, min_size=function.min_args, max_size=most).map(
            lambda args: Call(name, tuple(args))
        )

    return st.sampled_from(sorted(FUNCTIONS)).flatmap(build)


step_ids = st.from_regex(NAME_PATTERN.replace("*", "{0,12}"), fullmatch=True)
"""Every step id the workflow language allows (its own pattern), hyphens included."""
step_reads = st.builds(Member, st.just(Name("steps")), step_ids)


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.one_of(
        st.builds(Member, children, identifiers),
        st.builds(Member, step_reads, identifiers),
        st.builds(Index, children, children),
        st.builds(Unary, st.sampled_from(["not", "-"]), children),
        st.builds(Binary, st.sampled_from(BINARY_OPS), children, children),
        st.lists(children, max_size=3).map(lambda items: ListExpr(tuple(items))),
        st.dictionaries(st.text(max_size=4), children, max_size=3).map(
            lambda entries: ObjectExpr(tuple(entries.items()))
        ),
        _calls(children),
    )


trees = st.recursive(st.one_of(literals, names, step_reads), _extend, max_leaves=25)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees)
def test_unparse_then_parse_gives_an_equal_tree(tree: Expr) -> None:
    source = unparse(tree)
    assume(len(source) <= 4096)
    reparsed = parse(source)
    assert reparsed == tree
    assert hash(reparsed) == hash(tree)
    assert unparse(reparsed) == source


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees, context=contexts)
def test_evaluation_is_deterministic(tree: Expr, context: dict[str, Any]) -> None:
    first = outcome(evaluate, tree, context)
    assert outcome(evaluate, tree, context) == first
    if first[0] == "ok":
        assert not _contains_float(first[1])


def _contains_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, list | tuple):
        return any(_contains_float(v) for v in value)
    if isinstance(value, dict):
        return any(_contains_float(v) for v in value.values())
    return False


# --- hostile sizes -------------------------------------------------------------------

NESTINGS = [
    ("(", ")"),
    ("[", "]"),
    ("{a:", "}"),
    ("not ", ""),
    ("!", ""),
    ("-", ""),
    ("abs(", ")"),
    ("item[", "]"),
    ("length([", "])"),
    ("1 + (", ")"),
]


@settings(max_examples=60, deadline=None)
@given(nesting=st.sampled_from(NESTINGS), count=st.integers(65, 100_000), wrap=st.booleans())
def test_deep_nesting_is_refused_quickly(nesting: tuple[str, str], count: int, wrap: bool) -> None:
    opener, closer = nesting
    text = opener * count + "1" + closer * count
    with pytest.raises(ExpressionError) as info:
        if wrap:
            parse_template("${{ " + text + " }}")
        else:
            parse(text)
    assert info.value.kind == "limit"


@pytest.mark.parametrize(
    "call",
    [
        lambda: parse("1" * 10**7),
        lambda: parse("'" + "a" * 10**7 + "'"),
        lambda: parse_template("x" * 10**7),
        lambda: parse_template("${{ " * 10**6),
        lambda: parse("1 + " * 10**6 + "1"),
        lambda: evaluate(parse("from_json(item)"), {"item": "[" * 10**6}),
        lambda: evaluate(parse("from_json(item)"), {"item": "[" * 10**5 + "]" * 10**5}),
        lambda: evaluate(parse("from_json(item)"), {"item": '"' + "a" * 10**7 + '"'}),
        lambda: evaluate(parse("range(1000000000)"), {}),
    ],
)
def test_huge_inputs_are_refused_quickly(call: Any) -> None:
    with pytest.raises(ExpressionError) as info:
        call()
    assert info.value.kind == "limit"


# --- exact integer arithmetic ---------------------------------------------------------

big_ints = st.one_of(
    st.integers(-(2**1100), 2**1100),
    st.integers(-(2**256), 2**256),
    st.integers(-1000, 1000),
)
OPERATIONS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}


@settings(max_examples=500)
@given(a=big_ints, b=big_ints, op=st.sampled_from(sorted(OPERATIONS)))
def test_integer_arithmetic_matches_python(a: int, b: int, op: str) -> None:
    context = {"inputs": {"a": a, "b": b}}
    status, result = outcome(evaluate, parse(f"inputs.a {op} inputs.b"), context)
    if op in ("//", "%") and b == 0:
        assert (status, result[:2]) == ("error", ("eval", "division by zero"))
        return
    if abs(a) > MAX_INT or abs(b) > MAX_INT:
        assert status == "error" and result[0] == "limit"
        return
    expected = OPERATIONS[op](a, b)
    if abs(expected) > MAX_INT:
        assert status == "error" and result[0] == "limit"
    else:
        assert (status, result) == ("ok", expected)
        assert type(result) is int


@settings(max_examples=300)
@given(a=st.integers(0, MAX_INT), b=st.integers(0, MAX_INT))
def test_integer_literals_round_trip(a: int, b: int) -> None:
    assert evaluate(parse(f"{a} - {b} + {b}"), {}) == a
    assert evaluate(parse(hex(a)), {}) == a


@settings(max_examples=300)
@given(a=st.integers(0, 2**256), b=st.integers(1, 2**256))
def test_division_is_exact_or_a_close_decimal(a: int, b: int) -> None:
    # 100 significant digits leave room for every uint256 quotient's integer part.
    quotient = evaluate(parse(f"{a} / {b}"), {})
    if a % b == 0:
        assert quotient == a // b and type(quotient) is int
    else:
        assert isinstance(quotient, Decimal)
        assert a // b <= quotient <= a // b + 1
        error = abs(Fraction(quotient) - Fraction(a, b))
        assert error <= Fraction(10) ** (quotient.adjusted() - 99)


@settings(max_examples=200)
@given(a=big_ints.filter(lambda n: abs(n) <= MAX_INT), scale=st.integers(0, 60))
def test_units_round_trip_exactly(a: int, scale: int) -> None:
    context = {"inputs": {"a": a, "d": scale}}
    text = evaluate(parse("format_units(inputs.a, inputs.d)"), context)
    context["inputs"]["t"] = text
    assert evaluate(parse("parse_units(inputs.t, inputs.d)"), context) == a


@settings(max_examples=200)
@given(
    a=big_ints.filter(lambda n: abs(n) <= MAX_INT), b=big_ints.filter(lambda n: abs(n) <= MAX_INT)
)
def test_comparisons_match_python(a: int, b: int) -> None:
    context = {"inputs": {"a": a, "b": b, "da": Decimal(a)}}
    assert evaluate(parse("inputs.a < inputs.b"), context) is (a < b)
    assert evaluate(parse("inputs.da == inputs.a"), context) is True
    assert evaluate(parse("inputs.da >= inputs.b"), context) is (a >= b)


# --- step ids -------------------------------------------------------------------------


@settings(max_examples=300)
@given(step_id=step_ids, field=st.sampled_from(["output", "status", "error", "tx"]))
def test_every_step_id_the_language_allows_reads_as_itself(step_id: str, field: str) -> None:
    """``steps.<id>.<field>`` reads that step, whatever the id: a ``-`` in it is part of
    the id (as GitHub Actions reads it), never a subtraction."""
    tree = parse(f"steps.{step_id}.{field}")
    assert tree == Member(Member(Name("steps"), step_id), field)
    context = {"steps": {step_id: {field: 7}}}
    assert evaluate(tree, context) == 7
    assert parse_template(f"${{{{ steps.{step_id}.{field} }}}}").render(context) == 7


@settings(max_examples=300)
@given(step_id=step_ids, right=st.sampled_from(["item", "inputs.a", "1", "steps.b.output"]))
def test_a_subtraction_written_with_spaces_stays_one(step_id: str, right: str) -> None:
    tree = parse(f"steps.{step_id} - {right}")
    assert isinstance(tree, Binary) and tree.op == "-"
    assert tree.left == Member(Name("steps"), step_id)
    assert tree.right == parse(right)
