"""Replay: the same recorded events give the same states and the same decisions."""

from __future__ import annotations

import pytest

from rflow.codecs import json
from rflow.engine import RunState, ScheduleTimer, advance
from tests.unit.engine.driver import Driver, fail, workflow
from tests.unit.engine.test_approvals import ESCALATE, approval
from tests.unit.engine.test_flow import APPROVAL, LOOP
from tests.unit.engine.test_foreach import payout
from tests.unit.engine.test_retry import RETRYING


def recorded_runs():
    d = Driver(
        workflow(payout("    max_parallel: 3\n    retry: { max_attempts: 2 }")),
        trigger={"recipients": list(range(12))},
    )
    calls = {"n": 0}

    def flaky(e):
        calls["n"] += 1
        return fail("rate_limited") if calls["n"] % 4 == 0 else e.path

    d.run(flaky)
    yield "foreach", d
    d = Driver(workflow(LOOP))
    states = iter(["pending", "pending", "done"])
    d.run(lambda e: {"state": next(states)} if e.path == "poll" else {})
    yield "loop", d
    d = Driver(workflow(RETRYING))
    d.run(lambda e: fail("rpc_timeout") if e.attempt < 3 else {"ok": 1})
    yield "retry", d
    d = Driver(workflow(APPROVAL), trigger={"amount": 1})
    d.start()
    [timer] = d.pending(ScheduleTimer)
    d.fire(timer)
    yield "approval", d
    d = Driver(workflow(approval(ESCALATE)), trigger={"amount": 2})
    d.run(lambda e: {"delivered": True} if e.path == "ok" else {})
    yield "escalation", d


@pytest.mark.parametrize(("name", "recorded"), list(recorded_runs()))
def test_replaying_recorded_events_gives_identical_decisions(name, recorded):
    state = None
    effects = []
    for event, now in recorded.events:
        state, produced = advance(recorded.wf, state, event, now)
        effects.extend(produced)
    assert state == recorded.state
    assert effects == recorded.effects


@pytest.mark.parametrize(("name", "recorded"), list(recorded_runs()))
def test_state_survives_the_table_codec(name, recorded):
    # Run state is journaled as JSON in a changelogged table; it must come back equal.
    encoded = json.dumps(recorded.state.model_dump(mode="json"))
    assert RunState.model_validate(json.loads(encoded)) == recorded.state
