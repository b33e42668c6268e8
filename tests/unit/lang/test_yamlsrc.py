"""Located YAML: positions, duplicate keys, scalar typing and abuse limits."""

from __future__ import annotations

import textwrap

import pytest

from rflow.lang.diagnostics import Location
from rflow.lang.yamlsrc import MAX_ALIASES, MAX_DEPTH, load_yaml


def load(text: str, env: dict[str, str] | None = None):
    return load_yaml(textwrap.dedent(text), "f.yaml", env or {})


def messages(text: str) -> list[str]:
    return [str(d) for d in load(text).diagnostics]


def test_keys_and_values_are_located() -> None:
    loaded = load(
        """\
        workflows:
          copy-trade:
            steps:
              - id: gate
                retry: { max_attempts: 3 }
        """
    )
    steps = ("workflows", "copy-trade", "steps")
    assert loaded.source.keys[(*steps, 0, "retry")] == Location("f.yaml", 5, 9)
    assert loaded.source.values[(*steps, 0, "retry")] == Location("f.yaml", 5, 16)
    assert loaded.source.values[(*steps, 0, "retry", "max_attempts")] == Location("f.yaml", 5, 32)
    assert loaded.source.values[(*steps, 0)] == Location("f.yaml", 4, 9)
    # A path with no entry of its own falls back to the nearest enclosing value.
    assert loaded.source.value((*steps, 0, "retry", "backoff")) == Location("f.yaml", 5, 16)


def test_scalars_follow_the_json_like_core() -> None:
    loaded = load(
        """\
        int: 12
        neg: -3
        float: 1.5
        sci: 1e18
        yes: true
        nothing: ~
        address: 0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48
        word: on
        date: 2025-01-31
        sexagesimal: 1:30
        quoted: "12"
        """
    )
    assert loaded.data == {
        "int": 12,
        "neg": -3,
        "float": 1.5,
        "sci": 1e18,
        "yes": True,
        "nothing": None,
        "address": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
        "word": "on",
        "date": "2025-01-31",
        "sexagesimal": "1:30",
        "quoted": "12",
    }


def test_duplicate_keys_are_errors_and_the_first_value_is_kept() -> None:
    loaded = load(
        """\
        config:
          max_concurrent_runs: 1
          max_concurrent_runs: 2
        """
    )
    assert loaded.data == {"config": {"max_concurrent_runs": 1}}
    assert [str(d) for d in loaded.diagnostics] == [
        "f.yaml:3:3: error: config.max_concurrent_runs: duplicate key 'max_concurrent_runs' (first defined on line 2)"
    ]


def test_env_substitution_in_values_only() -> None:
    loaded = load('"${KEY}": "${URL}/x"\nplain: ${URL}\n', {"URL": "https://h", "KEY": "k"})
    assert loaded.data == {"${KEY}": "https://h/x", "plain": "https://h"}
    assert loaded.source.substituted[("plain",)] == ("URL",)


def test_missing_variable_is_located_at_the_scalar() -> None:
    assert messages("a:\n  url: ${AUDIT_URL}\n") == [
        "f.yaml:2:8: error: a.url: environment variable AUDIT_URL is not set "
        "(write ${AUDIT_URL:-default} to give a default)"
    ]


def test_expression_origins_for_single_line_scalars() -> None:
    loaded = load(
        """\
        plain: ${{ a }}
        double: "x ${{ b }}"
        single: 'y ${{ c }}'
        escaped: "\\t${{ d }}"
        block: |
          ${{ e }}
        """
    )
    origins = loaded.source.origins
    assert origins[("plain",)] == Location("f.yaml", 1, 8)
    assert origins[("double",)] == Location("f.yaml", 2, 10)
    assert origins[("single",)] == Location("f.yaml", 3, 10)
    assert ("escaped",) not in origins  # the text differs from the source: no column mapping
    assert ("block",) not in origins
    assert loaded.source.at_offset(("double",), 2) == Location("f.yaml", 2, 12)


def test_aliases_are_expanded_with_the_anchor_locations() -> None:
    loaded = load(
        """\
        defaults: &retry
          max_attempts: 5
        used: *retry
        """
    )
    assert loaded.data["used"] == {"max_attempts": 5}
    assert loaded.source.values[("used",)] == Location("f.yaml", 3, 7)
    assert loaded.source.values[("used", "max_attempts")] == Location("f.yaml", 2, 17)


def test_too_many_aliases_are_refused() -> None:
    body = "a: &a x\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n"
    (diagnostic,) = load(body).diagnostics
    assert diagnostic.message == (
        f"more than {MAX_ALIASES} aliases (*name) in one file; refusing it as a possible YAML bomb"
    )
    assert (diagnostic.line, diagnostic.column) == (2, 5 + 4 * MAX_ALIASES)


def test_billion_laughs_is_refused_quickly() -> None:
    rows = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        rows.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    loaded = load("\n".join(rows) + "\n")
    assert loaded.data is None
    assert "expands to more than" in loaded.diagnostics[0].message


def test_deep_nesting_is_refused() -> None:
    (diagnostic,) = load("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)).diagnostics
    assert diagnostic.message == f"nesting is deeper than {MAX_DEPTH} levels"
    assert (diagnostic.line, diagnostic.column) == (1, MAX_DEPTH + 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "a: !!python/object:os.system x\n",
            "f.yaml:1:4: error: YAML tags (!!python/object:os.system) are not supported",
        ),
        (
            "a: 1\n---\nb: 2\n",
            "f.yaml:2:1: error: a file holds one YAML document; found a second '---'",
        ),
        (
            "base: &b {x: 1}\nc:\n  <<: *b\n",
            "f.yaml:3:3: error: merge keys (<<) are not supported: repeat the fields, or point an alias at the whole value",
        ),
        ("a: *nowhere\n", "f.yaml:1:4: error: alias *nowhere names no earlier anchor"),
        ("? [a, b]\n: 1\n", "f.yaml:1:3: error: mapping keys must be plain text, not a collection"),
        (
            "a: [1\nb: 2\n",
            "f.yaml:2:2: error: YAML syntax error: did not find expected ',' or ']' (while parsing a flow sequence)",
        ),
    ],
)
def test_refused_yaml(text: str, message: str) -> None:
    assert messages(text) == [message]


def test_explicit_str_tag_keeps_text() -> None:
    assert load("a: !!str 12\n").data == {"a": "12"}


def test_empty_document() -> None:
    loaded = load("# only a comment\n")
    assert loaded.data is None
    assert loaded.diagnostics == []
