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
    for page in ("expressions.md", "commands.md", "settings.md", "console.md"):
        text = (reference.DOCS / page).read_text()
        (tmp_path / page).write_text(
            text.replace("`item_index`", "`item_position`")
            .replace("## `fail`", "## fail")
            .replace("RFLOW_PAGERDUTY_URL", "RFLOW_PAGER_URL")
            .replace("`/console/dead-letters/{letter_id}/replay`", "the replay form")
        )
    monkeypatch.setattr(reference, "DOCS", tmp_path)
    assert list(reference._page_gaps()) == [
        "docs/expressions.md: the root name `item_index` is not described",
        "docs/commands.md: the built-in command fail has no section (## `fail`)",
        "docs/settings.md: RFLOW_PAGERDUTY_URL is read but not described",
        "docs/console.md: the console's path `/console/dead-letters/{letter_id}/replay` "
        "is not described",
    ]


def test_every_path_the_console_serves_is_found(tmp_path: Path) -> None:
    paths = reference.console_paths()
    for path in ("/console/sign-in", "/console/runs/{run_id}", "/console/static/{name}"):
        assert path in paths
    assert "/console/dead-letters/{letter_id}/replay" in paths


def test_a_metric_served_but_not_declared_is_a_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    from rflow.streams import metrics

    class Undeclared(metrics.Metrics):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = metrics.Gauge("rflow_hidden", "Hidden", registry=self.registry)
            self.hidden_wei = metrics.ExactGauge("rflow_hidden_wei", "Hidden wei", [])

    monkeypatch.setattr(metrics, "Metrics", Undeclared)
    assert list(reference._metric_gaps()) == [
        f"metrics: {name} is not in Metrics.specs: declare it with Metrics._counter, _gauge, "
        "_histogram or _exact (streams/metrics.py)"
        for name in ("rflow_hidden", "rflow_hidden_wei")
    ]


def test_a_figure_of_the_consumption_layer_without_a_docstring_is_a_gap(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    module = tmp_path / "consumption.py"
    module.write_text(
        'STALL = 5.0\n"""Seconds."""\nBARE = 3\nCHECKS = {"a": lambda: True}\n_PRIVATE = 1\n'
    )
    monkeypatch.setattr(reference, "CONSUMPTION", module)
    assert list(reference._constants(module)) == [("STALL", "5.0", "Seconds."), ("BARE", "3", None)]
    assert list(reference._consumption_gaps()) == [
        "consumption: BARE has no description: write a docstring under it (streams/consumption.py)"
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
