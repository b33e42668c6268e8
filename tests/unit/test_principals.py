"""Principal resolution: a bearer token names at most one principal."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from rflow.lang import validate_text
from rflow.principals import OPERATOR, Principals, TokenConflict

PROJECT = """
principals:
  alice: { token_env: ALICE_TOKEN }
  bob: { token_env: BOB_TOKEN }
  carol: { token_env: CAROL_TOKEN }
"""


def project():
    report = validate_text(PROJECT, {})
    assert report.project is not None
    return report.project


def test_a_token_resolves_to_its_principal_and_the_api_token_to_operator():
    env = {"ALICE_TOKEN": "alice-secret", "BOB_TOKEN": "bob-secret", "CAROL_TOKEN": ""}
    principals = Principals.of(project(), env, SecretStr("ops-secret"))
    assert principals.resolve("alice-secret") == "alice"
    assert principals.resolve("bob-secret") == "bob"
    assert principals.resolve("ops-secret") == OPERATOR
    assert principals.resolve("alice-secret ") is None
    assert principals.resolve("") is None
    assert principals.names == (OPERATOR, "alice", "bob")
    # An unset or empty variable leaves its principal unable to authenticate.
    assert principals.unset == (("carol", "CAROL_TOKEN"),)
    # Tokens are kept as digests only.
    assert "alice-secret" not in repr(principals)


def test_without_any_token_nobody_authenticates():
    assert not Principals.of(None, {}, None)
    assert not Principals.of(project(), {}, SecretStr(""))
    only_operator = Principals.of(None, {"ALICE_TOKEN": "a"}, SecretStr("t"))
    assert only_operator.names == (OPERATOR,)


def test_two_principals_with_one_token_are_refused():
    with pytest.raises(TokenConflict, match="'alice' and 'bob' have the same token"):
        Principals.of(project(), {"ALICE_TOKEN": "same", "BOB_TOKEN": "same"}, None)
    with pytest.raises(TokenConflict, match="'operator' and 'alice'"):
        Principals.of(project(), {"ALICE_TOKEN": "same"}, SecretStr("same"))
