"""Run state: what the engine knows about one run, journaled in a Faust table."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rflow.engine.statuses import RunStatus, StepStatus
from rflow.failures import StepError


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def dropped() -> Any:
    """A field that records written by earlier versions may hold: read and ignored, never
    written (not dumped, not shown)."""
    return Field(None, exclude=True, repr=False)


class Fanout(Frozen):
    """The progress of a foreach step over its (fixed) items."""

    items: list[Any]
    launched: int = 0
    in_flight: int = 0
    halted: bool = False
    failed: list[int] = Field(default_factory=list)


class Escalated(Frozen):
    """An approval past its first deadline: when it was escalated, and its notice."""

    at: datetime
    channel: str
    delivered: bool = False
    error: StepError | None = None
    """Why the notice could not be delivered (the extended deadline holds all the same)."""


class StepRecord(Frozen):
    """The journal entry of one step or iteration (``path`` is ``id`` or ``id[i]``)."""

    path: str
    step: str
    phase: Literal["main", "finally"]
    status: StepStatus
    visit: int = 1
    attempt: int = 1
    input: Any = None
    output: Any = None
    error: StepError | None = None
    started_at: datetime
    settled_at: datetime | None = None
    fanout: Fanout | None = None
    wait_id: str | None = None
    due_at: datetime | None = None
    """When this record's pending timer (retry, delay or wait timeout) comes due; for a
    send in flight, the deadline of its step's timeout."""
    escalation: Escalated | None = None
    """Set when an approval's ``on_timeout: escalate`` extended its deadline."""


class RunState(Frozen):
    """One run: its identity, where it is, and the journal of every step so far."""

    run_id: str
    workflow: str
    version: str
    trigger_key: str
    matrix: dict[str, Any] | None = None
    group: str | None = None
    source: str | None = None
    """Where the firing came from: event, webhook, schedule or manual."""
    trigger: dict[str, Any] = Field(default_factory=dict)
    env: Any = dropped()
    """Environment values, which runs started by earlier versions carried: dropped."""
    state: dict[str, Any] = Field(default_factory=dict)
    status: RunStatus = RunStatus.RUNNING
    phase: Literal["main", "finally", "done"] = "main"
    cursor: int = 0
    steps: dict[str, StepRecord] = Field(default_factory=dict)
    history: list[StepRecord] = Field(default_factory=list)
    visits: dict[str, int] = Field(default_factory=dict)
    executions: int = 0
    journaled: int = 0
    """Journal entries emitted so far; each entry carries its number as ``seq``."""
    cancel_requested: str | None = None
    error: StepError | None = None
    retry_of: str | None = None
    """The failed run this one continues (``rflow runs retry``)."""
    created_at: datetime
    updated_at: datetime

    @property
    def settled(self) -> bool:
        return self.phase == "done"
