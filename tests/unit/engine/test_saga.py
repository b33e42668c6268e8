"""try/catch with compensate (sagas) and on_error, decided by the pure engine."""

from __future__ import annotations

from rflow.engine import Execute, Park, RunStatus, StepStatus
from rflow.failures import StepError
from tests.unit.engine.driver import Driver, fail, workflow

SAGA = """
trigger: { manual: {} }
permissions: { relayers: [payout] }
steps:
  - id: flow
    try:
      - id: pay
        send_transaction: { network: local, relayer: payout, to: "0x0000000000000000000000000000000000000001", value: 1 }
        compensate:
          - id: refund
            send_transaction: { network: local, relayer: payout, to: "0x0000000000000000000000000000000000000002", value: 1 }
      - id: fee
        send_transaction: { network: local, relayer: payout, to: "0x0000000000000000000000000000000000000003", value: 1 }
        compensate:
          - id: unfee
            http_call: { url: "http://fees.test/undo/${{ steps.fee.output.tx.hash }}?why=${{ error.kind }}" }
      - id: bridge
        http_call: { url: "http://bridge.test" }
    catch:
      - id: tell
        notify: { channel: ops, message: "caught ${{ steps.flow.error.message }} (${{ error.kind }})" }
  - id: after
    command: { name: log, args: { message: "${{ steps.flow.status }}" } }
"""


def sent(d: Driver) -> list[str]:
    return [e.path for e in d.effects if isinstance(e, Execute)]


def drain(d: Driver, answer=lambda e: {"ok": e.path}) -> None:
    """Answer every action asked for, firing no timer (a wait stays parked)."""
    if d.state is None:
        d.start()
    while executes := d.pending(Execute):
        result = answer(executes[0])
        if isinstance(result, StepError):
            d.answer(executes[0], error=result)
        else:
            d.answer(executes[0], output=result)


def answers(bridge_fails: bool = True, unfee_fails: bool = False):
    def answer(e: Execute):
        if e.path == "bridge" and bridge_fails:
            return fail("assert_failed", "bridge down")
        if e.path == "unfee" and unfee_fails:
            return fail("assert_failed", "fee desk closed")
        return {"tx": {"hash": f"0x{e.path}"}}

    return answer


def test_a_third_step_failing_runs_the_compensations_in_reverse_then_catch():
    d = Driver(workflow(SAGA))
    state = d.run(answers())
    assert sent(d) == ["pay", "fee", "bridge", "unfee", "refund", "tell"]
    keys = {e.path: e.key for e in d.effects if isinstance(e, Execute)}
    assert keys["refund"] == "w:t1:refund"  # one key: refunded exactly once
    unfee = next(e for e in d.effects if isinstance(e, Execute) and e.path == "unfee")
    assert unfee.action["url"] == "http://fees.test/undo/0xfee?why=assert_failed"
    tell = next(e for e in d.effects if isinstance(e, Execute) and e.path == "tell")
    assert tell.action["message"] == "caught bridge down (assert_failed)"
    flow = state.steps["flow"]
    assert flow.status == StepStatus.SUCCEEDED  # caught
    assert flow.error.message == "bridge down"  # the failure, kept as data
    assert [u.step for u in flow.saga.undone] == ["fee", "pay"]
    assert state.steps["after"].output == {"message": "succeeded"}
    assert state.status == RunStatus.SUCCEEDED


def test_without_a_failure_nothing_is_compensated():
    d = Driver(workflow(SAGA))
    state = d.run(answers(bridge_fails=False))
    assert sent(d) == ["pay", "fee", "bridge"]
    assert state.steps["flow"].saga.done == ("pay", "fee")
    assert state.status == RunStatus.SUCCEEDED


def test_a_failed_compensation_is_compensation_failed_naming_the_step():
    d = Driver(workflow(SAGA))
    state = d.run(answers(unfee_fails=True))
    # The other compensation still runs; catch does not (the undo is what failed).
    assert sent(d) == ["pay", "fee", "bridge", "unfee", "refund"]
    flow = state.steps["flow"]
    assert flow.status == StepStatus.FAILED
    assert flow.error.kind == "compensation_failed"
    assert flow.error.message == (
        "compensation unfee of fee failed (assert_failed: fee desk closed); compensating for: bridge down"
    )
    assert state.status == RunStatus.FAILED
    assert state.error.kind == "compensation_failed"


def test_without_catch_the_block_fails_once_compensated():
    wf = workflow(SAGA.replace("    catch:\n", "    xcatch:\n").split("    xcatch:")[0] + AFTER)
    d = Driver(wf)
    state = d.run(answers())
    assert sent(d) == ["pay", "fee", "bridge", "unfee", "refund", "page"]
    assert state.steps["flow"].status == StepStatus.FAILED
    assert state.error.message == "bridge down"
    # on_error reports it (its error is the run's) and does not change how the run ended.
    page = next(e for e in d.effects if isinstance(e, Execute) and e.path == "page")
    assert page.action["message"] == "w failed: bridge down"
    assert state.status == RunStatus.FAILED
    assert state.steps["page"].phase == "on_error"


AFTER = """
  - id: after
    command: { name: log, args: { message: "${{ steps.flow.status }}" } }
on_error:
  - id: page
    notify: { channel: ops, message: "${{ run.workflow }} ${{ run.status }}: ${{ error.message }}" }
"""


def test_on_error_runs_only_for_a_failure_and_its_own_failure_changes_nothing():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: a
    http_call: { url: "http://a.test" }
on_error:
  - id: page
    notify: { channel: ops, message: "${{ error.message }}" }
finally:
  - id: last
    command: { name: log, args: { message: "${{ run.status }}" } }
"""
    )
    ok = Driver(wf)
    assert ok.run().status == RunStatus.SUCCEEDED
    assert "page" not in ok.state.steps
    bad = Driver(wf)

    def answer(e: Execute):
        if e.path == "a":
            return fail("data_unavailable", "down")
        return fail("rate_limited", "pager busy")

    state = bad.run(answer)
    assert [e.path for e in bad.effects if isinstance(e, Execute)] == ["a", "page"]
    assert state.steps["page"].status == StepStatus.FAILED
    assert (state.status, state.error.message) == (RunStatus.FAILED, "down")
    assert state.steps["last"].output == {"message": "failed"}


def test_a_rejection_compensates_and_ends_the_run_rejected_without_catch():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: flow
    try:
      - id: pay
        http_call: { url: "http://pay.test" }
        compensate:
          - id: refund
            http_call: { url: "http://refund.test" }
      - id: ok
        wait_for: { approval: { prompt: "Bridge?" } }
    catch:
      - id: tell
        notify: { channel: ops, message: "caught" }
"""
    )
    d = Driver(wf)
    drain(d)
    [park] = [e for e in d.effects if isinstance(e, Park)]
    d.resolve(park, {"decision": "reject", "by": "treasury"})
    drain(d)
    assert sent(d) == ["pay", "refund"]
    assert d.state.status == RunStatus.REJECTED


def test_cancelling_the_run_in_a_try_runs_its_compensations_to_the_end():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: flow
    try:
      - id: pay
        http_call: { url: "http://pay.test" }
        compensate:
          - id: refund
            http_call: { url: "http://refund.test" }
      - id: hold
        wait_for: { approval: { prompt: "go on?" } }
    catch:
      - id: tell
        notify: { channel: ops, message: "caught" }
"""
    )
    d = Driver(wf)
    drain(d)
    d.cancel("operator said stop")
    assert d.state.status == RunStatus.RUNNING  # the refund is out
    drain(d)
    assert sent(d) == ["pay", "refund"]
    assert d.state.status == RunStatus.CANCELLED
    assert d.state.steps["refund"].status == StepStatus.SUCCEEDED


NESTED = """
trigger: { manual: {} }
steps:
  - id: outer
    try:
      - id: inner
        try:
          - id: a
            http_call: { url: "http://a.test" }
            compensate:
              - id: undo_a
                http_call: { url: "http://undo-a.test" }
      - id: legs
        parallel:
          - id: b
            http_call: { url: "http://b.test" }
            compensate:
              - id: undo_b
                http_call: { url: "http://undo-b.test" }
          - id: c
            http_call: { url: "http://c.test" }
      - id: d
        http_call: { url: "http://d.test" }
"""


def test_an_inner_try_and_parallel_branches_hand_their_compensations_to_the_outer_try():
    d = Driver(workflow(NESTED))
    state = d.run(lambda e: fail("assert_failed", "d failed") if e.path == "d" else {})
    assert sent(d)[-2:] == ["undo_b", "undo_a"]  # newest first
    assert state.steps["outer"].status == StepStatus.FAILED
    assert state.error.message == "d failed"


def test_a_goto_inside_a_try_list_moves_within_it():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: flow
    try:
      - id: poll
        http_call: { url: "http://poll.test" }
      - id: again
        choose:
          branches:
            - when: "${{ steps.poll.output.n < 2 }}"
              goto: poll
      - id: done
        command: { name: log, args: { message: "polled" } }
"""
    )
    d = Driver(wf)
    count = iter(range(10))
    state = d.run(lambda e: {"n": next(count)})
    polls = [e.key for e in d.effects if isinstance(e, Execute) and e.path == "poll"]
    assert polls == ["w:t1:poll", "w:t1:poll#2", "w:t1:poll#3"]
    assert state.steps["done"].status == StepStatus.SUCCEEDED
    assert state.status == RunStatus.SUCCEEDED


def test_a_saga_that_loses_a_race_is_compensated():
    wf = workflow(
        """
trigger: { manual: {} }
steps:
  - id: either
    race:
      - id: slow_path
        try:
          - id: hold
            http_call: { url: "http://hold.test" }
            compensate:
              - id: release
                http_call: { url: "http://release.test" }
          - id: wait
            wait_for: { approval: { prompt: "go on?" } }
      - id: fast_path
        http_call: { url: "http://fast.test" }
"""
    )
    d = Driver(wf)
    started = d.start()
    hold = next(e for e in started if isinstance(e, Execute) and e.path == "hold")
    fast = next(e for e in started if isinstance(e, Execute) and e.path == "fast_path")
    d.answer(hold, {})  # the saga's first step completed; it now waits for a person
    [park] = [e for e in d.effects if isinstance(e, Park)]
    d.answer(fast, {})  # the other branch ends first: the saga is stopped
    assert d.state.steps["wait"].status == StepStatus.CANCELLED
    [release] = [e for e in d.pending(Execute) if e.path == "release"]
    d.answer(release, {})
    state = d.state
    assert state.steps["slow_path"].status == StepStatus.CANCELLED
    assert [u.step for u in state.steps["slow_path"].saga.undone] == ["hold"]
    assert state.steps["either"].fork.winner == "fast_path"
    assert state.status == RunStatus.SUCCEEDED
    assert d.resolve(park, {"decision": "approve", "by": "x"}) == []  # released
