"""What the engine asks the world to do. Agents carry effects out; the engine never does."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from rflow.engine.frozen import Frozen
from rflow.engine.state import ParentLink, RunStatus
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


class CancelTimer(Frozen):
    """A pending timer will not be needed (its step was stopped): remove its row."""

    type: Literal["cancel_timer"] = "cancel_timer"
    run_id: str
    path: str
    visit: int
    attempt: int
    purpose: Literal["retry", "delay", "wait_timeout"]


class Withdraw(Frozen):
    """A send handed to the relayer is no longer wanted (its branch was stopped): if it is
    not signed yet it never will be (nothing is reserved or broadcast, and the relayer
    answers ``cancelled``); if it is, it goes on and its result comes back as usual."""

    type: Literal["withdraw"] = "withdraw"
    run_id: str
    path: str
    visit: int
    attempt: int
    key: str
    reason: str


class StartChild(Frozen):
    """Start a run of workflow ``child`` for step ``path`` (``call_workflow``): its firing
    is keyed ``trigger_key``, so asking again starts nothing new. With ``wait_id``, the
    wait is registered first and the child's settling answers it."""

    type: Literal["start_child"] = "start_child"
    run_id: str
    workflow: str
    path: str
    visit: int
    attempt: int
    child: str
    trigger_key: str
    child_run_id: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    wait_id: str | None = None
    timeout_at: datetime | None = None


class CancelChild(Frozen):
    """Stop the child run of ``trigger_key`` (its firing is retracted: a child not started
    yet never starts)."""

    type: Literal["cancel_child"] = "cancel_child"
    run_id: str
    child: str
    trigger_key: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    reason: str


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
    parent: ParentLink | None = None
    """The step of another run that waits for this one: the read model answers its wait."""
    outputs: dict[str, Any] | None = None
    """What the run gives back (its workflow's ``outputs``), when it succeeded."""


Effect = Annotated[
    Execute
    | ScheduleTimer
    | CancelTimer
    | Park
    | Unpark
    | Withdraw
    | StartChild
    | CancelChild
    | Journal
    | Settle,
    Field(discriminator="type"),
]
