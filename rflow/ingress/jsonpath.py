"""The small JSON path dialect of ``event_type_field``: ``$.type``, ``$.data.kind``,
``$.events[0].type`` and ``$['x-kind']``.

A path is ``$`` followed by steps: ``.name`` (letters, digits, ``_`` and ``-``),
``[index]`` (a non-negative integer) or ``['name']`` / ``["name"]`` (any name).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

Step = str | int

_STEP = re.compile(
    r"""\.(?P<name>[A-Za-z0-9_-]+)
      | \[(?P<index>\d+)\]
      | \[(?P<quote>['"])(?P<quoted>.*?)(?P=quote)\]""",
    re.VERBOSE,
)


class JsonPathError(ValueError):
    """A path outside the supported dialect."""


class PathNotFound(LookupError):
    """The document has nothing at the path; ``at`` is the part that was found missing."""

    def __init__(self, path: str, at: str) -> None:
        super().__init__(f"{path}: nothing at {at}")
        self.path = path
        self.at = at


@lru_cache(maxsize=256)
def parse(path: str) -> tuple[Step, ...]:
    """The steps of ``path``; :class:`JsonPathError` names the first unreadable part."""
    text = path.strip()
    if not text.startswith("$"):
        raise JsonPathError(f"JSON path {path!r} must start with '$'")
    steps: list[Step] = []
    pos = 1
    while pos < len(text):
        match = _STEP.match(text, pos)
        if match is None:
            raise JsonPathError(
                f"JSON path {path!r}: cannot read {text[pos:]!r} (use .name, [index] or ['name'])"
            )
        if match["name"] is not None:
            steps.append(match["name"])
        elif match["index"] is not None:
            steps.append(int(match["index"]))
        else:
            steps.append(match["quoted"])
        pos = match.end()
    return tuple(steps)


def extract(doc: Any, path: str) -> Any:
    """The value at ``path`` in ``doc``; :class:`PathNotFound` when there is none."""
    value = doc
    walked = "$"
    for step in parse(path):
        if isinstance(step, int):
            walked += f"[{step}]"
            if not isinstance(value, list) or step >= len(value):
                raise PathNotFound(path, walked)
        else:
            walked += f".{step}"
            if not isinstance(value, dict) or step not in value:
                raise PathNotFound(path, walked)
        value = value[step]
    return value
