"""foreach: one iteration per element, max_parallel, batch_size, per-iteration if, failures."""

from __future__ import annotations

from rflow.engine import Execute, RunStatus, StepStatus
from tests.unit.engine.driver import Driver, fail, workflow


def payout(extra: str = "", items: str = "${{ trigger.recipients }}") -> str:
    return f"""
trigger: {{ manual: {{}} }}
steps:
  - id: pay
    foreach: "{items}"
{extra}
    http_call: {{ url: "http://x.test/pay", method: POST, body: {{ to: "${{{{ item }}}}", i: "${{{{ item_index }}}}" }} }}
  - id: after
    notify: {{ channel: ops, message: "paid ${{{{ length(steps.pay.output) }}}}" }}
"""


def in_flight(d: Driver) -> list[str]:
    return [e.path for e in d.pending(Execute)]


def test_each_element_runs_once_sequentially_by_default():
    d = Driver(workflow(payout()), trigger={"recipients": ["a", "b", "c"]})
    d.start()
    assert in_flight(d) == ["pay[0]"]
    d.answer(d.pending(Execute)[0], output="tx-a")
    assert in_flight(d) == ["pay[1]"]
    state = d.run(lambda e: f"tx-{e.action.get('body', {}).get('to')}")
    assert state.steps["pay"].output == ["tx-a", "tx-b", "tx-c"]
    assert state.steps["pay[2]"].input["body"] == {"to": "c", "i": 2}
    keys = [e.key for e in d.effects if isinstance(e, Execute) and e.path.startswith("pay[")]
    assert keys == ["w:t1:pay[0]", "w:t1:pay[1]", "w:t1:pay[2]"]
    after = next(e for e in d.effects if isinstance(e, Execute) and e.path == "after")
    assert after.action["message"] == "paid 3"


def test_max_parallel_bounds_iterations_in_flight():
    d = Driver(workflow(payout("    max_parallel: 4")), trigger={"recipients": list(range(50))})
    d.start()
    assert len(in_flight(d)) == 4
    peak = 0
    while not d.state.settled:
        pending = d.pending(Execute)
        peak = max(peak, len([p for p in pending if p.path.startswith("pay[")]))
        # Answer the newest first: completion order differs from start order.
        target = pending[-1]
        d.answer(target, output=target.action.get("body", {}).get("i"))
    assert peak == 4
    assert d.state.steps["pay"].output == list(range(50))
    assert d.state.status == RunStatus.SUCCEEDED


def test_batch_size_makes_each_item_a_list():
    d = Driver(
        workflow(payout("    batch_size: 2")), trigger={"recipients": ["a", "b", "c", "d", "e"]}
    )
    state = d.run(lambda e: e.action.get("body", {}).get("to"))
    assert state.steps["pay"].output == [["a", "b"], ["c", "d"], ["e"]]


def test_if_is_evaluated_per_iteration_and_skips_contribute_null():
    body = payout("    if: \"${{ item != 'skip' }}\"")
    d = Driver(workflow(body), trigger={"recipients": ["a", "skip", "c"]})
    state = d.run(lambda e: e.action.get("body", {}).get("to"))
    assert state.steps["pay"].output == ["a", None, "c"]
    assert state.steps["pay[1]"].status == StepStatus.SKIPPED


def test_a_failing_iteration_fails_the_step_and_later_items_never_start_when_sequential():
    d = Driver(workflow(payout()), trigger={"recipients": ["a", "b", "c"]})
    state = d.run(lambda e: fail("reverted") if e.action.get("body", {}).get("to") == "b" else "ok")
    assert state.status == RunStatus.FAILED
    assert "pay[2]" not in state.steps
    assert state.steps["pay"].error.message.startswith("iteration 1 failed")
    assert "after" not in state.steps


def test_with_parallelism_in_flight_iterations_drain_and_nothing_new_starts():
    d = Driver(workflow(payout("    max_parallel: 3")), trigger={"recipients": list(range(10))})
    d.start()
    first, second, third = d.pending(Execute)
    d.answer(second, error=fail("reverted"))
    assert [e.path for e in d.pending(Execute)] == ["pay[0]", "pay[2]"]  # nothing new started
    assert not d.state.steps["pay"].status.settled
    d.answer(first, output="ok")
    d.answer(third, output="ok")
    assert d.state.steps["pay"].status == StepStatus.FAILED
    assert d.state.status == RunStatus.FAILED
    assert "pay[3]" not in d.state.steps


def test_iterations_retry_individually():
    body = payout("    retry: { max_attempts: 2, backoff: 1s }")
    d = Driver(workflow(body), trigger={"recipients": ["a", "b"]})
    seen = []

    def answer(e):
        seen.append((e.path, e.attempt))
        return fail("rate_limited") if (e.path, e.attempt) == ("pay[1]", 1) else "ok"

    assert d.run(answer).status == RunStatus.SUCCEEDED
    assert ("pay[1]", 2) in seen


def test_an_empty_list_settles_at_once_and_a_non_list_fails():
    state = Driver(workflow(payout()), trigger={"recipients": []}).run()
    assert state.steps["pay"].output == []
    state = Driver(workflow(payout()), trigger={"recipients": "nope"}).run()
    assert state.status == RunStatus.FAILED
    assert state.error.kind == "invalid_input"


def test_a_long_list_of_instantly_settling_iterations_does_not_recurse():
    body = payout('    if: "${{ false }}"')
    state = Driver(workflow(body), trigger={"recipients": list(range(5000))}).run()
    assert state.steps["pay"].output == [None] * 5000


def test_a_list_longer_than_max_iterations_fails_before_any_iteration():
    d = Driver(workflow(payout("    max_iterations: 3")), trigger={"recipients": list(range(4))})
    state = d.run()
    assert state.status == RunStatus.FAILED
    assert [e.path for e in d.effects if isinstance(e, Execute)] == []  # nothing started
    assert state.steps["pay"].error.kind == "invalid_input"
    assert state.steps["pay"].error.message == (
        "foreach gives 4 iterations, more than max_iterations (3): no iteration started"
    )
    assert not any(path.startswith("pay[") for path in state.steps)


def test_max_iterations_counts_iterations_batches_included():
    d = Driver(
        workflow(payout("    max_iterations: 3\n    batch_size: 2")),
        trigger={"recipients": list(range(6))},
    )
    assert d.run().status == RunStatus.SUCCEEDED
    d = Driver(
        workflow(payout("    max_iterations: 3\n    batch_size: 2")),
        trigger={"recipients": list(range(7))},
    )
    state = d.run()
    assert state.status == RunStatus.FAILED
    assert "gives 4 iterations (batches of 2)" in state.steps["pay"].error.message
