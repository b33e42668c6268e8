"""Run state: what the engine knows about one run, journaled in a Faust table."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from rflow.engine.fork import Fork
from rflow.engine.frozen import Frozen
from rflow.engine.saga import Saga
from rflow.engine.statuses import RunStatus, StepStatus
from rflow.failures import StepError


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
    phase: Literal["main", "on_error", "finally"]
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
    fork: Fork | None = None
    """A parallel or race step's branches (:mod:`rflow.engine.fork`)."""
    saga: Saga | None = None
    """A try step's progress and compensations (:mod:`rflow.engine.saga`)."""
    cancelled: str | None = None
    """Why the step was asked to stop (a race it lost, a parallel whose branch failed):
    a running action finishes and settles ``cancelled`` unless it went through."""


class ParentLink(Frozen):
    """The step of another run that started this one (``call_workflow``)."""

    run_id: str
    workflow: str
    path: str
    visit: int = 1
    attempt: int = 1
    wait_id: str | None = None
    """The parent's wait, answered when this run settles (``None``: the parent does not
    wait for it)."""


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
    phase: Literal["main", "on_error", "finally", "done"] = "main"
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
    parent: ParentLink | None = None
    """The run and step that started this one as a child run."""
    outputs: dict[str, Any] | None = None
    """What the run gives back (its workflow's ``outputs``), rendered when its steps
    succeeded."""
    signals: dict[str, list[Any]] = Field(default_factory=dict)
    """Signals no step waited for, kept for a later wait (``signals: {name: {buffer:
    true}}``), oldest first."""
    signals_seen: list[str] = Field(default_factory=list)
    """The ids of the latest signals taken, so a redelivered one is taken once."""
    created_at: datetime
    updated_at: datetime

    @property
    def settled(self) -> bool:
        return self.phase == "done"
