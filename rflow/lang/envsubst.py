"""Load-time environment substitution in YAML string values.

``${VAR}`` is replaced by the variable's value and ``${VAR:-default}`` falls back to
``default`` when the variable is unset or empty. ``$${`` is a literal ``${``. ``${{ ... }}``
is an expression evaluated at run time, not a substitution, and is left untouched along
with everything inside it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_TOKEN = re.compile(
    r"\$\$\{"  # escape
    r"|\$\{\{(?:.*?\}\}|.*\Z)"  # an expression, closed or not: the expression parser reports it
    r"|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}"
    r"|\$\{",  # anything else is a mistake
    re.DOTALL,
)


class EnvSubstitutionError(ValueError):
    """A ``${...}`` that names an unset variable or is malformed; the message is for a person."""


def substitute(text: str, env: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    """``text`` with every ``${VAR}`` replaced, and the names of the variables used.

    Raises :class:`EnvSubstitutionError` naming the first unset variable without a default.
    """
    if "$" not in text:
        return text, ()
    used: list[str] = []

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "$${":
            return "${"
        if token.startswith("${{"):
            return token
        name = match["name"]
        if name is None:
            raise EnvSubstitutionError(
                f"malformed substitution in {text!r}: write ${{NAME}} or ${{NAME:-default}}, "
                "or $${ for a literal '${'"
            )
        used.append(name)
        value = env.get(name)
        if value:
            return value
        if match["default"] is not None:
            return match["default"]
        if value is None:
            raise EnvSubstitutionError(
                f"environment variable {name} is not set "
                f"(write ${{{name}:-default}} to give a default)"
            )
        return value

    return _TOKEN.sub(replace, text), tuple(used)
