"""The reference in docs/: generated parts current, nothing in the code undocumented."""

from __future__ import annotations

from pathlib import Path

import pytest

from rflow import reference
from rflow.expr import functions


def test_every_generated_part_of_the_reference_is_current() -> None:
    stale = [
        path.name
        for path in reference.pages()
        if reference.rewrite(path.read_text()) != path.read_text()
    ]
    assert stale == [], f"out of date: {', '.join(stale)}; run scripts/docs"


def test_nothing_in_the_code_is_undocumented() -> None:
    missing = reference.gaps()
    assert missing == [], "\n".join(missing)


def test_every_page_is_linked_from_the_index() -> None:
    index = (reference.DOCS / "README.md").read_text()
    for path in reference.pages():
        if path.name != "README.md":
            assert f"]({path.name})" in index, path.name


def test_a_function_without_an_example_or_with_a_wrong_one_is_a_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bare = functions.Function("twice", lambda _budget, x: x * 2, 1, 1, "Twice the number.")
    wrong = functions.Function(
        "thrice", lambda _budget, x: x * 3, 1, 1, "Thrice.", (("thrice(2)", "5"),)
    )
    monkeypatch.setitem(functions._REGISTRY, "twice", bare)
    monkeypatch.setitem(functions._REGISTRY, "thrice", wrong)
    found = list(reference._function_gaps())
    assert found == [
        "expressions: the example thrice(2) of thrice() gives 6, not 5",
        "expressions: function twice() has no example: add '>>> twice(...)' and the result "
        "on the next line to its docstring (rflow/expr/functions.py)",
    ]


def test_a_field_without_a_description_is_a_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = {
        "description": "A project.",
        "properties": {"workflows": {"description": "Workflows."}},
        "$defs": {
            "Gizmo": {
                "description": "A gizmo.",
                "properties": {"size": {"type": "integer"}, "name": {"description": "Its name."}},
            },
            "Bare": {"properties": {}},
        },
    }
    monkeypatch.setattr(reference, "_schema", lambda: schema)
    assert list(reference._schema_gaps()) == [
        "workflow files: Gizmo.size has no description: write a docstring under the field "
        "'size' of class Gizmo",
        "workflow files: model Bare has no description: give its class a docstring",
    ]


def test_a_page_that_misses_a_name_the_code_defines_is_a_gap(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for page in ("expressions.md", "commands.md", "settings.md"):
        text = (reference.DOCS / page).read_text()
        (tmp_path / page).write_text(
            text.replace("`item_index`", "`item_position`")
            .replace("## `fail`", "## fail")
            .replace("RFLOW_PAGERDUTY_URL", "RFLOW_PAGER_URL")
        )
    monkeypatch.setattr(reference, "DOCS", tmp_path)
    assert list(reference._page_gaps()) == [
        "docs/expressions.md: the root name `item_index` is not described",
        "docs/commands.md: the built-in command fail has no section (## `fail`)",
        "docs/settings.md: RFLOW_PAGERDUTY_URL is read but not described",
    ]


def test_a_block_is_rendered_between_its_markers_only() -> None:
    text = (
        "intro\n<!-- generated: model:FailArgs -->\nold\n<!-- end: model:FailArgs -->\n"
        "    <!-- generated: nosuch -->\n    <!-- end: nosuch -->\n"
    )
    fresh = reference.rewrite(text)
    assert fresh.startswith(
        "intro\n<!-- generated: model:FailArgs -->\n\nArguments of the fail command.\n\n| field |"
    )
    assert "| `message` | text | required |" in fresh
    assert fresh.endswith(
        "<!-- end: model:FailArgs -->\n    <!-- generated: nosuch -->\n    <!-- end: nosuch -->\n"
    )


def test_the_run_fields_validate_checks_are_the_ones_a_run_offers() -> None:
    from types import SimpleNamespace

    from rflow.engine.context import run_context
    from rflow.lang.references import RUN_FIELDS

    state = SimpleNamespace(
        trigger={},
        steps={},
        matrix=None,
        run_id="r1",
        workflow="w",
        version="v1",
        trigger_key="k",
        status="running",
        state={},
        error=None,
    )
    assert sorted(run_context(state)["run"]) == sorted(RUN_FIELDS)
