"""A workflow: when this happens (the trigger), do these things (the steps), in order."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag, model_validator

from rflow.lang.model.common import (
    Amount,
    DedupWindow,
    Duration,
    EnvVar,
    Model,
    Name,
    invalid,
    invalid_at,
    word_or_map,
)
from rflow.lang.model.flow import SignalSpec
from rflow.lang.model.steps import Step, walk
from rflow.lang.model.triggers import ManualTrigger, Trigger, default_ids


class Permissions(Model):
    """What the workflow's sends and HTTP calls may do."""

    relayers: list[Name] = []
    """The only relayers this workflow may send from."""
    max_value_per_tx: Amount | None = None
    """Cap on native value per send."""
    http_hosts: list[Annotated[str, Field(pattern=r"^(\*\.)?[A-Za-z0-9.-]+(:[0-9]+)?$")]] | None = (
        None
    )
    """The only hosts http_call may reach: exact names (api.example.com, 127.0.0.1:8080)
    or subdomains (*.example.com), checked on the rendered URL. Unset: any host."""


class Concurrency(Model):
    """Serialize runs that share a key."""

    group: str
    """Expression giving the serialization key, e.g. ${{ trigger.args.sender }}."""
    on_conflict: Literal["queue", "skip", "cancel_in_progress", "replace"] = "queue"
    """What a new run does when its group is busy."""


class RateLimit(Model):
    """At most `max` run starts per `per`; the excess waits, it is never dropped."""

    max: int = Field(ge=1)
    """Run starts allowed per window."""
    per: Duration
    """The window, e.g. 1h."""
    durable: bool = False
    """Keep the window in Postgres so a restart cannot reset it."""


class TripNotify(Model):
    """Alert a channel when the circuit trips."""

    channel: Name
    """A channel declared under `channels`; the alert's severity is critical."""
    message: str | None = None
    """The alert; default: the workflow and why the circuit tripped."""


class NotifyOnTrip(Model):
    """The `notify:` entry of on_trip."""

    notify: TripNotify
    """The channel to alert and the message."""


OnTrip = Annotated[
    Annotated[Literal["pause"], Tag("word")] | Annotated[NotifyOnTrip, Tag("map")],
    Discriminator(word_or_map),
]


class CircuitBreaker(Model):
    """Trip after `max_failures` terminally failed runs inside `window`."""

    max_failures: int = Field(ge=1)
    """Terminally failed runs inside `window` that trip the circuit (cancelled and
    rejected runs never count)."""
    window: Duration
    """How far back failures count; a full window without one half-opens a tripped circuit."""
    on_trip: list[OnTrip] = ["pause"]
    """pause and/or notify: {channel}."""


class Strategy(Model):
    """Expand each trigger fire into one run per combination."""

    matrix: dict[Name, Annotated[list[Any], Field(min_length=1)]] = Field(min_length=1)
    """Key -> values; steps read ${{ matrix.<key> }}."""
    fail_fast: bool = False
    """Stop the remaining combinations after the first failure."""
    max_parallel: int | None = Field(None, ge=1)
    """Combinations running at once (default: all)."""


def _one_of_trigger_or_triggers(schema: dict[str, Any]) -> None:
    required = [name for name in schema.get("required", []) if name != "trigger"]
    schema["required"] = required
    schema["anyOf"] = [{"required": ["trigger"]}, {"required": ["triggers"]}]
    schema["properties"]["trigger"].pop("default", None)


class Workflow(Model):
    """Its triggers and a strictly sequential list of steps."""

    model_config = ConfigDict(json_schema_extra=_one_of_trigger_or_triggers)

    description: str | None = None
    """What the workflow is for, for people; part of the definition (and its version)."""
    paused: bool = False
    """A paused workflow starts no runs."""
    paused_firings: Literal["hold", "skip"] = "hold"
    """What a firing of the workflow while it is paused (or halted) does: hold (kept, and
    started in arrival order when the workflow is resumed) or skip (recorded as a
    skipped run that ran nothing)."""
    env: list[EnvVar] = []
    """Environment variables a step may hand its effect as ${{ env.NAME }}: the input holds
    the placeholder ${NAME}, filled in when the effect runs (never stored)."""
    permissions: Permissions = Permissions()
    """What its sends and HTTP calls may do: relayers, max_value_per_tx, http_hosts."""
    concurrency: Concurrency | None = None
    """Runs of one group (an expression over the trigger) run one at a time, in order."""
    rate_limit: RateLimit | None = None
    """At most `max` run starts per `per`; the excess waits."""
    circuit_breaker: CircuitBreaker | None = None
    """Pause or alert after too many failed runs."""
    budgets: list[Name] = []
    """Budgets this workflow's sends charge."""
    strategy: Strategy | None = None
    """Fan each firing out into one run per matrix combination."""
    trigger: Trigger | None
    """What starts a run: one trigger (or give several under triggers)."""
    triggers: list[Trigger] | None = Field(None, min_length=1)
    """Several triggers, active at once (a webhook, a schedule and manual runs, say);
    each fires under trigger keys of its own and its runs record which kind fired them."""
    steps: list[Step] = Field(min_length=1)
    """What a run does, in order (at least one step)."""
    finally_: list[Step] = Field([], alias="finally")
    """Steps that run after the run settles, success or failure."""
    on_error: list[Step] = []
    """Steps that run when the run fails terminally (before finally), to report it:
    ${{ error }} is the failure. Observational: they are never retried, and their own
    failures are recorded without changing the run's."""
    outputs: dict[Name, Any] = {}
    """Values the run gives back when it succeeds (expressions allowed, rendered when its
    steps are done): a parent's call_workflow step reads them as its output."""
    signals: dict[Name, SignalSpec] = {}
    """Signals (by name) kept for a later wait_for when no step waits for them:
    {<name>: {buffer: true}}. A signal not declared here is refused unless a step of
    the run waits for it."""
    on_failure: Literal["dead_letter", "drop", "halt"] = "dead_letter"
    """dead_letter (to the DLQ), drop (log and forget) or halt (pause the workflow)."""
    retention: int | None = Field(None, ge=1, le=36_500)
    """Days of run history (runs, step logs) kept in the read model; default: forever."""
    dedup_window: DedupWindow | None = None
    """How long a worker remembers this workflow's firings and settled runs; default:
    config.dedup_window (7d). A trigger key repeated inside the window starts nothing;
    repeated after it, it is admitted again."""

    @model_validator(mode="before")
    @classmethod
    def _trigger_or_triggers(cls, data: Any) -> Any:
        # trigger is required unless triggers is given: a workflow with neither is told
        # "missing required field 'trigger'", beside whatever else is wrong with it.
        if isinstance(data, dict) and "triggers" in data and "trigger" not in data:
            return {**data, "trigger": None}
        return data

    @model_validator(mode="after")
    def _triggers(self) -> Workflow:
        if self.trigger is None and self.triggers is None:
            raise invalid(
                "a workflow needs a trigger: give trigger: (one) or triggers: (a list of them)"
            )
        if self.trigger is not None and self.triggers is not None:
            raise invalid_at(
                self, ("triggers",), "give trigger: or triggers:, not both (list them all here)"
            )
        triggers = self.all_triggers()
        ids = default_ids(triggers)
        for index, trigger_id in enumerate(ids):
            if trigger_id in ids[:index]:
                first = ids.index(trigger_id)
                raise invalid_at(
                    self,
                    ("triggers", index, "id") if triggers[index].id else ("triggers", index),
                    f"trigger id {trigger_id!r} is taken by triggers[{first}]: give this one "
                    "an id of its own",
                )
        manual = [i for i, t in enumerate(self.all_triggers()) if isinstance(t, ManualTrigger)]
        if len(manual) > 1:
            raise invalid_at(
                self,
                ("triggers", manual[1]),
                "a workflow has at most one manual trigger (declare every input on it)",
            )
        return self

    def all_steps(self) -> list[Any]:
        """Every step: the main steps, then the on_error and finally steps, each followed
        by the steps it holds (branches, try and catch, compensations)."""
        return walk([*self.steps, *self.on_error, *self.finally_])

    def all_triggers(self) -> list[Any]:
        """Every trigger: the one of ``trigger``, or those of ``triggers``."""
        return [self.trigger] if self.trigger is not None else list(self.triggers or ())

    def named_triggers(self) -> list[tuple[str, Any]]:
        """``(id, trigger)`` of every trigger, in order (see ``TriggerBase.id``)."""
        triggers = self.all_triggers()
        return list(zip(default_ids(triggers), triggers, strict=True))

    def triggers_of(self, kind: str) -> list[tuple[str, Any]]:
        """``(id, trigger)`` of the triggers of ``kind`` (event, webhook, schedule, manual)."""
        return [(tid, t) for tid, t in self.named_triggers() if t.kind == kind]

    @property
    def manual(self) -> ManualTrigger | None:
        """The manual trigger, if the workflow has one."""
        found = self.triggers_of("manual")
        return found[0][1] if found else None

    @property
    def trigger_kinds(self) -> list[str]:
        """The kinds of its triggers, each once, in order."""
        return list(dict.fromkeys(t.kind for t in self.all_triggers()))
