"""resume: what an unsettled run is waiting on, issued again after a crash or rebalance."""

from __future__ import annotations

from rflow.engine import Execute, Park, ScheduleTimer, resume
from tests.unit.engine.driver import Driver, fail, workflow
from tests.unit.engine.test_flow import APPROVAL, DELAY
from tests.unit.engine.test_foreach import payout
from tests.unit.engine.test_retry import RETRYING


def test_running_actions_are_reissued_with_the_same_key_and_attempt():
    d = Driver(workflow(payout("    max_parallel: 3")), trigger={"recipients": list(range(5))})
    d.start()
    d.answer(d.pending(Execute)[1], output="ok")
    outstanding = sorted(d.pending(Execute), key=lambda e: e.path)
    again = sorted(
        (e for e in resume(d.wf, d.state) if isinstance(e, Execute)), key=lambda e: e.path
    )
    assert again == outstanding
    assert [e.path for e in again] == ["pay[0]", "pay[2]", "pay[3]"]


def test_timers_and_waits_are_reissued_as_they_were():
    d = Driver(workflow(RETRYING))
    d.start()
    d.answer(d.pending(Execute)[0], error=fail("rate_limited"))
    assert resume(d.wf, d.state) == d.pending(ScheduleTimer)

    d = Driver(workflow(DELAY))
    d.start()
    assert resume(d.wf, d.state) == d.pending(ScheduleTimer)

    d = Driver(workflow(APPROVAL), trigger={"amount": 1})
    d.start()
    parks = [e for e in d.effects if isinstance(e, Park)]
    assert resume(d.wf, d.state) == parks + d.pending(ScheduleTimer)


def test_a_settled_run_needs_nothing():
    d = Driver(workflow(DELAY))
    assert resume(d.wf, d.run()) == []
    assert resume(d.wf, None) == []
