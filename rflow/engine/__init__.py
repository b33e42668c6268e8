"""The pure run engine: ``advance(workflow, state, event, now) -> (state, effects)``.

It imports no faust, psycopg, web3, clock or randomness (a test enforces it): agents
feed it events, carry out its effects and journal its states, and replay tests feed it
recorded events and expect the same decisions.
"""

from rflow.engine.advance import MAX_EXECUTIONS, advance, resume
from rflow.engine.effects import Effect, Execute, Journal, Park, ScheduleTimer, Settle, Unpark
from rflow.engine.events import (
    CancelRequested,
    Event,
    Retry,
    Start,
    StepResult,
    TimerFired,
    WaitResolved,
)
from rflow.engine.keys import idempotency_key, matrix_combinations, matrix_suffix, run_id, run_key
from rflow.engine.state import Escalated, Fanout, RunState, RunStatus, StepRecord, StepStatus

__all__ = [
    "MAX_EXECUTIONS",
    "CancelRequested",
    "Effect",
    "Escalated",
    "Event",
    "Execute",
    "Fanout",
    "Journal",
    "Park",
    "Retry",
    "RunState",
    "RunStatus",
    "ScheduleTimer",
    "Settle",
    "Start",
    "StepRecord",
    "StepResult",
    "StepStatus",
    "TimerFired",
    "Unpark",
    "WaitResolved",
    "advance",
    "idempotency_key",
    "matrix_combinations",
    "matrix_suffix",
    "resume",
    "run_id",
    "run_key",
]
