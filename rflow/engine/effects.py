"""What the engine asks the world to do. Agents carry effects out; the engine never does."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from rflow.engine.state import Frozen, RunStatus
from rflow.failures import StepError


class Execute(Frozen):
    """Run one action (an HTTP call, a read, a send, a state change...) and report back.

    ``key`` is the idempotency key the action must be deduplicated by where it lands.
    ``deadline`` (sends only): when the step's timeout, counted from this attempt's start,
    runs out; the relayer cancels a send still unmined then.
    """

    type: Literal["execute"] = "execute"
    run_id: str
    workflow: str
    path: str
    visit: int
    attempt: int
    key: str
    kind: str
    action: Any
    wait_id: str | None = None
    """The webhook wait whose resume URL the action names (``${{ wait.url }}``)."""
    wait_path: str | None = None
    """That wait's path (``None``: the default)."""
    timeout: float | None = None
    deadline: datetime | None = None


class ScheduleTimer(Frozen):
    """Fire :class:`~rflow.engine.events.TimerFired` at ``due_at`` (a durable timer row)."""

    type: Literal["timer"] = "timer"
    run_id: str
    path: str
    visit: int
    attempt: int
    purpose: Literal["retry", "delay", "wait_timeout"]
    due_at: datetime
    key: str


class Park(Frozen):
    """Register a wait (a unique row) that resumes the run exactly once; registering it
    again after an escalation moves its deadline later."""

    type: Literal["park"] = "park"
    run_id: str
    workflow: str
    path: str
    wait_id: str
    wait: Any
    timeout_at: datetime | None = None
    escalated_at: datetime | None = None
    """Set once ``on_timeout: escalate`` extended the deadline (``timeout_at`` is then
    the extended one)."""


class Unpark(Frozen):
    """The wait is over (answered, timed out or cancelled): remove its row."""

    type: Literal["unpark"] = "unpark"
    run_id: str
    wait_id: str


class Journal(Frozen):
    """A run or step event for the read model (runs, step logs)."""

    type: Literal["journal"] = "journal"
    run_id: str
    workflow: str
    event: Literal[
        "run_pending",
        "run_started",
        "run_status",
        "step_started",
        "step_retrying",
        "step_settled",
        "run_settled",
    ]
    """``run_pending``: admitted, not started (with why: ``reason`` and ``waiting_for``);
    ``run_status``: a started run parked (``waiting``) or moving again (``running``)."""
    path: str | None = None
    status: str
    at: datetime
    data: dict[str, Any] = Field(default_factory=dict)


class Settle(Frozen):
    """The run is over: what ``on_failure`` decided; a failed run carries its final state
    (``journal``), kept for the DLQ and for ``rflow runs retry``."""

    type: Literal["settle"] = "settle"
    run_id: str
    workflow: str
    status: RunStatus
    on_failure: Literal["dead_letter", "drop", "halt"] | None = None
    error: StepError | None = None
    journal: dict[str, Any] = Field(default_factory=dict)


Effect = Annotated[
    Execute | ScheduleTimer | Park | Unpark | Journal | Settle, Field(discriminator="type")
]
