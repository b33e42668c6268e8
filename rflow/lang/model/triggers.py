"""What starts a run: a chain event, a webhook, a schedule or a person."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from rflow.lang.model.common import Cron, Duration, EnvVar, Model, Name, TimeZone, by_key, invalid

_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
_WEBHOOK_PATH = re.compile(r"^/[A-Za-z0-9._~/-]*$")


class EventSpec(Model):
    """A contract event on a chain, optionally filtered by its arguments."""

    contract: Name
    """A contract declared under `contracts` (its ABI decodes the event)."""
    name: str
    """The event name, e.g. Swap or Transfer."""
    network: Name
    """A network declared under `networks`."""
    filter: dict[str, Any] = {}
    """Argument name -> required value (matches when every listed argument is equal)."""
    confirmations: int | None = Field(None, ge=0, le=1000)
    """Blocks to wait before the event counts; default: the network's confirmations."""

    @field_validator("name")
    @classmethod
    def _event_name(cls, value: str) -> str:
        if not _IDENTIFIER.match(value):
            raise invalid(f"{value!r} is not an event name (give the name only, e.g. Transfer)")
        return value


class AuthNone(Model):
    """No authentication: anyone who knows the URL can trigger the workflow."""

    type: Literal["none"]
    """`none`."""


class AuthApiKey(Model):
    """A header must carry a shared key."""

    type: Literal["api_key"]
    """`api_key`."""
    header: str = "X-API-Key"
    """The header that carries the key."""
    secret_env: EnvVar
    """Environment variable holding the expected key."""


_HMAC_HEADERS = {
    "sha256": "X-Hub-Signature-256",
    "sha1": "X-Hub-Signature",
    "sha512": "X-Hub-Signature-512",
}


class AuthHmac(Model):
    """A header carries an HMAC of the body, GitHub style: ``sha256=<hex digest>``."""

    type: Literal["hmac"]
    """`hmac`."""
    algorithm: Literal["sha256", "sha1", "sha512"] = "sha256"
    """The HMAC's hash: sha256, sha1 or sha512."""
    header: str | None = None
    """Signature header; default X-Hub-Signature-256 (sha256), X-Hub-Signature (sha1),
    X-Hub-Signature-512 (sha512)."""
    secret_env: EnvVar
    """Environment variable holding the shared secret."""

    @property
    def signature_header(self) -> str:
        """The header that carries the signature."""
        return self.header or _HMAC_HEADERS[self.algorithm]


WebhookAuth = Annotated[AuthNone | AuthApiKey | AuthHmac, Discriminator("type")]


class WebhookSpec(Model):
    """An HTTP endpoint that starts a run per accepted request."""

    path: str
    """URL path under the webhook ingress, e.g. /hooks/payouts."""
    auth: WebhookAuth = AuthNone(type="none")
    """none, api_key or hmac."""
    idempotency_header: str | None = None
    """Request header carrying an idempotency key; repeats within the TTL are ignored."""
    idempotency_ttl: Duration = timedelta(hours=24)
    """How long an idempotency key is remembered."""
    event_type_field: str | None = None
    """JSON path of the event type in the body, e.g. $.type."""
    accepted_event_types: list[str] = []
    """Event types that start a run; others are acknowledged and ignored."""

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not _WEBHOOK_PATH.match(value):
            raise invalid(
                f"a webhook path starts with '/' and uses URL-safe characters, got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _event_filter(self) -> WebhookSpec:
        if self.accepted_event_types and not self.event_type_field:
            raise invalid("accepted_event_types needs event_type_field (e.g. $.type)")
        return self


class ScheduleSpec(Model):
    """A cron schedule in a time zone."""

    cron: Cron
    """Five-field cron (minute hour day-of-month month day-of-week) or @hourly, @daily, ..."""
    timezone: TimeZone = "UTC"
    """The IANA time zone the cron expression is read in, e.g. Europe/Paris."""


class ManualSpec(Model):
    """Started by a person or the API (`rflow run`)."""

    inputs: list[Name] = []
    """Names of the inputs a manual run takes, read as ${{ inputs.<name> }}."""


class EventTrigger(Model):
    """Start a run for each matching, confirmed chain event."""

    kind: ClassVar[str] = "event"
    event: EventSpec
    """The contract, event name and network, with an optional filter."""


class WebhookTrigger(Model):
    """Start a run for each accepted webhook request."""

    kind: ClassVar[str] = "webhook"
    webhook: WebhookSpec
    """The path, authentication, idempotency header and event filter."""


class ScheduleTrigger(Model):
    """Start a run on a cron schedule."""

    kind: ClassVar[str] = "schedule"
    schedule: ScheduleSpec
    """The cron expression and its time zone."""


def _manual_shorthand(value: Any) -> Any:
    return {} if value is None or value is True else value


class ManualTrigger(Model):
    """Start runs by hand only."""

    kind: ClassVar[str] = "manual"
    manual: Annotated[
        ManualSpec,
        BeforeValidator(_manual_shorthand),
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "null"},
                    {"const": True},
                    {
                        "type": "object",
                        "properties": {"inputs": {"type": "array", "items": {"type": "string"}}},
                        "additionalProperties": False,
                    },
                ],
                "description": "manual: {} (or empty), optionally with inputs: [name, ...]",
            }
        ),
    ] = ManualSpec()
    """Optionally the names of the inputs a run takes."""


TRIGGER_KINDS = ("event", "webhook", "schedule", "manual")

Trigger = Annotated[
    Annotated[EventTrigger, Tag("event")]
    | Annotated[WebhookTrigger, Tag("webhook")]
    | Annotated[ScheduleTrigger, Tag("schedule")]
    | Annotated[ManualTrigger, Tag("manual")],
    Discriminator(
        by_key(*TRIGGER_KINDS),
        custom_error_type="trigger_kind",
        custom_error_message="a trigger needs exactly one of event, webhook, schedule or manual",
    ),
]
"""Exactly one of event, webhook, schedule or manual."""
