"""A test driver for the pure engine: a simulated clock and a scripted world."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from rflow.engine import (
    CancelRequested,
    Effect,
    Execute,
    Park,
    RunState,
    ScheduleTimer,
    Start,
    StepResult,
    TimerFired,
    WaitResolved,
    advance,
)
from rflow.failures import FailureKind, StepError
from rflow.lang import validate_text
from rflow.lang.model import Workflow

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

PROJECT = """
networks:
  local: { chain_id: 31337 }
relayers:
  payout: { key_env: PAYOUT_KEY, networks: [local] }
channels:
  ops: { type: log }
workflows:
"""


SETTLE = """
trigger: { manual: { inputs: [amount] } }
steps:
  - id: settled
    command: { name: log, args: { message: "settled" } }
"""
"""A workflow to call (``call_workflow: {workflow: settle}``)."""


def workflow(body: str, name: str = "w", others: dict[str, str] | None = None) -> Workflow:
    """A workflow from the YAML ``body`` of ``workflows.<name>`` (indented by 4), in a
    project that also has the workflows ``others`` (name: body)."""
    text = PROJECT
    for named, text_of in {name: body, **(others or {})}.items():
        text += (
            f"  {named}:\n"
            + "\n".join("    " + line for line in text_of.strip("\n").splitlines())
            + "\n"
        )
    report = validate_text(text, {"AUDIT_URL": "http://audit.test", "PAYOUT_KEY": "0x01"})
    assert report.ok, "\n".join(str(d) for d in report.diagnostics)
    return report.project.workflows[name]


Answer = Callable[[Execute], Any]


def fail(kind: str, message: str = "boom") -> StepError:
    return StepError(kind=FailureKind(kind), message=message)


class Driver:
    """Feeds events to ``advance`` and keeps every state and effect."""

    def __init__(self, wf: Workflow, trigger: dict | None = None, **start: Any) -> None:
        self.wf = wf
        self.now = T0
        self.state: RunState | None = None
        self.effects: list[Effect] = []
        self.events: list[Any] = []
        self.trigger = trigger or {}
        self.start_fields = start
        self.open: dict[tuple, Effect] = {}

    def feed(self, event: Any) -> list[Effect]:
        self.events.append((event, self.now))
        if isinstance(event, StepResult):
            self.open.pop(("execute", event.path, event.visit, event.attempt), None)
        elif isinstance(event, TimerFired):
            self.open.pop(("timer", event.path, event.visit, event.attempt, event.purpose), None)
        self.state, effects = advance(self.wf, self.state, event, self.now)
        self.effects.extend(effects)
        for effect in effects:
            if isinstance(effect, Execute):
                self.open[("execute", effect.path, effect.visit, effect.attempt)] = effect
            elif isinstance(effect, ScheduleTimer):
                self.open[("timer", effect.path, effect.visit, effect.attempt, effect.purpose)] = (
                    effect
                )
        return effects

    def start(self) -> list[Effect]:
        fields = {
            "run_id": "run1",
            "workflow": "w",
            "version": "v1",
            "trigger_key": "t1",
            "trigger": self.trigger,
        }
        return self.feed(Start(**{**fields, **self.start_fields}))

    def pending(self, kind: type) -> list[Any]:
        """Effects of ``kind`` that no later event answered yet, oldest first."""
        return [effect for effect in self.open.values() if isinstance(effect, kind)]

    def answer(
        self, execute: Execute, output: Any = None, error: StepError | None = None
    ) -> list[Effect]:
        return self.feed(
            StepResult(
                run_id=execute.run_id,
                path=execute.path,
                visit=execute.visit,
                attempt=execute.attempt,
                output=output,
                error=error,
            )
        )

    def fire(self, timer: ScheduleTimer) -> list[Effect]:
        self.now = max(self.now, timer.due_at)
        return self.feed(
            TimerFired(
                run_id=timer.run_id,
                path=timer.path,
                visit=timer.visit,
                attempt=timer.attempt,
                purpose=timer.purpose,
                due_at=timer.due_at,
            )
        )

    def resolve(self, park: Park, payload: Any) -> list[Effect]:
        return self.feed(
            WaitResolved(run_id=park.run_id, path=park.path, wait_id=park.wait_id, payload=payload)
        )

    def cancel(self, reason: str = "superseded") -> list[Effect]:
        return self.feed(CancelRequested(run_id="run1", reason=reason))

    def run(self, answer: Answer = lambda e: {"ok": e.path}, limit: int = 10_000) -> RunState:
        """Answer every Execute with ``answer`` (an output, or a StepError) and fire every
        timer, oldest first, until the run settles or nothing is pending."""
        if self.state is None:
            self.start()
        for _ in range(limit):
            if self.state.settled:
                return self.state
            executes = self.pending(Execute)
            if executes:
                result = answer(executes[0])
                if isinstance(result, StepError):
                    self.answer(executes[0], error=result)
                else:
                    self.answer(executes[0], output=result)
                continue
            timers = sorted(self.pending(ScheduleTimer), key=lambda t: t.due_at)
            if timers:
                self.fire(timers[0])
                continue
            return self.state
        raise AssertionError("run did not settle")

    def advance_clock(self, delta: timedelta) -> None:
        self.now += delta
