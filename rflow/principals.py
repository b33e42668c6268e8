"""Principals: who calls the API and answers approvals, known by their bearer tokens.

A project declares principals by name, each with the environment variable holding its
token, its role and what it ``can`` do beyond the role (:mod:`rflow.authz` decides what
that allows); ``operator`` is built in, holds ``RFLOW_API_TOKEN`` and has the role
``operator``. Tokens are read from the
environment when a worker (or the CLI) starts and kept only as digests in memory: they
never reach a topic, a table or a log. :meth:`Principals.resolve` compares a presented
token with every known one in constant time, so neither the answer nor its timing says
which principal, if any, came close.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rflow.authz import Principal

if TYPE_CHECKING:
    from pydantic import SecretStr

    from rflow.lang import Project
    from rflow.lang.model.resources import Principal as DeclaredPrincipal

OPERATOR = "operator"
"""The built-in principal of ``RFLOW_API_TOKEN``."""

OPERATOR_TOKEN_ENV = "RFLOW_API_TOKEN"


class TokenConflict(ValueError):
    """Two principals have the same token: a request could not say who made it."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True)
class Principals:
    """The principals that can authenticate, each with its token's digest."""

    tokens: tuple[tuple[str, bytes], ...] = ()
    unset: tuple[tuple[str, str], ...] = ()
    """Declared principals whose token variable is unset or empty: (name, variable)."""
    grants: tuple[Principal, ...] = ()
    """Each principal that can authenticate, with its role and ``can``."""

    @classmethod
    def of(
        cls, project: Project | None, env: Mapping[str, str], api_token: SecretStr | None
    ) -> Principals:
        """The principals of ``project`` with their tokens from ``env``, and ``operator``
        with ``api_token``; :class:`TokenConflict` if two share a token."""
        return cls.declared(project.principals if project else {}, env, api_token)

    @classmethod
    def declared(
        cls,
        principals: Mapping[str, DeclaredPrincipal],
        env: Mapping[str, str],
        api_token: SecretStr | None,
    ) -> Principals:
        """The ``principals`` a project declares with their tokens from ``env``, and
        ``operator`` with ``api_token``; :class:`TokenConflict` if two share a token."""
        found: list[tuple[str, bytes]] = []
        unset: list[tuple[str, str]] = []
        grants: list[Principal] = []
        if api_token is not None and api_token.get_secret_value():
            found.append((OPERATOR, _digest(api_token.get_secret_value())))
            grants.append(Principal.of(OPERATOR, "operator"))
        for name, principal in principals.items():
            token = env.get(principal.token_env)
            if token:
                found.append((name, _digest(token)))
                grants.append(Principal.of(name, principal.role, principal.can))
            else:
                unset.append((name, principal.token_env))
        owners: dict[bytes, str] = {}
        for name, digest in found:
            if digest in owners:
                raise TokenConflict(
                    f"principals {owners[digest]!r} and {name!r} have the same token: "
                    "give each its own, so that an answer says who gave it"
                )
            owners[digest] = name
        return cls(tuple(found), tuple(unset), tuple(grants))

    def __bool__(self) -> bool:
        return bool(self.tokens)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.tokens)

    def principal(self, token: str) -> Principal | None:
        """The principal holding ``token``, with its role, or ``None``."""
        return self.named(self.resolve(token))

    def named(self, name: str | None) -> Principal | None:
        """The principal called ``name`` (that can authenticate), or ``None``."""
        return next((p for p in self.grants if p.name == name), None)

    def digest_of(self, name: str) -> bytes | None:
        """The digest of ``name``'s current token (a session checks that it has not
        changed since its sign-in), or ``None`` when it cannot authenticate."""
        return next((digest for owner, digest in self.tokens if owner == name), None)

    def resolve(self, token: str) -> str | None:
        """The principal holding ``token``, or ``None``; every token is compared."""
        given = _digest(token)
        match = None
        for name, digest in self.tokens:
            if hmac.compare_digest(given, digest):
                match = name
        return match
