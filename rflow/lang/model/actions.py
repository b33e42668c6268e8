"""Off-chain actions: built-in commands, HTTP calls, notifications and delays."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from rflow.lang.model.common import (
    NAME_PATTERN,
    Condition,
    Duration,
    Model,
    Name,
    TimeZone,
    exactly_one,
    has_expression,
    invalid,
    known_when_run,
)
from rflow.lang.timespec import parse_instant
from rflow.lang.units import UnitError


class LogArgs(Model):
    """Arguments of the log command."""

    message: str
    """The line to write (expressions allowed); it is the step's output."""
    level: Literal["debug", "info", "warning", "error"] = "info"
    """debug, info, warning or error."""


class LogCommand(Model):
    """Write a line to the run's step log."""

    name: Literal["log"]
    """`log`."""
    args: LogArgs
    """The message and its level."""


class AssertArgs(Model):
    """Arguments of the assert command."""

    that: Condition
    """The condition that must hold."""
    message: str = "assertion failed"
    """The step's error message when the condition does not hold."""


class AssertCommand(Model):
    """Fail the step with kind assert_failed unless a condition holds."""

    name: Literal["assert"]
    """`assert`."""
    args: AssertArgs
    """The condition and the message."""


class FailArgs(Model):
    """Arguments of the fail command."""

    message: str
    """The step's error message (expressions allowed)."""


class FailCommand(Model):
    """Fail the step with kind assert_failed and a message."""

    name: Literal["fail"]
    """`fail`."""
    args: FailArgs
    """The message."""


class RunCommand(Model):
    """Run an executable declared under `commands`, with no shell: ``args`` goes to its
    stdin as JSON, and its stdout, read as JSON, is the step's output."""

    name: Annotated[
        Name,
        WithJsonSchema(
            {
                "type": "string",
                "pattern": NAME_PATTERN,
                "not": {"enum": ["log", "assert", "fail"]},
                "description": "a command declared under `commands`",
            }
        ),
    ]
    """A command declared under `commands`."""
    args: Any = None
    """The JSON value written to the command's stdin (expressions allowed)."""


COMMANDS = ("log", "assert", "fail")
"""The built-in commands; any other name runs a declared executable."""


def _command_kind(value: Any) -> str:
    name = value.get("name") if isinstance(value, dict) else getattr(value, "name", None)
    return name if name in COMMANDS else "run"


Command = Annotated[
    Annotated[LogCommand, Tag("log")]
    | Annotated[AssertCommand, Tag("assert")]
    | Annotated[FailCommand, Tag("fail")]
    | Annotated[RunCommand, Tag("run")],
    Discriminator(_command_kind),
]
"""A built-in command, or a declared executable (there is no shell)."""


def _status_list(value: Any) -> Any:
    return [value] if isinstance(value, int) and not isinstance(value, bool) else value


StatusList = Annotated[
    list[Annotated[int, Field(ge=100, le=599)]],
    BeforeValidator(_status_list),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 100, "maximum": 599},
                {"type": "array", "items": {"type": "integer", "minimum": 100, "maximum": 599}},
            ]
        }
    ),
]
"""HTTP statuses: one, or a list."""


class HttpCall(Model):
    """An HTTP request; it carries an Idempotency-Key header derived from the run."""

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = "GET"
    """Default GET, or POST when a body is given."""
    url: str
    """http:// or https:// URL (expressions allowed); checked against
    permissions.http_hosts as rendered. Redirects are not followed."""
    headers: dict[str, str] = {}
    """Request headers (expressions and ${{ env.NAME }} allowed); an Idempotency-Key
    header derived from the step is added unless given."""
    body: Any = None
    """JSON body; strings inside may hold expressions."""
    timeout: Duration | None = None
    """How long the request may take; default 30 seconds. The step's `timeout` bounds the
    whole attempt."""
    expect_status: StatusList = []
    """Statuses that count as success; default any 2xx."""
    retryable_status_codes: StatusList | None = None
    """Failed answers the step's retry policy may retry; default 408, 429, 500, 502, 503,
    504. Any other failed status fails the step at once, whatever its retry policy."""

    @model_validator(mode="before")
    @classmethod
    def _default_method(cls, data: Any) -> Any:
        if isinstance(data, dict):
            method = data.get("method")
            if method is None:
                return {**data, "method": "POST" if data.get("body") is not None else "GET"}
            if isinstance(method, str) and method != method.upper():
                return {**data, "method": method.upper()}
        return data

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not known_when_run(value) and not value.startswith(("http://", "https://")):
            raise invalid(f"url must start with http:// or https://, got {value!r}")
        return value

    @model_validator(mode="after")
    def _checks(self) -> HttpCall:
        if self.body is not None and self.method in ("GET", "HEAD"):
            raise invalid(f"a {self.method} request has no body: set method: POST")
        codes = self.retryable_status_codes or []
        success = [c for c in codes if c in self.expect_status] or (
            [] if self.expect_status else [c for c in codes if 200 <= c <= 299]
        )
        if success:
            listed = ", ".join(map(str, success))
            raise invalid(
                f"retryable_status_codes lists {listed}, which "
                f"{'expect_status counts' if self.expect_status else 'counts'} as success: "
                "an answer cannot be both"
            )
        return self


class Notify(Model):
    """Send a message to a channel."""

    channel: Name
    """A channel declared under `channels`."""
    message: str
    """The text (expressions allowed)."""
    severity: Literal["info", "warning", "critical"] = "info"
    """info, warning or critical: in a webhook channel's JSON, and PagerDuty's severity
    (Slack and log channels get the message alone)."""


def _delay_for(schema: dict[str, Any]) -> None:
    schema["properties"]["for"] = {
        **schema["properties"]["duration"],
        "description": "The same as duration: delay: {for: 1h}.",
    }


class Delay(Model):
    """Sleep durably for a duration or until an instant."""

    model_config = ConfigDict(json_schema_extra=_delay_for)

    duration: Duration | None = None
    """How long to sleep, e.g. 10m (give this or until; `for` is the same field:
    delay: {for: 1h})."""
    until: str | None = None
    """An ISO 8601 date-time (read in `timezone` when it has no offset) or an expression."""
    timezone: TimeZone = "UTC"

    @model_validator(mode="before")
    @classmethod
    def _for(cls, data: Any) -> Any:
        # delay: {for: 1h} reads as {duration: 1h}.
        if isinstance(data, dict) and "for" in data:
            if "duration" in data:
                raise invalid("give duration or for (the same field), not both")
            data = {("duration" if key == "for" else key): value for key, value in data.items()}
        return data

    @model_validator(mode="after")
    def _one(self) -> Delay:
        exactly_one(self, ("duration", "until"), "delay")
        if self.until is not None and not has_expression(self.until):
            try:
                parse_instant(self.until)
            except UnitError as exc:
                raise invalid(str(exc)) from None
        return self
