"""Environment substitution in YAML string values: ``${VAR}``.

``${VAR}`` is replaced by the variable's value and ``${VAR:-default}`` falls back to
``default`` when the variable is unset or empty. ``$${`` is a literal ``${``. ``${{ ... }}``
is an expression evaluated at run time, not a substitution, and is left untouched along
with everything inside it.

Outside workflow steps the loader substitutes when the file loads. Inside steps the text
is kept as written (a *placeholder*), checked at load time, and substituted only when the
step's effect is carried out, so the value lives in a worker's memory alone. Run data
interpolated into a step's input goes through :func:`escape` first, so it cannot name a
variable: only placeholders written in the definition are filled in.
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


def placeholder(name: str) -> str:
    """The text that stands for variable ``name`` until its value is filled in: ``${NAME}``."""
    return "${" + name + "}"


def names(text: str) -> tuple[str, ...]:
    """The variables ``text`` names in ``${VAR}`` / ``${VAR:-default}``, in order, once each
    (malformed ``${`` and expressions are not names)."""
    if "${" not in text:
        return ()
    found = [m["name"] for m in _TOKEN.finditer(text) if m["name"] is not None]
    return tuple(dict.fromkeys(found))


def has_placeholder(value: object) -> bool:
    """True when ``value`` is a string that names a variable (``${VAR}``), so its final
    text is only known once the variable is filled in."""
    return isinstance(value, str) and bool(names(value))


def escape(text: str) -> str:
    """``text`` with every ``${`` written ``$${``: substitution gives ``text`` back unchanged."""
    return text.replace("${", "$${") if "${" in text else text


def display(text: str) -> str:
    """``text`` as substitution would show it with every variable left as its placeholder:
    ``$${`` reads ``${``, ``${VAR}`` stays ``${VAR}``."""
    if "$${" not in text:
        return text
    return _TOKEN.sub(lambda m: "${" if m.group(0) == "$${" else m.group(0), text)
