"""Load-time ${VAR} substitution."""

from __future__ import annotations

import pytest

from rflow.lang.envsubst import EnvSubstitutionError, substitute

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
