"""Resource limits that keep untrusted expressions cheap to parse and evaluate."""

from __future__ import annotations

from rflow.expr.errors import limit_error

MAX_SOURCE_LENGTH = 4096
"""Characters in one expression (the inside of ``${{ }}``)."""

MAX_TEMPLATE_LENGTH = 65_536
"""Characters in one template string."""

MAX_NESTING = 64
"""Brackets, calls and prefix operators nested inside each other."""

MAX_TREE_DEPTH = 128
"""Depth of the syntax tree; long operator or member chains deepen it without nesting."""

MAX_STEPS = 100_000
"""Evaluation budget per evaluation: node visits plus the size of values built or scanned."""

MAX_STRING_LENGTH = 1 << 20
MAX_LIST_LENGTH = 100_000
MAX_INT = 1 << 1024
"""Largest integer magnitude an expression may produce or print."""

MAX_RANGE = 10_000
MAX_JSON_LENGTH = 1 << 20
MAX_JSON_DEPTH = 64
MAX_DECIMAL_EXPONENT = 1000
"""Decimals beyond 10**±1000 would print as unbounded runs of zeros."""

DECIMAL_PRECISION = 100
"""Significant digits of inexact decimal results: room for a uint256 plus 18 decimals."""

ITEMS_PER_STEP = 4
"""Elements handled one by one in Python (compared pairs, summed numbers, encoded JSON
values) per step: the budget then bounds an evaluation to well under a second."""

CHARS_PER_STEP = 256
"""Characters or items copied or searched in bulk (concatenation, substring search,
``split``) per step."""


class Budget:
    """The steps an evaluation may still spend; shared by everything one evaluation does."""

    __slots__ = ("_chars", "_items", "remaining")

    def __init__(self, steps: int = MAX_STEPS) -> None:
        self.remaining = steps
        self._items = 0
        self._chars = 0

    def charge(self, steps: int = 1) -> None:
        """Spend ``steps``; a limit error once the budget is exhausted."""
        self.remaining -= steps
        if self.remaining < 0:
            raise limit_error(f"expression exceeded its evaluation budget of {MAX_STEPS} steps")

    def charge_items(self, count: int) -> None:
        """Spend steps for ``count`` elements handled one by one; fractions of a step
        carry over, so that many small scans add up."""
        self._items += count
        if self._items >= ITEMS_PER_STEP:
            steps, self._items = divmod(self._items, ITEMS_PER_STEP)
            self.charge(steps)

    def charge_bulk(self, count: int) -> None:
        """Spend steps for ``count`` characters or items copied or searched in bulk."""
        self._chars += count
        if self._chars >= CHARS_PER_STEP:
            steps, self._chars = divmod(self._chars, CHARS_PER_STEP)
            self.charge(steps)


def check_int(value: int) -> int:
    """``value`` if its magnitude is within :data:`MAX_INT`."""
    if value.bit_length() > 1025 or abs(value) > MAX_INT:
        raise limit_error("integer exceeds the limit of 2**1024 in magnitude")
    return value


def check_string(value: str) -> str:
    """``value`` if it is no longer than :data:`MAX_STRING_LENGTH`."""
    if len(value) > MAX_STRING_LENGTH:
        raise limit_error(f"string exceeds the limit of {MAX_STRING_LENGTH} characters")
    return value


def check_string_length(length: int) -> None:
    """Refuse to build a string of ``length`` characters before building it."""
    if length > MAX_STRING_LENGTH:
        raise limit_error(f"string exceeds the limit of {MAX_STRING_LENGTH} characters")


def check_list_length(length: int) -> None:
    """Refuse to build a list of ``length`` items before building it."""
    if length > MAX_LIST_LENGTH:
        raise limit_error(f"list exceeds the limit of {MAX_LIST_LENGTH} items")
