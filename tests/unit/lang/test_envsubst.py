"""${VAR} substitution, its escape, and the placeholders steps keep."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rflow.lang.envsubst import (
    EnvSubstitutionError,
    display,
    escape,
    has_placeholder,
    names,
    placeholder,
    substitute,
)

ENV = {"AUDIT_URL": "https://audit.example", "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expected", "used"),
    [
        ("${AUDIT_URL}/runs", "https://audit.example/runs", ("AUDIT_URL",)),
        ("${MISSING:-fallback}", "fallback", ("MISSING",)),
        ("${EMPTY:-fallback}", "fallback", ("EMPTY",)),
        ("${EMPTY}", "", ("EMPTY",)),
        ("$${AUDIT_URL}", "${AUDIT_URL}", ()),
        ("${{ env.AUDIT_URL }}", "${{ env.AUDIT_URL }}", ()),
        (
            "${{ format('${X}') }} ${AUDIT_URL}",
            "${{ format('${X}') }} https://audit.example",
            ("AUDIT_URL",),
        ),
        ("costs $5", "costs $5", ()),
        ("plain", "plain", ()),
    ],
)
def test_substitution(text: str, expected: str, used: tuple[str, ...]) -> None:
    assert substitute(text, ENV) == (expected, used)


def test_missing_variable_without_default() -> None:
    with pytest.raises(EnvSubstitutionError) as caught:
        substitute("${AUDIT}", ENV)
    assert str(caught.value) == (
        "environment variable AUDIT is not set (write ${AUDIT:-default} to give a default)"
    )


@pytest.mark.parametrize("text", ["${1X}", "${AUDIT_URL", "${a b}"])
def test_malformed_substitution(text: str) -> None:
    with pytest.raises(EnvSubstitutionError, match="malformed substitution"):
        substitute(text, ENV)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${A}/x ${B:-d} ${A}", ("A", "B")),
        ("$${A} ${{ env.B }} costs $5", ()),
        ("${1X} ${C", ()),
    ],
)
def test_names_of_the_variables_a_text_uses(text: str, expected: tuple[str, ...]) -> None:
    assert names(text) == expected
    assert has_placeholder(text) == bool(expected)


def test_display_shows_placeholders_and_reads_escapes() -> None:
    assert display("$${A} ${B} ${{ x }} $5") == "${A} ${B} ${{ x }} $5"
    assert placeholder("API_TOKEN") == "${API_TOKEN}"


@given(st.text(alphabet="${}:-_ABaz1 ", max_size=40))
def test_escaped_text_substitutes_back_to_itself(text: str) -> None:
    # Run data may hold anything: once escaped, substitution names no variable in it.
    assert substitute(escape(text), ENV) == (text, ())
    assert display(escape(text)) == text
