"""What a step fills in only when its effect runs: ``${VAR}`` and ``${{ env.NAME }}``.

Inside workflow steps the loader keeps ``${VAR}`` as written and the engine renders
``${{ env.NAME }}`` as the placeholder ``${NAME}``; the executor carrying out the effect
substitutes the worker's values, so they never enter run state, the journal or a topic.
That works only for values the step hands to its effect unchanged. The engine itself
reads conditions, lists, jumps, waits, delays and names, and stores state values: there a
placeholder would be compared or stored as text, so it is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rflow.lang.diagnostics import DataPath, Diagnostic
from rflow.lang.envsubst import display
from rflow.lang.yamlsrc import SourceMap

EFFECT_INPUTS = (
    "http_call url, headers and body; notify message; command args; "
    "to, args and value of a send_transaction; to and args of a read; query params"
)
"""Where a step may use ``${VAR}`` and ``${{ env.NAME }}``, for messages."""

_FIELDS: dict[str, frozenset[str]] = {
    "http_call": frozenset({"url", "headers", "body"}),
    "notify": frozenset({"message"}),
    "command": frozenset({"args"}),
    "send_transaction": frozenset(
        {"to", "args", "value", "gas_limit", "max_fee_per_gas", "max_priority_fee_per_gas"}
    ),
    "read": frozenset({"to", "args"}),
    "query": frozenset({"params"}),
}
_CALL_FIELDS = frozenset({"to", "args", "value"})


def effect_input(step: Mapping[str, Any], rest: DataPath) -> bool:
    """Whether the value at ``rest`` (a path inside ``step``'s raw data) is handed to the
    step's effect as it renders, so a placeholder in it can be filled in there."""
    if len(rest) < 2:
        return False
    action, field = rest[0], rest[1]
    allowed = _FIELDS.get(str(action))
    if allowed is None or action not in step:
        return False
    if action == "send_transaction" and field == "calls":
        return len(rest) >= 4 and rest[3] in _CALL_FIELDS
    if field not in allowed:
        return False
    if action == "command":
        command = step.get("command")
        name = command.get("name") if isinstance(command, Mapping) else None
        return not (name == "assert" and rest[2:3] == ("that",))
    return True


NESTED_LISTS = ("parallel", "race", "try", "catch", "compensate")
"""The keys of a step that hold steps of their own."""


def innermost_step(
    data: Mapping[str, Any], path: DataPath
) -> tuple[Mapping[str, Any], DataPath] | None:
    """The innermost raw step that ``path`` lies in, and the rest of ``path`` inside it."""
    node: Any = data
    for part in path[:4]:
        node = _child(node, part)
        if node is None:
            return None
    rest = path[4:]
    while (
        len(rest) >= 2
        and rest[0] in NESTED_LISTS
        and isinstance(rest[1], int)
        and isinstance(node, Mapping)
        and isinstance(inner := _child(_child(node, rest[0]), rest[1]), Mapping)
    ):
        node, rest = inner, rest[2:]
    return (node, rest) if isinstance(node, Mapping) else None


def _child(node: Any, part: str | int) -> Any:
    if isinstance(node, Mapping) and isinstance(part, str):
        return node.get(part)
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return None


def check_placeholders(data: dict[str, Any], source: SourceMap) -> list[Diagnostic]:
    """Errors for ``${VAR}`` written in a step where the engine, not the effect, reads the
    value. A ``$${`` there (no variable) is read as the ``${`` it stands for, as it is
    outside steps. Paths in error join ``source.unresolved``, so the model's own complaint
    about the same text is not reported twice."""
    found = []
    unescaped: set[tuple[int, Any]] = set()  # an alias shares its container with its anchor
    for path, used in source.deferred.items():
        inside = innermost_step(data, path)
        if inside is None or effect_input(*inside):
            continue
        if not used:
            _unescape(data, path, unescaped)
            continue
        listed = ", ".join(f"${{{name}}}" for name in used)
        found.append(
            Diagnostic.at(
                source.value(path),
                f"{listed} cannot be used here: inside a step, ${{VAR}} is filled in only "
                "when the step's effect runs (its value never enters run state), so it can "
                f"only stand in what the step hands to the effect ({EFFECT_INPUTS})",
                path,
            )
        )
        source.unresolved.add(path)
    return found


def _unescape(data: Any, path: DataPath, done: set[tuple[int, Any]]) -> None:
    node = data
    for part in path[:-1]:
        node = node[part]
    if (id(node), path[-1]) not in done:
        done.add((id(node), path[-1]))
        node[path[-1]] = display(node[path[-1]])
