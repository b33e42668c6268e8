"""Evaluation: operators, truthiness, null propagation, exact arithmetic and errors."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from rflow.expr import ExpressionError, evaluate, parse

CONTEXT: dict[str, Any] = {
    "trigger": {"args": {"sender": "0xAbC", "amount": 10**20, "ok": True}},
    "steps": {
        "gate": {"output": {"allowed": True, "limit": Decimal("2.5")}, "status": "succeeded"},
        "plan": {"output": {"body": '{"recipients": [{"address": "0x1", "amount": 1.5}]}'}},
        "mirror": {"tx": {"hash": "0xdead"}},
    },
    "item": {"address": "0x1", "amount": 7, "tags": ["a", "b"]},
    "item_index": 3,
    "matrix": {"network": "base"},
    "run": {"id": "r-1", "status": "failed"},
    "error": {"kind": "rpc_timeout", "message": "timed out"},
    "env": {"REGION": "eu"},
    "inputs": {"list": [1, 2, 3], "empty": [], "obj": {}, "zero": 0, "dzero": Decimal("0.0")},
}


def ev(source: str, context: dict[str, Any] | None = None) -> Any:
    return evaluate(parse(source), CONTEXT if context is None else context)


def failure(source: str, context: dict[str, Any] | None = None) -> ExpressionError:
    with pytest.raises(ExpressionError) as info:
        ev(source, context)
    return info.value


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("trigger.args.sender", "0xAbC"),
        ("steps.mirror.tx.hash", "0xdead"),
        ("steps.gate.output", {"allowed": True, "limit": Decimal("2.5")}),
        ("steps['gate'].status", "succeeded"),
        ("item.tags[0]", "a"),
        ("item.tags[-1]", "b"),
        ("item.tags[-2]", "a"),
        ("item.tags[2]", None),
        ("item.tags[-3]", None),
        ("item['tags'][item_index - 2]", "b"),
        ("'abc'[1]", "b"),
        ("'abc'[5]", None),
        ("matrix.network", "base"),
        ("env.REGION", "eu"),
        ("run.id + ':' + run.status", "r-1:failed"),
    ],
)
def test_access(source: str, value: Any) -> None:
    assert ev(source) == value


@pytest.mark.parametrize(
    "source",
    [
        "steps.nope",
        "steps.nope.output",
        "steps.nope.output.deeper[0]",
        "steps.nope['x']",
        "null.x",
        "null[0]",
        "state.anything",
        "inputs.obj.missing",
    ],
)
def test_null_propagation(source: str) -> None:
    assert ev(source) is None


def test_missing_root_is_null() -> None:
    assert ev("error.kind", {}) is None
    assert ev("error", {"steps": {}}) is None


@pytest.mark.parametrize(
    ("source", "message", "offset"),
    [
        ("item.amount.x", "cannot read member 'x' of int", 11),
        ("item.tags.x", "cannot read member 'x' of list", 9),
        ("item.tags['x']", "list index must be an int, got str", 9),
        ("item.tags[true]", "list index must be an int, got bool", 9),
        ("item.tags[1.0]", "list index must be an int, got decimal", 9),
        ("item[0]", "object key must be a str, got int", 4),
        ("item.amount[0]", "cannot index int", 11),
    ],
)
def test_access_errors(source: str, message: str, offset: int) -> None:
    error = failure(source)
    assert (error.message, error.offset, error.kind) == (message, offset, "eval")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("null", False),
        ("false", False),
        ("0", False),
        ("0.0", False),
        ("inputs.dzero", False),
        ("''", False),
        ("[]", False),
        ("{}", False),
        ("true", True),
        ("1", True),
        ("-1", True),
        ("0.001", True),
        ("'false'", True),
        ("'0'", True),
        ("[null]", True),
        ("{a: null}", True),
    ],
)
def test_truthiness(source: str, expected: bool) -> None:
    assert ev(f"not not ({source})") is expected
    assert ev(f"!({source})") is (not expected)
    assert ev(f"{source} and true") is expected
    assert ev(f"{source} or false") is expected


def test_logic_returns_booleans_and_short_circuits() -> None:
    assert ev("1 and 'x'") is True
    assert ev("0 or ''") is False
    assert ev("false and item.amount.boom") is False
    assert ev("true or item.amount.boom") is True
    assert ev("true && false || true") is True
    with pytest.raises(ExpressionError):
        ev("true and item.amount.boom")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("1 == 1", True),
        ("1 == 1.0", True),
        ("1.50 == 1.5", True),
        ("1 == true", False),
        ("0 == false", False),
        ("true == true", True),
        ("null == null", True),
        ("null == false", False),
        ("null == 0", False),
        ("'1' == 1", False),
        ("[] == {}", False),
        ("[1, [2.0]] == [1.0, [2]]", True),
        ("[1, 2] == [1, 2, 3]", False),
        ("{a: 1, b: [true]} == {b: [true], a: 1.0}", True),
        ("{a: 1} == {a: true}", False),
        ("{a: 1} == {b: 1}", False),
        ("1 != 2", True),
        ("1 != 1.0", False),
        ("'a' != 'a'", False),
        ("1 < 2", True),
        ("1 < 1.5", True),
        ("2 <= 2.0", True),
        ("-1 > -1.5", True),
        ("3 >= 4", False),
        ("'abc' < 'abd'", True),
        ("'b' > 'abc'", True),
        ("trigger.args.amount > 99999999999999999999.5", True),
        ("trigger.args.amount < 100000000000000000000.000000001", True),
    ],
)
def test_comparisons(source: str, expected: bool) -> None:
    assert ev(source) is expected


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("'a' < 1", "cannot compare str and int"),
        ("1 >= 'a'", "cannot compare int and str"),
        ("true < false", "cannot compare bool and bool"),
        ("null <= 1", "cannot compare null and int"),
        ("[1] > [0]", "cannot compare list and list"),
    ],
)
def test_comparison_errors(source: str, message: str) -> None:
    error = failure(source)
    assert (error.message, error.kind) == (message, "eval")


def test_comparison_error_offset_is_the_operator() -> None:
    assert failure("item.address < 5").offset == 13


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("error.kind in ['rpc_timeout', 'rate_limited']", True),
        ("error.kind not in ['rpc_timeout', 'rate_limited']", False),
        ("1 in [1.0, 2]", True),
        ("true in [1]", False),
        ("[1] in [[1], [2]]", True),
        ("'ell' in 'hello'", True),
        ("'' in 'hello'", True),
        ("'x' not in 'hello'", True),
        ("'address' in item", True),
        ("'nope' in item", False),
        ("1 in item", False),
        ("1 in null", False),
        ("1 not in null", True),
    ],
)
def test_membership(source: str, expected: bool) -> None:
    assert ev(source) is expected


def test_membership_errors() -> None:
    assert failure("1 in 'abc'").message == "cannot search for int in a str"
    assert failure("1 in 5").message == "cannot search in int"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("1 + 2", 3),
        ("1 + 0.5", Decimal("1.5")),
        ("0.1 + 0.2", Decimal("0.3")),
        ("0.1 + 0.2 == 0.3", True),
        ("'a' + 'b'", "ab"),
        ("[1] + [2, 3]", [1, 2, 3]),
        ("5 - 7", -2),
        ("5 - 0.5", Decimal("4.5")),
        ("6 * 7", 42),
        ("1.5 * 2", Decimal("3.0")),
        ("6 / 3", 2),
        ("7 / 2", Decimal("3.5")),
        ("-7 / 2", Decimal("-3.5")),
        ("1 / 4", Decimal("0.25")),
        ("1.5 / 0.5", Decimal("3")),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7.5 // 2", 3),
        ("-7.5 // 2", -4),
        ("7 // -2", -4),
        ("7 % 3", 1),
        ("-7 % 3", 2),
        ("7 % -3", -2),
        ("7.5 % 2", Decimal("1.5")),
        ("-7.5 % 2", Decimal("0.5")),
        ("7.5 % -2", Decimal("-0.5")),
        ("-(3)", -3),
        ("--3", 3),
        ("-1.5", Decimal("-1.5")),
        ("2 + 3 * 4 - 6 / 2", 11),
        ("trigger.args.amount * 3", 3 * 10**20),
        ("0x10 + 1", 17),
    ],
)
def test_arithmetic(source: str, expected: Any) -> None:
    result = ev(source)
    assert result == expected
    assert type(result) is type(expected)


def test_inexact_division_uses_ample_precision() -> None:
    third = ev("1 / 3")
    assert isinstance(third, Decimal)
    assert str(third) == "0." + "3" * 100
    wei = 2**256
    assert ev(f"{wei} / {10**18}") == Decimal(f"{wei // 10**18}.{wei % 10**18:018d}")


def test_big_integer_arithmetic_is_exact() -> None:
    wei = 2**256 - 1
    context = {"inputs": {"a": wei, "b": 10**18}}
    assert ev("inputs.a * inputs.b", context) == wei * 10**18
    assert ev("inputs.a // inputs.b", context) == wei // 10**18
    assert ev("inputs.a % inputs.b", context) == wei % 10**18
    assert ev("inputs.a + 1 - inputs.a", context) == 1
    assert ev(f"{2**1023} + {2**1023}") == 2**1024


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (f"{2**1024} + 1", "integer exceeds the limit of 2**1024 in magnitude"),
        (f"{2**600} * {2**600}", "integer exceeds the limit of 2**1024 in magnitude"),
        (f"-{2**1024} - 1", "integer exceeds the limit of 2**1024 in magnitude"),
        (
            "99999999999999999999999.9 * " * 60 + "1.0",
            "decimal result exceeds the limit of 10**1000",
        ),
    ],
)
def test_arithmetic_limits(source: str, message: str) -> None:
    error = failure(source)
    assert (error.kind, error.message) == ("limit", message)


def test_huge_context_integers_are_refused_not_computed() -> None:
    context = {"inputs": {"a": 10**5000}}
    assert failure("inputs.a * inputs.a", context).kind == "limit"
    assert failure("inputs.a + 1", context).kind == "limit"
    assert failure("str(inputs.a)", context).kind == "limit"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("1 / 0", "division by zero"),
        ("1 // 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("1.5 / 0.0", "division by zero"),
        ("1 / 0.0", "division by zero"),
        ("'a' + 1", "cannot add str and int"),
        ("1 + 'a'", "cannot add int and str"),
        ("[1] + 'a'", "cannot add list and str"),
        ("true + 1", "cannot add bool and int"),
        ("null + 1", "cannot add null and int"),
        ("'a' - 'b'", "cannot subtract str and str"),
        ("'ab' * 3", "cannot multiply str and int"),
        ("'a' / 2", "cannot divide str and int"),
        ("'a' // 2", "cannot divide str and int"),
        ("'a' % 2", "cannot take the remainder of str and int"),
        ("-'a'", "cannot negate str"),
        ("-true", "cannot negate bool"),
        ("-null", "cannot negate null"),
    ],
)
def test_arithmetic_errors(source: str, message: str) -> None:
    error = failure(source)
    assert (error.kind, error.message) == ("eval", message)


def test_error_offsets_point_at_the_failing_node() -> None:
    source = "item.amount + steps.gate.status"
    error = failure(source)
    assert error.offset == source.index("+")
    assert failure("length(1)").offset == 0
    assert failure("[1, 2, length(item.amount)]").offset == 7


def test_non_finite_decimals_in_context_are_refused() -> None:
    context = {"inputs": {"nan": Decimal("NaN"), "inf": Decimal("Infinity")}}
    assert failure("inputs.nan + 1", context).message == "decimal value NaN is not a finite number"
    assert failure("inputs.inf < 1", context).kind == "eval"
    assert ev("inputs.nan == inputs.nan", context) is False


def test_list_and_object_literals_evaluate_their_items() -> None:
    assert ev("[item.amount, {k: item.address}]") == [7, {"k": "0x1"}]


def test_evaluation_does_not_mutate_the_context() -> None:
    context = {"inputs": {"list": [1, 2]}}
    assert ev("inputs.list + [3]", context) == [1, 2, 3]
    assert context == {"inputs": {"list": [1, 2]}}


def test_tuples_count_as_lists() -> None:
    assert ev("inputs.t[1] + length(inputs.t)", {"inputs": {"t": (1, 2)}}) == 4


def test_unsupported_context_values_are_errors() -> None:
    context = {"inputs": {"f": 1.5, "o": object()}}
    assert failure("inputs.f + 1", context).message == "cannot add float and int"
    assert failure("str(inputs.o)", context).message == (
        "cannot convert a value of type object to text"
    )
    assert ev("inputs.f == 1.5", context) is False


def test_deep_context_values_do_not_hit_the_recursion_limit() -> None:
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    context = {"inputs": {"a": deep, "b": deep}}
    assert ev("inputs.a == inputs.b", context) is True
    assert len(ev("to_json(inputs.a)", context)) == 10002
