"""Control flow and state: waits, jumps, and the workflow's stored values."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from rflow.lang.model.common import (
    Duration,
    Model,
    Name,
    by_key,
    exactly_one,
    has_expression,
    invalid,
    word_or_map,
)
from rflow.lang.model.triggers import AuthNone, EventSpec, WebhookAuth

_COLOR = re.compile(r"^(#[0-9A-Fa-f]{3}|#[0-9A-Fa-f]{6}|[a-z]+)$")


def _color(value: str) -> str:
    if not _COLOR.match(value):
        raise invalid(f"a colour is a name such as green, or #rgb or #rrggbb, got {value!r}")
    return value


Color = Annotated[
    str, AfterValidator(_color), WithJsonSchema({"type": "string", "pattern": _COLOR.pattern})
]


class ChoiceOption(Model):
    """One option of a choice approval."""

    label: str
    """What the reviewer reads."""
    value: str
    """What the answer records (``steps.<id>.output.choice``)."""
    color: Color | None = None
    """A display hint for a reviewer's screen: a colour name (green) or #rrggbb."""


_REFERENCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]+\])*$")


def _reference(value: str) -> str:
    if not _REFERENCE.match(value):
        raise invalid(
            "a list of context_fields names values such as trigger.amount or "
            f"steps.quote.output.price (no ${{{{ }}}}), got {value!r}; "
            "use a mapping of label: value for anything else"
        )
    return value


ContextFields = Annotated[
    Annotated[dict[str, Any], Tag("map")]
    | Annotated[list[Annotated[str, AfterValidator(_reference)]], Tag("list")],
    Discriminator(lambda value: "list" if isinstance(value, list) else "map"),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "object", "description": "label: value (a literal or ${{ expression }})"},
                {
                    "type": "array",
                    "items": {"type": "string", "pattern": _REFERENCE.pattern},
                    "description": "references such as trigger.amount, each shown under its own text",
                },
            ]
        }
    ),
]


class Approval(Model):
    """Park until a person decides."""

    type: Literal["approve_reject", "choice", "multi_choice", "freeform"] = "approve_reject"
    """approve_reject, choice (one of several options; multi_choice is the same type under
    the seed's name) or freeform (a text answer)."""
    prompt: str
    """The question the reviewer answers, rendered when the run parks (expressions allowed)."""
    choices: list[
        Annotated[
            Annotated[str, Tag("word")] | Annotated[ChoiceOption, Tag("map")],
            Discriminator(word_or_map),
        ]
    ] = []
    """Options for type: choice (at least two): {label, value, color}, or a string that is
    both label and value. The answer must name one of the values."""
    context_fields: ContextFields = {}
    """What the reviewer sees beside the prompt, rendered when the run parks: a mapping
    of label to value (a literal or an expression), or a list of references such as
    trigger.amount."""
    approvers: list[Name] = []
    """Principals who may answer; empty means any principal of the project."""
    priority: Literal["low", "normal", "high", "urgent"] = "normal"
    """Orders the inbox (urgent first) and sets an escalation's severity."""

    @field_validator("type")
    @classmethod
    def _alias(cls, value: str) -> str:
        return "choice" if value == "multi_choice" else value

    @field_validator("context_fields")
    @classmethod
    def _fields(cls, value: dict[str, Any] | list[str]) -> dict[str, Any]:
        # The seed's list of fields: each reference is shown under its own text.
        if isinstance(value, list):
            return {entry: "${{ " + entry + " }}" for entry in value}
        return value

    @field_validator("choices")
    @classmethod
    def _options(cls, value: list[Any]) -> list[Any]:
        return [ChoiceOption(label=c, value=c) if isinstance(c, str) else c for c in value]

    @model_validator(mode="after")
    def _choices(self) -> Approval:
        values = [c.value for c in self.choices]
        if self.type == "choice" and len(set(values)) < 2:
            raise invalid("an approval of type choice needs at least two distinct choices")
        if len(set(values)) != len(values):
            raise invalid("two choices have the same value: an answer could not tell them apart")
        if self.type != "choice" and self.choices:
            raise invalid(f"choices apply to type: choice, not {self.type}")
        return self

    @property
    def values(self) -> list[str]:
        """The values an answer may choose."""
        return [c.value for c in self.choices]


class WaitWebhook(Model):
    """Park until a matching webhook request arrives at the wait's resume URL: its path
    followed by a token made for this wait alone (``<path>/<token>``, shown by `rflow
    runs show`, the console and `${{ wait.url }}`), which no trigger or run id gives."""

    path: str | None = None
    """URL path under /hooks/ on the workers' web server, before the wait's token (default
    /hooks/wait); may hold expressions, such as /hooks/approvals/${{ run.id }}."""
    match: dict[str, Any] = {}
    """JSON path -> value every accepted request must carry."""
    auth: WebhookAuth = AuthNone(type="none")
    """How the request authenticates: none (the URL's token alone), api_key or hmac, as
    for a webhook trigger; required (rflow validate refuses a wait without it, and warns
    about an explicit none)."""

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.startswith("/hooks/"):
            raise invalid(
                f"a wait's webhook path starts with /hooks/ (where workers listen), got {value!r}"
            )
        return value


class Goto(Model):
    """Jump to another step of the same list."""

    kind: ClassVar[str] = "goto"
    goto: Name
    """The id of the step to jump to, in the same list (steps or finally)."""


Expiry = Annotated[
    Annotated[Literal["fail", "continue", "approve", "reject"], Tag("word")]
    | Annotated[Goto, Tag("map")],
    Discriminator(word_or_map),
]
"""What a deadline with no answer does."""


class Escalation(Model):
    """At the deadline, notify a channel and wait once more."""

    channel: Name
    """A channel declared under `channels`."""
    extend: Duration
    """How much later the new deadline is than the first."""
    message: str | None = None
    """The notice (may hold expressions, rendered when the run parks); default: the
    workflow, run, step, prompt and new deadline."""
    severity: Literal["info", "warning", "critical"] | None = None
    """Default: critical for an urgent approval, else warning."""
    then: Expiry = "fail"
    """What the second deadline does: fail, continue, approve, reject (approve_reject
    approvals) or goto: <step>."""


class Escalate(Model):
    """``on_timeout: {escalate: {...}}``."""

    kind: ClassVar[str] = "escalate"
    escalate: Escalation
    """The channel to notify, how much longer to wait, and what the second deadline does."""


def _on_timeout_form(value: Any) -> str | None:
    return "word" if isinstance(value, str) else by_key("goto", "escalate")(value)


OnTimeout = Annotated[
    Annotated[Literal["fail", "continue", "approve", "reject"], Tag("word")]
    | Annotated[Goto, Tag("goto")]
    | Annotated[Escalate, Tag("escalate")],
    Discriminator(
        _on_timeout_form,
        custom_error_type="on_timeout",
        custom_error_message=(
            "on_timeout is fail, continue, approve, reject, {goto: <step>} or "
            "{escalate: {channel, extend, then}}"
        ),
    ),
]

OnReject = Annotated[
    Annotated[Literal["end", "fail", "continue"], Tag("word")] | Annotated[Goto, Tag("map")],
    Discriminator(word_or_map),
]


class WaitSignal(Model):
    """Park until an operator or a program sends the run a signal by name
    (``rflow runs signal RUN NAME``, ``POST /api/runs/{id}/signals/{name}``)."""

    name: Name
    """The signal's name; a signal of that name sent while no step waits for it is refused,
    unless the workflow declares ``signals: {<name>: {buffer: true}}``."""
    timeout: Duration | None = None
    """How long to wait (or give wait_for.timeout or the step's timeout: one of them)."""


class WaitFor(Model):
    """Park the run until a chain event, a webhook, a human decision or a signal."""

    event: EventSpec | None = None
    """Wait for a contract event (contract, name, network, filter)."""
    webhook: WaitWebhook | None = None
    """Wait for a request on a webhook path."""
    approval: Approval | None = None
    """Wait for a person's decision."""
    signal: WaitSignal | None = None
    """Wait for a signal sent to this run by name; its data is the step's output."""
    timeout: Duration | None = None
    """How long to wait (or give the step's timeout, not both); approvals default to
    config.approval_timeout."""
    on_timeout: OnTimeout = "fail"
    """fail, continue, approve, reject (approvals), goto: <step>, or escalate: {channel,
    extend, then} (approvals)."""
    on_reject: OnReject = "end"
    """What a rejection does (approvals): end (the run ends with status rejected; finally
    still runs), fail (the step fails, as a fault), continue, or goto: <step>."""

    @model_validator(mode="after")
    def _one(self) -> WaitFor:
        exactly_one(self, ("event", "webhook", "approval", "signal"), "wait_for")
        if self.signal is not None and self.signal.timeout is not None and self.timeout:
            raise invalid(
                "this wait has a timeout already (wait_for.timeout): give it once, here or "
                "in signal.timeout"
            )
        binary = self.approval is not None and self.approval.type == "approve_reject"
        if self.on_timeout in ("approve", "reject") and not binary:
            raise invalid(
                f"on_timeout: {self.on_timeout} applies to an approve_reject approval only"
            )
        if isinstance(self.on_timeout, Escalate):
            if self.approval is None:
                raise invalid("on_timeout: escalate applies to an approval only")
            then = self.on_timeout.escalate.then
            if then in ("approve", "reject") and not binary:
                raise invalid(f"escalate.then: {then} applies to an approve_reject approval only")
        # on_timeout without any timeout is refused by the step, which may carry one.
        # Its default written out (a stored definition spells every default) is no error.
        if "on_reject" in self.model_fields_set and self.on_reject != "end" and not self.approval:
            raise invalid("on_reject applies to an approval only")
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
    """equals, not_equals, greater_than, less_than, greater_equal, less_equal, contains,
    not_contains, starts_with, ends_with, is_empty or is_not_empty."""
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
    """The id of the step to jump to when the test holds."""


Otherwise = Annotated[
    Annotated[Literal["continue"], Tag("word")] | Annotated[Goto, Tag("map")],
    Discriminator(word_or_map),
]


class Choose(Model):
    """Jump to the first branch whose test holds, else follow the default."""

    branches: list[Branch] = Field(min_length=1)
    """Tested in order; the first that holds decides (at least one)."""
    default: Otherwise = "continue"
    """continue (the next step) or goto: <step>."""


class ListChange(Model):
    """Add a value to, or remove it from, a named list in the workflow's state."""

    list_: Name = Field(alias="list")
    """The name of the list in the workflow's state (read as ${{ state.<list> }})."""
    value: Any
    """The value (expressions allowed): list_add appends it, once per step key; list_remove
    removes every item equal to it."""


StateValues = Annotated[dict[Name, Any], Field(min_length=1)]
"""Keys of the workflow's state and the values to store."""


class CallWorkflow(Model):
    """Start a run of another workflow of the project (a child run) and, by default,
    wait for it."""

    workflow: Name
    """The workflow to run: one of the project's, with a manual trigger that declares the
    inputs it takes (and no strategy.matrix: one call, one child run)."""
    inputs: dict[Name, Any] = {}
    """The child run's inputs (expressions allowed), read there as ${{ inputs.<name> }}."""
    wait: bool = True
    """true: the step waits for the child run and its output is the child's outputs (a
    child that fails fails the step with the child's failure); false: the step succeeds
    once the child run is asked for, with output {run_id}."""


class SignalSpec(Model):
    """What happens to a signal of this name that no step waits for."""

    buffer: bool = False
    """Keep it (up to 100 per name, oldest first) for the run's next wait_for of that
    signal, instead of refusing it."""
