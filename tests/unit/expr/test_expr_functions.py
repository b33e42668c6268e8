"""The function registry: every function, its argument checks and its limits."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from rflow.expr import FUNCTIONS, ExpressionError, evaluate, parse

CONTEXT: dict[str, Any] = {
    "inputs": {
        "body": '{"recipients": [{"address": "0x1", "amount": 1.5}, {"amount": 10}], "n": null}',
        "obj": {"b": 1, "a": [True, None]},
        "words": ["x", "y"],
        "wei": 1_500_000_000_000_000_000,
    }
}


def ev(source: str, context: dict[str, Any] | None = None) -> Any:
    return evaluate(parse(source), CONTEXT if context is None else context)


def failure(source: str, context: dict[str, Any] | None = None) -> ExpressionError:
    with pytest.raises(ExpressionError) as info:
        ev(source, context)
    return info.value


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from_json(inputs.body).recipients[0].amount", Decimal("1.5")),
        ("from_json(inputs.body).recipients[1].amount", 10),
        ("from_json(inputs.body).n", None),
        ("from_json('123456789012345678901234567890')", 123456789012345678901234567890),
        ("from_json('1e3')", Decimal("1E+3")),
        ("from_json('[1.10, -0.5]')", [Decimal("1.10"), Decimal("-0.5")]),
        ("from_json('\"\\\\u00e9\"')", "é"),
        ("to_json(inputs.obj)", '{"b":1,"a":[true,null]}'),
        ("to_json([1.50, 'é\"', {}])", '[1.50,"é\\"",{}]'),
        (f"to_json({2**256})", str(2**256)),
        ("to_json(from_json('{\"x\": [1.5, 2]}'))", '{"x":[1.5,2]}'),
        ("to_json(null)", "null"),
        ("length('héllo')", 5),
        ("length(inputs.words)", 2),
        ("length(inputs.obj)", 2),
        ("lower('AbC')", "abc"),
        ("upper('AbC')", "ABC"),
        ("trim('  a b \\n')", "a b"),
        ("contains('hello', 'ell')", True),
        ("contains(inputs.words, 'y')", True),
        ("contains([1, 2], 2.0)", True),
        ("contains([1, 2], true)", False),
        ("contains(null, 'x')", False),
        ("starts_with('0xabc', '0x')", True),
        ("ends_with('0xabc', 'bd')", False),
        ("format('{0} and {1}', 'a', 2)", "a and 2"),
        ("format('{1}{0}{1}', null, true)", "truetrue"),
        ("format('{{{0}}}', [1])", "{[1]}"),
        ("format('no placeholders')", "no placeholders"),
        ("join(inputs.words, ', ')", "x, y"),
        ("join([1, null, true, 1.5])", "1,,true,1.5"),
        ("join([])", ""),
        ("split('a,b,,c', ',')", ["a", "b", "", "c"]),
        ("keys(inputs.obj)", ["b", "a"]),
        ("values(inputs.obj)", [1, [True, None]]),
        ("default(null, 5)", 5),
        ("default(0, 5)", 0),
        ("default(inputs.missing.x, 'none')", "none"),
        ("int(7)", 7),
        ("int('42')", 42),
        ("int(' -42 ')", -42),
        ("int('0x2A')", 42),
        ("int('5.000')", 5),
        ("int(3.0)", 3),
        (f"int('{2**256}')", 2**256),
        ("str(null)", ""),
        ("str(true)", "true"),
        ("str(12)", "12"),
        ("str(1.50)", "1.50"),
        ("str(decimal('0.00000001'))", "0.00000001"),
        ("str({a: [1]})", '{"a":[1]}'),
        ("str('x')", "x"),
        ("decimal(2)", Decimal(2)),
        ("decimal('1.25')", Decimal("1.25")),
        ("decimal('-.5')", Decimal("-0.5")),
        ("decimal(1.5)", Decimal("1.5")),
        ("min(3, 1, 2)", 1),
        ("min([3, 1.5, 2])", Decimal("1.5")),
        ("max(3, 1, 2)", 3),
        ("max(['a', 'c', 'b'])", "c"),
        ("max([7])", 7),
        ("abs(-5)", 5),
        ("abs(-1.5)", Decimal("1.5")),
        ("sum([1, 2, 3])", 6),
        ("sum([1, 0.5])", Decimal("1.5")),
        ("sum([])", 0),
        ("range(3)", [0, 1, 2]),
        ("range(2, 5)", [2, 3, 4]),
        ("range(-1)", []),
        ("is_empty(null)", True),
        ("is_empty('')", True),
        ("is_empty([])", True),
        ("is_empty({})", True),
        ("is_empty(0)", False),
        ("is_empty(' ')", False),
        ("is_not_empty([0])", True),
        ("is_not_empty(null)", False),
        ("parse_units('1.5', 18)", 1_500_000_000_000_000_000),
        ("parse_units('1', 6)", 1_000_000),
        ("parse_units('0.000001', 6)", 1),
        ("parse_units('-2.50', 1)", -25),
        ("parse_units(2, 3)", 2000),
        ("parse_units(1.25, 2)", 125),
        ("parse_units('.5', 1)", 5),
        ("format_units(inputs.wei, 18)", "1.5"),
        ("format_units(1000000, 6)", "1"),
        ("format_units(1, 6)", "0.000001"),
        ("format_units(-1234, 2)", "-12.34"),
        ("format_units(5, 0)", "5"),
        (
            f"format_units({2**256 - 1}, 18)",
            "115792089237316195423570985008687907853269984665640564039457.584007913129639935",
        ),
    ],
)
def test_functions(source: str, expected: Any) -> None:
    result = ev(source)
    assert result == expected
    assert type(result) is type(expected)


def test_no_float_ever_leaves_from_json() -> None:
    value = ev("from_json('[0.1, 1e-3, 2, {\"a\": 3.0}]')")
    assert value == [Decimal("0.1"), Decimal("0.001"), 2, {"a": Decimal("3.0")}]
    assert not any(isinstance(v, float) for v in [*value, value[3]["a"]])


def test_parse_and_format_units_round_trip() -> None:
    for text in ["0", "1", "1.5", "0.000000000000000001", "123456789.123456789"]:
        assert ev(f"format_units(parse_units('{text}', 18), 18)") == text


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("from_json(1)", "from_json() argument 1 must be a str, got int"),
        (
            "from_json('{')",
            "from_json(): invalid JSON at line 1 column 2: "
            "Expecting property name enclosed in double quotes",
        ),
        ("from_json('NaN')", "from_json(): NaN is not a valid JSON number"),
        ("length(1)", "length() argument 1 must be a str, list or object, got int"),
        ("length(null)", "length() argument 1 must be a str, list or object, got null"),
        ("lower(1)", "lower() argument 1 must be a str, got int"),
        ("contains(1, 1)", "cannot search in int"),
        ("contains('abc', 1)", "cannot search for int in a str"),
        ("starts_with('a', 1)", "starts_with() argument 2 must be a str, got int"),
        ("format(1)", "format() argument 1 must be a str, got int"),
        (
            "format('{1}', 'a')",
            "format(): placeholder {1} has no argument (1 argument given after the format string)",
        ),
        (
            "format('a } b')",
            "format(): unmatched '}' at position 2 of the format string "
            "(write '{{' or '}}' for a literal brace)",
        ),
        (
            "format('{x}')",
            "format(): unmatched '{' at position 0 of the format string "
            "(write '{{' or '}}' for a literal brace)",
        ),
        ("join('abc')", "join() argument 1 must be a list, got str"),
        ("join([], 1)", "join() argument 2 must be a str, got int"),
        ("split('a', '')", "split() separator must not be empty"),
        ("keys([])", "keys() argument 1 must be an object, got list"),
        ("int('1.5')", "int(): '1.5' has a fractional part"),
        ("int(1.5)", "int(): 1.5 has a fractional part"),
        ("int('abc')", "int(): 'abc' is not an integer"),
        ("int(true)", "int() cannot convert bool"),
        ("int(null)", "int() cannot convert null"),
        ("decimal('1e5')", "decimal(): '1e5' is not a decimal number"),
        ("decimal(true)", "decimal() cannot convert bool"),
        ("min([])", "min() of an empty list"),
        ("min(1, 'a')", "cannot compare str and int"),
        ("max(5)", "max() argument 1 must be a list, got int"),
        ("abs('1')", "abs() argument 1 must be a number, got str"),
        ("sum([1, '2'])", "sum() items must be numbers, got str"),
        ("sum(null)", "sum() argument 1 must be a list, got null"),
        ("range('3')", "range() argument 1 must be an int, got str"),
        ("range(1.0)", "range() argument 1 must be an int, got decimal"),
        ("parse_units('1.5', 0)", "parse_units(): '1.5' has more than 0 decimal places"),
        ("parse_units('abc', 18)", "parse_units(): 'abc' is not a decimal number"),
        ("parse_units('1', 256)", "parse_units() argument 2 must be an int from 0 to 255, got 256"),
        ("parse_units(true, 18)", "parse_units() argument 1 must be a str or number, got bool"),
        ("format_units(1.5, 18)", "format_units() argument 1 must be an int, got decimal"),
        ("format_units(1, -1)", "format_units() argument 2 must be an int from 0 to 255, got -1"),
    ],
)
def test_function_errors(source: str, message: str) -> None:
    error = failure(source)
    assert (error.kind, error.message) == ("eval", message)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("range(10001)", "range() of more than 10000 items"),
        ("range(-5000, 5001)", "range() of more than 10000 items"),
        ("from_json(inputs.deep)", "from_json() input nests deeper than 64 levels"),
        ("from_json(inputs.big)", "from_json() input exceeds the limit of 1048576 characters"),
        ("from_json(inputs.bigint)", "from_json(): integer exceeds the limit of 2**1024"),
        ("from_json('1e5000')", "from_json(): number exceeds the limit of 10**±1000"),
        ("split(inputs.commas, ',')", "list exceeds the limit of 100000 items"),
        ("int(inputs.bigint)", "integer exceeds the limit of 2**1024 in magnitude"),
        ("parse_units('1', 255) * 10", None),
        (f"parse_units('{10**300}', 255)", "integer exceeds the limit of 2**1024 in magnitude"),
        ("format('{0}{0}', inputs.half)", None),
        (
            "join([inputs.half, inputs.half, inputs.half])",
            "string exceeds the limit of 1048576 characters",
        ),
        ("inputs.half + inputs.half + 'x'", "string exceeds the limit of 1048576 characters"),
        ("upper(inputs.half) + upper(inputs.half)", None),
        (
            " + ".join(["sum(inputs.numbers)"] * 5),
            "expression exceeded its evaluation budget of 100000 steps",
        ),
    ],
)
def test_function_limits(source: str, message: str | None) -> None:
    context = {
        "inputs": {
            "deep": "[" * 100_000,
            "big": " " * (1 << 20) + "1",
            "bigint": "9" * 400,
            "commas": "," * 200_000,
            "half": "x" * (1 << 19),
            "numbers": list(range(100_000)),
        }
    }
    if message is None:
        ev(source, context)
    else:
        error = failure(source, context)
        assert (error.kind, error.message) == ("limit", message)


def test_json_depth_check_ignores_brackets_in_strings() -> None:
    text = '["' + "[" * 1000 + '"]'
    assert ev("from_json(inputs.t)", {"inputs": {"t": text}}) == ["[" * 1000]


def test_from_json_refuses_lists_over_the_limit() -> None:
    text = "[" + "0," * 100_000 + "0]"
    assert failure("from_json(inputs.t)", {"inputs": {"t": text}}).kind == "limit"


def test_registry_describes_every_function() -> None:
    expected = {
        "from_json", "to_json", "length", "lower", "upper", "trim", "contains", "starts_with",
        "ends_with", "format", "join", "split", "keys", "values", "default", "int", "str",
        "decimal", "min", "max", "abs", "sum", "range", "is_empty", "is_not_empty",
        "parse_units", "format_units",
    }  # fmt: skip
    assert set(FUNCTIONS) == expected
    for name, function in FUNCTIONS.items():
        assert function.name == name
        assert function.summary


def test_functions_are_callable_directly() -> None:
    assert FUNCTIONS["format_units"](10**18, 18) == "1"
    assert FUNCTIONS["length"]([1, 2]) == 2


def test_evaluation_budget_stops_expensive_expressions() -> None:
    context = {"inputs": {"big": list(range(100_000))}}
    source = " and ".join(["contains(inputs.big, -1) == false"] * 100)
    error = failure(source, context)
    assert (error.kind, error.message) == (
        "limit",
        "expression exceeded its evaluation budget of 100000 steps",
    )
