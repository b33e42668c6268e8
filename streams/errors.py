"""The refusal every operator action raises, in a module of its own: the gate and the CLI's
authorization import it without the operator actions (and their Kafka client)."""

from __future__ import annotations

from typing import Any


class ControlError(Exception):
    """The action does not apply (no such run, no open wait, already answered...).

    ``status`` is the HTTP status the API answers with; ``details`` go into its answer.
    """

    def __init__(self, message: str, status: int = 409, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.details = details
