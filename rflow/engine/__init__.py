"""The pure run engine: ``advance(workflow, state, event, now) -> (state, effects)``.

It imports no faust, psycopg, web3, clock or randomness (a test enforces it): agents
feed it events, carry out its effects and journal its states, and replay tests feed it
recorded events and expect the same decisions.

The names below are imported from their module when first used, so a reader of one
submodule (``rflow.engine.state``, say: the CLI's run listing) does not pay for
:func:`advance` and the workflow language it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rflow.engine.advance import MAX_EXECUTIONS, advance, resume
    from rflow.engine.effects import (
        CancelChild,
        CancelTimer,
        Effect,
        Execute,
        Journal,
        Park,
        ScheduleTimer,
        Settle,
        StartChild,
        Unpark,
        Withdraw,
    )
    from rflow.engine.events import (
        CancelRequested,
        Event,
        Retry,
        SignalReceived,
        Start,
        StepResult,
        TimerFired,
        WaitResolved,
    )
    from rflow.engine.keys import (
        idempotency_key,
        matrix_combinations,
        matrix_suffix,
        run_id,
        run_key,
    )
    from rflow.engine.state import Escalated, Fanout, ParentLink, RunState, StepRecord
    from rflow.engine.statuses import RunStatus, StepStatus

_HOMES = {
    "MAX_EXECUTIONS": "advance",
    "advance": "advance",
    "resume": "advance",
    "CancelChild": "effects",
    "CancelTimer": "effects",
    "Effect": "effects",
    "Execute": "effects",
    "Journal": "effects",
    "Park": "effects",
    "ScheduleTimer": "effects",
    "Settle": "effects",
    "StartChild": "effects",
    "Unpark": "effects",
    "Withdraw": "effects",
    "CancelRequested": "events",
    "Event": "events",
    "Retry": "events",
    "SignalReceived": "events",
    "Start": "events",
    "StepResult": "events",
    "TimerFired": "events",
    "WaitResolved": "events",
    "idempotency_key": "keys",
    "matrix_combinations": "keys",
    "matrix_suffix": "keys",
    "run_id": "keys",
    "run_key": "keys",
    "Escalated": "state",
    "Fanout": "state",
    "ParentLink": "state",
    "RunState": "state",
    "RunStatus": "statuses",
    "StepRecord": "state",
    "StepStatus": "statuses",
}
"""Each exported name and the submodule that defines it."""


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'rflow.engine' has no attribute {name!r}")
    home = _HOMES[name]
    module = importlib.import_module(f"rflow.engine.{home}")
    globals()[name] = value = getattr(module, name)
    if home in _HOMES:
        # Importing a submodule binds its name on this package: the submodule advance
        # would hide the function advance from whoever imported resume first.
        globals()[home] = getattr(module, home)
    return value


__all__ = [
    "MAX_EXECUTIONS",
    "CancelChild",
    "CancelRequested",
    "CancelTimer",
    "Effect",
    "Escalated",
    "Event",
    "Execute",
    "Fanout",
    "Journal",
    "ParentLink",
    "Park",
    "Retry",
    "RunState",
    "RunStatus",
    "ScheduleTimer",
    "Settle",
    "SignalReceived",
    "Start",
    "StartChild",
    "StepRecord",
    "StepResult",
    "StepStatus",
    "TimerFired",
    "Unpark",
    "WaitResolved",
    "Withdraw",
    "advance",
    "idempotency_key",
    "matrix_combinations",
    "matrix_suffix",
    "resume",
    "run_id",
    "run_key",
]
