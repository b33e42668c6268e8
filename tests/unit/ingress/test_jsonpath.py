"""The JSON path dialect of event_type_field."""

from __future__ import annotations

import pytest

from rflow.ingress.jsonpath import JsonPathError, PathNotFound, extract, parse

DOC = {
    "type": "push",
    "data": {"kind": "deposit", "x-kind": "odd", "items": [{"type": "a"}, {"type": "b"}]},
    "n": 0,
}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("$", DOC),
        ("$.type", "push"),
        ("$.data.kind", "deposit"),
        ("$.data.items[1].type", "b"),
        ("$.data['x-kind']", "odd"),
        ('$["data"]["kind"]', "deposit"),
        ("$.data.x-kind", "odd"),
        ("$.n", 0),
    ],
)
def test_extract(path, value):
    assert extract(DOC, path) == value


def test_parse_gives_steps():
    assert parse("$.a[2]['b c']") == ("a", 2, "b c")


@pytest.mark.parametrize(
    ("path", "at"),
    [
        ("$.missing", "$.missing"),
        ("$.type.deeper", "$.type.deeper"),
        ("$.data.items[5]", "$.data.items[5]"),
        ("$.data[0]", "$.data[0]"),
    ],
)
def test_missing_values_name_where(path, at):
    with pytest.raises(PathNotFound) as err:
        extract(DOC, path)
    assert err.value.at == at


def test_a_list_body():
    assert extract([{"type": "x"}], "$[0].type") == "x"
    with pytest.raises(PathNotFound):
        extract([{"type": "x"}], "$.type")


@pytest.mark.parametrize("path", ["type", "$type", "$.", "$[x]", "$.a..b", "$[-1]"])
def test_unsupported_paths_are_refused(path):
    with pytest.raises(JsonPathError):
        parse(path)
