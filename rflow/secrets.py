"""Filling in ``${VAR}`` when an effect is carried out, and keeping the values out of
what comes back.

A step's input holds placeholders (``${API_TOKEN}``, ``${{ env.NAME }}`` rendered as
``${NAME}``) and run data escaped as ``$${``. Right before an executor hands the input to
the world, :meth:`Secrets.resolve` fills the placeholders in from the worker's
environment; before the effect's output or error becomes a step result (or a log line),
:meth:`Secrets.scrub` writes every value filled in, and every other value the effect was
given (a channel's URL, a command's environment), back as its placeholder. So an
endpoint that echoes a header, or an exception that quotes a URL, cannot carry a value
into the journal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any
from urllib.parse import quote

from rflow.codecs import json
from rflow.failures import FailureKind, RflowError, StepError
from rflow.lang.envsubst import EnvSubstitutionError, names, placeholder, substitute

MIN_SCRUBBED = 4
"""Values shorter than this are not scrubbed: they would match all over ordinary output
(keep such variables for settings, not secrets)."""


_FOUND_IN: dict[tuple[int, tuple[str, ...]], tuple[Mapping[str, str], tuple[str, ...]]] = {}
"""(id of an environment, texts) -> (that environment, the variables whose values the
texts contain): a worker's environment is read once, when it starts, and a channel's
texts do not change, so each notify need not search every variable again."""
_FOUND_KEPT = 1024


class Secrets:
    """The values handed to one effect, each with the placeholder it is shown as."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.used: dict[str, str] = {}
        """Variable name -> value, for every variable filled in or hidden."""

    # --- filling in -----------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        """``value`` (an effect's input) with every ``${VAR}`` filled in and every ``$${``
        read as ``${``, in all its strings, mapping keys included.

        Raises ``invalid_input`` naming a variable this worker does not have."""
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, Mapping):
            return {self.resolve(key): self.resolve(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.resolve(item) for item in value]
        return value

    def _text(self, text: str) -> str:
        if "$" not in text:
            return text
        try:
            resolved, used = substitute(text, self.env)
        except EnvSubstitutionError as exc:
            raise RflowError(FailureKind.INVALID_INPUT, f"on this worker: {exc}") from None
        self.hide(*used)
        return resolved

    def hide(self, *variables: str) -> Secrets:
        """Scrub the values of ``variables`` too (those this worker has)."""
        for name in variables:
            value = self.env.get(name)
            if value and name not in self.used:
                self.used[name] = value
                self.__dict__.pop("_pattern", None)
        return self

    def hide_found_in(self, *texts: str) -> Secrets:
        """Scrub the value of every variable that one of ``texts`` contains: what a
        declaration substituted when the file loaded (a channel's URL), which the
        declaration no longer names."""
        key = (id(self.env), texts)
        found = _FOUND_IN.get(key)
        if found is None or found[0] is not self.env:
            names = tuple(
                name
                for name, value in self.env.items()
                if len(value) >= MIN_SCRUBBED and any(value in text for text in texts)
            )
            if len(_FOUND_IN) >= _FOUND_KEPT:
                _FOUND_IN.clear()
            found = _FOUND_IN[key] = (self.env, names)
        return self.hide(*found[1])

    # --- scrubbing ------------------------------------------------------------------

    @cached_property
    def _pattern(self) -> tuple[re.Pattern[str], dict[str, str]] | None:
        forms: dict[str, str] = {}
        for name, value in sorted(self.used.items()):
            if len(value) < MIN_SCRUBBED:
                continue
            # As written, and as JSON or a URL would quote it; in any case, as an address
            # comes back checksummed however it was written.
            for form in (value, json.dumps(value).decode()[1:-1], quote(value, safe="")):
                forms.setdefault(form.lower(), placeholder(name))
        if not forms:
            return None
        alternatives = sorted(forms, key=len, reverse=True)  # a longer value first
        return re.compile("|".join(map(re.escape, alternatives)), re.IGNORECASE), forms

    def scrub(self, value: Any) -> Any:
        """``value`` (an output, a message) with every hidden value written as its
        placeholder, in all its strings, mapping keys included."""
        found = self._pattern
        if found is None:
            return value
        return _scrub(value, *found)

    def scrub_error(self, error: StepError | None) -> StepError | None:
        """``error`` with its message scrubbed."""
        if error is None:
            return None
        message = self.scrub(error.message)
        return error if message == error.message else error.model_copy(update={"message": message})


def _scrub(value: Any, pattern: re.Pattern[str], forms: dict[str, str]) -> Any:
    if isinstance(value, str):
        return pattern.sub(lambda m: forms[m.group(0).lower()], value)
    if isinstance(value, Mapping):
        return {
            _scrub(key, pattern, forms): _scrub(item, pattern, forms) for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_scrub(item, pattern, forms) for item in value]
    return value


def placeholders(value: Any) -> tuple[str, ...]:
    """The variables an effect's input names, in all its strings (no environment needed)."""
    found: dict[str, None] = {}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.update(dict.fromkeys(names(item)))
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return tuple(sorted(found))
