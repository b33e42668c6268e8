"""Templates and static references."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from rflow.expr import (
    ExpressionError,
    Member,
    Name,
    has_expression,
    parse,
    parse_template,
    references,
)

CONTEXT: dict[str, Any] = {
    "run": {"id": 7, "status": "failed"},
    "trigger": {"args": {"sender": "0xabc", "amount": 2**200}},
    "steps": {"gate": {"output": {"ok": True, "list": [1, "a", None]}}},
    "item": {"price": Decimal("1.50"), "none": None},
}


def test_text_without_expressions() -> None:
    template = parse_template("plain text")
    assert template.segments == ("plain text",)
    assert not template.is_single_expression
    assert template.render(CONTEXT) == "plain text"
    assert parse_template("").render(CONTEXT) == ""
    assert parse_template("").segments == ()


def test_segments_and_offsets() -> None:
    text = "run ${{ run.id }} ended ${{run.status}}"
    template = parse_template(text)
    assert template.segments == (
        "run ",
        Member(Name("run"), "id"),
        " ended ",
        Member(Name("run"), "status"),
    )
    first = template.segments[1]
    assert isinstance(first, Member)
    assert text[first.obj.offset :].startswith("run.id")
    assert template.render(CONTEXT) == "run 7 ended failed"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("${{ trigger.args.amount }}", 2**200),
        ("  ${{ steps.gate.output }}\n", {"ok": True, "list": [1, "a", None]}),
        ("${{ steps.gate.output.list }}", [1, "a", None]),
        ("${{ item.none }}", None),
        ("${{ item.price }}", Decimal("1.50")),
        ("${{ steps.gate.output.ok }}", True),
    ],
)
def test_single_expression_keeps_its_type(text: str, value: Any) -> None:
    template = parse_template(text)
    assert template.is_single_expression
    result = template.render(CONTEXT)
    assert result == value
    assert type(result) is type(value)


@pytest.mark.parametrize(
    ("text", "rendered"),
    [
        ("amount=${{ trigger.args.amount }}", f"amount={2**200}"),
        ("[${{ item.none }}]", "[]"),
        ("${{ true }}/${{ false }}", "true/false"),
        ("${{ item.price }} USDC", "1.50 USDC"),
        ("v=${{ steps.gate.output }}", 'v={"ok":true,"list":[1,"a",null]}'),
        ("${{ 1 }}${{ 2 }}", "12"),
        ("x ${{ 'a}}b' }} y", "x a}}b y"),
        ("${{ {'a': {'b': 1}} }}!", '{"a":{"b":1}}!'),
        ("${{ {'a': {'b': 1}}}}!", '{"a":{"b":1}}!'),
        ("<${{ '\\'}}' }}>", "<'}}>"),
        ("$ {{ not an expression }}", "$ {{ not an expression }}"),
    ],
)
def test_mixed_templates_render_text(text: str, rendered: str) -> None:
    template = parse_template(text)
    assert not template.is_single_expression
    assert template.render(CONTEXT) == rendered


def test_single_object_expression_with_trailing_text_is_not_single() -> None:
    assert not parse_template("${{ {'a': 1} }}!").is_single_expression
    assert parse_template("${{ {'a': {'b': 1}}}}").is_single_expression


@pytest.mark.parametrize(
    ("text", "message", "offset", "kind"),
    [
        ("a ${{ run.id ", "'${{' is never closed by '}}'", 2, "syntax"),
        ("a ${{ 'abc }}", "unterminated string literal", 6, "syntax"),
        (
            "a ${{ run. }}",
            "expected a member name after '.', found end of expression",
            11,
            "syntax",
        ),
        (
            "ok ${{ run.id }} ${{ foo }}",
            "unknown name 'foo' — expected one of: env, error, "
            "inputs, item, item_index, matrix, run, state, steps, trigger, wait",
            21,
            "syntax",
        ),
        ("${{ }}", "expected an expression, found end of expression", 4, "syntax"),
        ("${{ 1 }}}", None, None, None),
        ("${{ " + "1" * 5000 + " }}", "expression is longer than 4096 characters", 4099, "limit"),
        ("x" * 70_000, "template is longer than 65536 characters", 65536, "limit"),
    ],
)
def test_template_errors(text: str, message: str | None, offset: int, kind: str) -> None:
    if message is None:
        assert parse_template(text).render(CONTEXT) == "1}"
        return
    with pytest.raises(ExpressionError) as info:
        parse_template(text)
    assert (info.value.message, info.value.offset, info.value.kind) == (message, offset, kind)


def test_evaluation_error_offsets_are_relative_to_the_template() -> None:
    text = "sent ${{ run.status + 1 }}"
    with pytest.raises(ExpressionError) as info:
        parse_template(text).render(CONTEXT)
    assert info.value.offset == text.index("+")
    assert info.value.message == "cannot add str and int"


def test_rendered_size_is_limited() -> None:
    context = {"item": "x" * (1 << 19)}
    template = parse_template("${{ item }}${{ item }}${{ item }}")
    with pytest.raises(ExpressionError) as info:
        template.render(context)
    assert info.value.kind == "limit"


def test_has_expression() -> None:
    assert has_expression("a ${{ b }}")
    assert has_expression("${{")
    assert not has_expression("${AUDIT_URL}")
    assert not has_expression("{{ x }}")


def test_templates_are_hashable_values() -> None:
    assert parse_template("a ${{ run.id }}") == parse_template("a ${{ run.id }}")
    assert hash(parse_template("a ${{ run.id }}")) == hash(parse_template("a ${{ run.id }}"))


@pytest.mark.parametrize(
    ("source", "paths"),
    [
        ("trigger.args.sender", {("trigger", "args", "sender")}),
        ("item", {("item",)}),
        ("steps.gate.output.ok and item.x", {("steps", "gate", "output", "ok"), ("item", "x")}),
        ("steps['my-step'].output[0]", {("steps", "my-step", "output", 0)}),
        ("item.list[-1].x", {("item", "list", -1, "x")}),
        ("steps[item.key].output", {("steps",), ("item", "key")}),
        ("steps.gate.output[item_index + 1].x", {("steps", "gate", "output"), ("item_index",)}),
        ("from_json(steps.plan.output.body).recipients", {("steps", "plan", "output", "body")}),
        ("[1, 'a', {k: env.HOME}]", {("env", "HOME")}),
        ("1 + 2", set()),
        ("item.x == item.x", {("item", "x")}),
        ("item[true].x", {("item",)}),
    ],
)
def test_references(source: str, paths: set[tuple[str | int, ...]]) -> None:
    assert references(parse(source)) == frozenset(paths)


def test_template_references() -> None:
    template = parse_template("${{ run.id }} ${{ trigger.args.sender }} ${{ run.id }}")
    assert template.references() == frozenset({("run", "id"), ("trigger", "args", "sender")})
    assert parse_template("no expressions").references() == frozenset()
