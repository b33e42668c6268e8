"""Validation reports bad input; it never crashes on it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rflow.lang import validate_sources

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PROJECT = (EXAMPLES / "project.yaml").read_text()
WORKFLOWS = [
    yaml.safe_load((EXAMPLES / n).read_text())
    for n in ("copy-trade.yaml", "withdrawals.yaml", "relayer-gas.yaml")
]

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.sampled_from(
        ["", "x", "1 ether", "10s", "${{ steps.gate.output }}", "${{ (", "0x00", "@daily", "goto"]
    ),
    st.text(max_size=8),
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(WORKFLOWS) - 1), pick=st.integers(min_value=0), value=values)
def test_any_mutation_of_an_example_is_reported_not_raised(
    which: int, pick: int, value: Any
) -> None:
    data = copy.deepcopy(WORKFLOWS[which])
    paths = _paths(data)[1:]
    path = paths[pick % len(paths)]
    target = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    text = yaml.safe_dump(data, sort_keys=False)
    report = validate_sources([("project.yaml", PROJECT), ("wf.yaml", text)], {})
    assert (report.project is not None) == report.ok
    for diagnostic in report.diagnostics:
        assert diagnostic.message
        assert diagnostic.file in ("project.yaml", "wf.yaml")
        assert diagnostic.line is not None and diagnostic.column is not None


yaml_text = st.one_of(
    st.text(max_size=300),
    st.lists(
        st.sampled_from(
            [
                "workflows:",
                "  w:",
                "    trigger: { manual: {} }",
                "    steps:",
                "      - id: a",
                "        delay: { duration: 1s }",
                "&a [*a]",
                "*a",
                "!!python/object:os.system",
                "- [",
                "{",
                "}",
                ": :",
                "\t",
                "'",
                '"',
                "%YAML 1.1",
                "---",
                "...",
                "? x",
                "<<: *a",
                "\x00",
                "\ufeff",
                "key: |",
                "  text",
                "k: !!binary AA==",
            ]
        ),
        max_size=12,
    ).map("\n".join),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=yaml_text)
def test_any_text_is_loaded_or_refused_with_a_located_reason(text: str) -> None:
    report = validate_sources([("project.yaml", PROJECT), ("wf.yaml", text)], {})
    assert (report.project is not None) == report.ok
    for diagnostic in report.diagnostics:
        assert diagnostic.message
        assert diagnostic.file in ("project.yaml", "wf.yaml")
