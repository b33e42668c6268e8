"""Control flow and state: waits, jumps, and the workflow's stored values."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Discriminator, Field, Tag, field_validator, model_validator

from rflow.lang.model.common import (
    Duration,
    Model,
    Name,
    exactly_one,
    has_expression,
    invalid,
    word_or_map,
)
from rflow.lang.model.triggers import AuthNone, EventSpec, WebhookAuth


class Approval(Model):
    """Park until a person decides."""

    type: Literal["approve_reject", "choice", "freeform"] = "approve_reject"
    prompt: str
    choices: list[str] = []
    """Options for type: choice (at least two)."""
    approvers: list[str] = []
    """Who may answer; empty means anyone allowed to approve in this project."""
    priority: Literal["low", "normal", "high", "urgent"] = "normal"

    @model_validator(mode="after")
    def _choices(self) -> Approval:
        if self.type == "choice" and len(set(self.choices)) < 2:
            raise invalid("an approval of type choice needs at least two distinct choices")
        if self.type != "choice" and self.choices:
            raise invalid(f"choices apply to type: choice, not {self.type}")
        return self


class WaitWebhook(Model):
    """Park until a matching webhook request arrives."""

    path: str
    """URL path under /hooks/ on the workers' web server; may hold expressions, such as
    /hooks/approvals/${{ run.id }}."""
    match: dict[str, Any] = {}
    """JSON path -> value every accepted request must carry."""
    auth: WebhookAuth = AuthNone(type="none")

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/hooks/"):
            raise invalid(
                f"a wait's webhook path starts with /hooks/ (where workers listen), got {value!r}"
            )
        return value


class Goto(Model):
    """Jump to another step of the same list."""

    goto: Name


OnTimeout = Annotated[
    Annotated[Literal["fail", "continue", "approve", "reject"], Tag("word")]
    | Annotated[Goto, Tag("map")],
    Discriminator(word_or_map),
]


class WaitFor(Model):
    """Park the run until a chain event, a webhook or a human decision."""

    event: EventSpec | None = None
    webhook: WaitWebhook | None = None
    approval: Approval | None = None
    timeout: Duration | None = None
    """How long to wait (or give the step's timeout, not both); approvals default to
    config.approval_timeout."""
    on_timeout: OnTimeout = "fail"
    """fail, continue, approve, reject (approvals) or goto: <step>."""

    @model_validator(mode="after")
    def _one(self) -> WaitFor:
        exactly_one(self, ("event", "webhook", "approval"), "wait_for")
        if self.on_timeout in ("approve", "reject") and (
            self.approval is None or self.approval.type != "approve_reject"
        ):
            raise invalid(
                f"on_timeout: {self.on_timeout} applies to an approve_reject approval only"
            )
        # on_timeout without any timeout is refused by the step, which may carry one.
        return self


# --- control flow and state --------------------------------------------------------

OPERATORS = (
    "equals", "not_equals", "greater_than", "less_than", "greater_equal", "less_equal",
    "contains", "not_contains", "starts_with", "ends_with", "is_empty", "is_not_empty",
)  # fmt: skip
UNARY_OPERATORS = ("is_empty", "is_not_empty")


class Comparison(Model):
    """``value`` compared with ``to`` by ``op``."""

    value: Any
    """The left side, usually an expression."""
    op: Literal[OPERATORS]  # type: ignore[valid-type]
    to: Any = None
    """The right side; not used by is_empty and is_not_empty."""

    @model_validator(mode="after")
    def _operand(self) -> Comparison:
        if self.op in UNARY_OPERATORS and "to" in self.model_fields_set:
            raise invalid(f"{self.op} takes no 'to'")
        if self.op not in UNARY_OPERATORS and "to" not in self.model_fields_set:
            raise invalid(f"{self.op} needs 'to', the value to compare with")
        return self


def _test_expr(value: str) -> str:
    if not has_expression(value):
        raise invalid(
            f"expected an expression such as ${{{{ steps.gate.output > 0 }}}} "
            f"or a comparison {{value, op, to}}, got {value!r}"
        )
    return value


Test = Annotated[
    Annotated[str, AfterValidator(_test_expr), Tag("word")] | Annotated[Comparison, Tag("map")],
    Discriminator(word_or_map),
]


class Branch(Model):
    """When the test holds, jump to a step."""

    when: Test
    """An expression, or {value, op, to}."""
    goto: Name


Otherwise = Annotated[
    Annotated[Literal["continue"], Tag("word")] | Annotated[Goto, Tag("map")],
    Discriminator(word_or_map),
]


class Choose(Model):
    """Jump to the first branch whose test holds, else follow the default."""

    branches: list[Branch] = Field(min_length=1)
    default: Otherwise = "continue"
    """continue (the next step) or goto: <step>."""


class ListChange(Model):
    """Add a value to, or remove it from, a named list in the workflow's state."""

    list_: Name = Field(alias="list")
    value: Any


StateValues = Annotated[dict[Name, Any], Field(min_length=1)]
"""Keys of the workflow's state and the values to store."""
