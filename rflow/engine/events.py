"""What happens to a run: the engine's inputs, each naming its run, step path and attempt."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from rflow.engine.frozen import Frozen
from rflow.engine.state import ParentLink, RunState, dropped
from rflow.failures import StepError


class Start(Frozen):
    """Create the run (the admission agent decided it starts)."""

    type: Literal["start"] = "start"
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
    """Environment values, which starts produced by earlier versions carried: dropped."""
    state: dict[str, Any] = Field(default_factory=dict)
    parent: ParentLink | None = None
    """The step of another run that started this one (``call_workflow``)."""


class StepResult(Frozen):
    """An effect finished: the output, or the failure as data."""

    type: Literal["step_result"] = "step_result"
    run_id: str
    path: str
    visit: int = 1
    attempt: int
    output: Any = None
    error: StepError | None = None


class TimerFired(Frozen):
    """A durable timer came due: a retry backoff, a delay, or a wait's timeout."""

    type: Literal["timer"] = "timer"
    run_id: str
    path: str
    visit: int = 1
    attempt: int
    purpose: Literal["retry", "delay", "wait_timeout", "start"]
    """``start``: a run start deferred by its workflow's rate limit (handled by the runner,
    before the run exists; ``path`` is then the firing's gate key)."""
    due_at: datetime


class WaitResolved(Frozen):
    """A parked wait got its answer: an event, a webhook request, or a decision."""

    type: Literal["wait_resolved"] = "wait_resolved"
    run_id: str
    path: str
    wait_id: str
    payload: Any = None


class Retry(Frozen):
    """Continue a failed run as a new run: every step that settled keeps its record and
    its idempotency key; the step that failed (or ``from_step`` on, when given) runs again
    under new keys."""

    type: Literal["retry"] = "retry"
    run_id: str
    """The new run."""
    previous: RunState
    """The failed run's final state."""
    from_step: str | None = None
    """Run this step and every one after it again (it must come before the failure)."""
    state: dict[str, Any] = Field(default_factory=dict)
    """The workflow's durable state when the retry starts."""


class SignalReceived(Frozen):
    """A signal sent to the run by name (``rflow runs signal``) that no step's wait row
    took: the engine gives it to a step that waits for it now, or keeps it when the
    workflow buffers that signal."""

    type: Literal["signal"] = "signal"
    run_id: str
    name: str
    signal_id: str
    """Unique per signal sent: a redelivered one is taken once."""
    payload: Any = None
    """What a step that waits for it gets as its output: ``{signal, data, by, at}``."""


class CancelRequested(Frozen):
    """Stop the run at its next step boundary; a send in flight is never cut off."""

    type: Literal["cancel"] = "cancel"
    run_id: str
    reason: str


Event = Annotated[
    Start | Retry | StepResult | TimerFired | WaitResolved | SignalReceived | CancelRequested,
    Field(discriminator="type"),
]
