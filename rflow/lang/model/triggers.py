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

from rflow.lang.model.common import (
    Cron,
    Duration,
    EnvVar,
    Model,
    Name,
    TimeZone,
    by_key,
    invalid,
    invalid_at,
)

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


MIN_TOLERANCE = timedelta(seconds=1)
MAX_TOLERANCE = timedelta(hours=1)


class AuthHmac(Model):
    """A header carries an HMAC of the body, GitHub style: ``sha256=<hex digest>``; or,
    with ``timestamp_header``, an HMAC of a string holding the delivery's time and its
    body, as Stripe and Slack sign, so that a delivery cannot be replayed."""

    type: Literal["hmac"]
    """`hmac`."""
    algorithm: Literal["sha256", "sha1", "sha512"] = "sha256"
    """The HMAC's hash: sha256, sha1 or sha512."""
    header: str | None = None
    """Signature header; default X-Hub-Signature-256 (sha256), X-Hub-Signature (sha1),
    X-Hub-Signature-512 (sha512)."""
    secret_env: EnvVar
    """Environment variable holding the shared secret."""
    signature_prefix: str | None = None
    """What precedes the hex digest in the signature header; default ``<algorithm>=``
    (sha256=, GitHub's). Slack's is v0=, Stripe's v1=."""
    timestamp_header: str | None = None
    """The header carrying the delivery's Unix time in seconds (Slack:
    X-Slack-Request-Timestamp). It may be the signature header itself, holding
    ``t=<time>,v1=<digest>`` as Stripe-Signature does. With it, the signature covers the
    time and the body (``signed_string``), a delivery outside ``tolerance`` is refused,
    and so is a signature used before."""
    tolerance: Duration = timedelta(minutes=5)
    """How far a timestamped delivery's time may be from the receiver's clock, 1s to 1h."""
    signed_string: str = "{timestamp}.{body}"
    """What a timestamped signature signs: {timestamp} and {body} in this text, each once
    (Stripe: {timestamp}.{body}; Slack: v0:{timestamp}:{body})."""

    @property
    def signature_header(self) -> str:
        """The header that carries the signature."""
        return self.header or _HMAC_HEADERS[self.algorithm]

    @property
    def prefix(self) -> str:
        """What precedes the hex digest in a signature."""
        return self.signature_prefix if self.signature_prefix is not None else f"{self.algorithm}="

    @model_validator(mode="after")
    def _timestamped(self) -> AuthHmac:
        # Compared with the defaults rather than the fields given: a stored definition
        # (every default written out) must validate again.
        given = [
            name
            for name in ("tolerance", "signed_string")
            if getattr(self, name) != type(self).model_fields[name].default
        ]
        if given and self.timestamp_header is None:
            raise invalid(
                f"{' and '.join(given)} apply to a timestamped signature: set timestamp_header"
            )
        if not MIN_TOLERANCE <= self.tolerance <= MAX_TOLERANCE:
            raise invalid_at(self, ("tolerance",), "tolerance must be between 1s and 1h")
        for placeholder in ("{timestamp}", "{body}"):
            if self.signed_string.count(placeholder) != 1:
                raise invalid_at(
                    self,
                    ("signed_string",),
                    f"signed_string must hold {placeholder} once, got {self.signed_string!r}",
                )
        if self.signature_prefix is not None and (
            not self.signature_prefix or "," in self.signature_prefix
        ):
            raise invalid_at(
                self, ("signature_prefix",), "signature_prefix is text such as v0= (no comma)"
            )
        return self


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
    enabled: bool = True
    """false: the schedule fires nothing (the workflow's other triggers still do); when it
    is enabled again it fires from then on, never the times it skipped."""


class ManualSpec(Model):
    """Started by a person or the API (`rflow run`)."""

    inputs: list[Name] = []
    """Names of the inputs a manual run takes, read as ${{ inputs.<name> }}."""
    outside: bool = True
    """Whether a trigger record an outside producer writes to rflow.triggers (with no
    proof of rflow's ingress) may start it, with exactly these inputs; false: only
    `rflow run` and the API start it, and such a record is dead-lettered (not_accepted)."""


class TriggerBase(Model):
    """What every trigger has beside its kind."""

    kind: ClassVar[str] = ""
    id: Name | None = None
    """Names the trigger within its workflow (``rflow schedules disable W --trigger ID``);
    default: its kind for the first of a kind, then ``<kind>-2``, ``<kind>-3``... Each
    trigger fires under trigger keys of its own."""


class EventTrigger(TriggerBase):
    """Start a run for each matching, confirmed chain event."""

    kind: ClassVar[str] = "event"
    event: EventSpec
    """The contract, event name and network, with an optional filter."""


class WebhookTrigger(TriggerBase):
    """Start a run for each accepted webhook request."""

    kind: ClassVar[str] = "webhook"
    webhook: WebhookSpec
    """The path, authentication, idempotency header and event filter."""


class ScheduleTrigger(TriggerBase):
    """Start a run on a cron schedule."""

    kind: ClassVar[str] = "schedule"
    schedule: ScheduleSpec
    """The cron expression and its time zone."""


def _manual_shorthand(value: Any) -> Any:
    return {} if value is None or value is True else value


class ManualTrigger(TriggerBase):
    """Start runs by hand (``rflow run``, ``POST /api/workflows/{name}/runs``)."""

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
                        "properties": {
                            "inputs": {"type": "array", "items": {"type": "string"}},
                            "outside": {"type": "boolean"},
                        },
                        "additionalProperties": False,
                    },
                ],
                "description": "manual: {} (or empty), optionally with inputs: [name, ...] "
                "and outside: false",
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


def default_ids(triggers: list[Any]) -> list[str]:
    """Each trigger's id: its own, else its kind for the first of a kind and
    ``<kind>-<n>`` for the n-th."""
    seen: dict[str, int] = {}
    ids = []
    for trigger in triggers:
        seen[trigger.kind] = seen.get(trigger.kind, 0) + 1
        n = seen[trigger.kind]
        ids.append(trigger.id or (trigger.kind if n == 1 else f"{trigger.kind}-{n}"))
    return ids


def key_prefix(kind: str, trigger_id: str) -> str:
    """How the trigger keys of one trigger begin: its kind (``schedule``) for the trigger
    whose id is its kind, the keys one trigger per workflow always had, else
    ``<kind>@<id>`` (``schedule@nightly``), so that no two triggers share a key."""
    return kind if trigger_id == kind else f"{kind}@{trigger_id}"
