"""The sandbox's decisions: which sends reuse the record and which ask the chain, what
budgets, permissions, lanes, rate limits and breakers of the candidate decide, what
an action the original run never made gets, and that nothing unknown is carried out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rflow.backtest import sandbox, sends
from rflow.backtest.history import SpendEntry
from rflow.backtest.report import text
from rflow.backtest.run import Projects, replay, report
from rflow.codecs.backtests import BacktestReport
from rflow.engine.effects import Park
from rflow.failures import FailureKind, StepError
from tests.unit.backtest.world import MILLI, T0, Chain, firing, project, record, sent

ENV = {"PAYOUT_KEY": "0x01"}


def pay(*, cap: str = "1 ether", extra: str = "", steps: str = "", limit: str = "") -> str:
    return f"""
budgets:
  daily: {{ window: 24h, max_native_value: {cap}, scope: {{ relayers: [payout] }} }}
workflows:
  pay:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout]{limit} }}
    budgets: [daily]
{extra}
    steps:
      - id: pay
        foreach: "${{{{ inputs.payments }}}}"
        send_transaction:
          network: local
          relayer: payout
          to: "${{{{ item.to }}}}"
          value: "${{{{ item.value }}}}"
{steps}"""


ALICE = "0x00000000000000000000000000000000000000a1"
BOB = "0x00000000000000000000000000000000000000b0"
FEE = "0x00000000000000000000000000000000000000fe"


FEE_STEP = f"""
      - id: fee
        send_transaction: {{ network: local, relayer: payout, to: "{FEE}", value: "1000" }}
"""


def payments(*amounts: int, to: str = ALICE) -> dict[str, Any]:
    return {"payments": [{"to": to, "value": str(milli * MILLI)} for milli in amounts]}


async def compare(
    deployed_yaml: str,
    candidate_yaml: str,
    firings: list,
    chain: Chain | None = None,
    *,
    recorded_with: str | None = None,
    script=None,
    waits=None,
    spend=(),
    step: timedelta = timedelta(seconds=1),
    **options: Any,
) -> BacktestReport:
    """Record ``firings`` run by ``recorded_with`` (default: the deployed project), then
    backtest ``candidate_yaml`` against ``deployed_yaml`` over them."""
    deployed, candidate = project(deployed_yaml), project(candidate_yaml)
    kwargs = {"script": script} if script is not None else {}
    history = record(
        project(recorded_with) if recorded_with else deployed,
        firings,
        waits=waits,
        spend=spend,
        step=step,
        **kwargs,
    )
    projects = Projects(deployed, candidate)
    chain = chain or Chain()
    old, new = await replay(history, projects, chain, ENV, **options)
    base = {
        "candidate": "candidate/",
        "started_at": T0,
        "window_from": history.window.start,
        "window_to": history.window.end,
        "workflows": sorted(set(deployed.workflows) | set(candidate.workflows)),
    }
    return report(base, history, projects, old, new, T0)


def week(*days_amounts: tuple[float, list[int]]) -> list:
    return [
        firing("pay", f"manual:{i}", payments(*amounts), T0 + timedelta(days=day))
        for i, (day, amounts) in enumerate(days_amounts)
    ]


async def test_the_same_project_reports_no_difference_and_asks_the_chain_nothing():
    chain = Chain()
    found = await compare(pay(), pay(), week((0, [10, 20]), (1, [30])), chain)
    assert found.outcome == "same" and found.runs == [] and not found.money_moves
    assert [row.model_dump() for row in found.spend] == [
        {"budget": "daily", "asset": "native", "old": 60 * MILLI, "new": 60 * MILLI}
    ]
    assert chain.asked == []  # every send was made as it was: the record answers


async def test_a_new_send_is_simulated_at_the_block_before_the_run_first_sent():
    fee = FEE_STEP
    chain = Chain()
    found = await compare(pay(), pay(steps=fee), week((0, [10])), chain)
    [run] = found.runs
    [added] = run.sends
    assert (added.change, added.path, added.new.to, added.new.value) == ("added", "fee", FEE, 1000)
    assert added.new.source == "simulated" and added.new.block == 99
    assert [kind for kind, _ in chain.asked] == ["simulate"]
    [(_, (block, call))] = chain.asked
    assert block == 99 and call["from"] == "0x00000000000000000000000000000000000000aa"


async def test_a_tighter_budget_refuses_tuesdays_payout_against_the_real_spend_around_it():
    """Another workflow's real spend on Tuesday morning stays in the ledger: with the
    candidate's cap, Tuesday's payout passes it."""
    other = (SpendEntry(T0 + timedelta(days=1, hours=8), "daily", "native", 900 * MILLI),)
    firings = week((0.5, [200]), (1.5, [200]), (3.5, [200]))
    found = await compare(pay(cap="2 ether"), pay(cap="1 ether"), firings, spend=other)
    [run] = found.runs
    assert run.trigger_key == "manual:1" and run.fired_at.strftime("%A") == "Tuesday"
    assert (run.old.status, run.new.status, run.failure) == ("succeeded", "failed", "appears")
    [refused] = run.sends
    assert refused.change == "changed" and refused.what == ["outcome"]
    assert refused.new.error == (
        f"budget daily: native {900 * MILLI} + {200 * MILLI} would exceed the cap "
        f"{1000 * MILLI} in 24h"
    )
    assert found.spend[0].old == 600 * MILLI and found.spend[0].new == 400 * MILLI
    assert "Tue 2026-03-03 12:00:00 UTC" in text(found)


async def test_a_permission_the_candidate_narrows_refuses_before_the_chain_is_asked():
    chain = Chain()
    found = await compare(
        pay(), pay(limit=", max_value_per_tx: 0.015 ether"), week((0, [10, 20])), chain
    )
    [run] = found.runs
    [change] = run.sends
    assert change.path == "pay[1]" and change.new.outcome == "refused"
    assert change.new.error_kind == "permission_denied" and change.new.source == "rules"
    # The send as built: only its outcome changed, not its value nor its call data.
    assert change.what == ["outcome"] and change.new.value == 20 * MILLI
    assert chain.asked == []


async def test_a_send_that_would_revert_is_refused_and_charges_nothing():
    fee = FEE_STEP
    chain = Chain(reverts={FEE: "fees are closed"})
    found = await compare(pay(), pay(steps=fee), week((0, [10])), chain)
    [run] = found.runs
    assert (run.new.status, run.new.error_kind, run.failure) == (
        "failed",
        "simulation_failed",
        "appears",
    )
    [added] = run.sends
    assert added.change == "added" and added.new.outcome == "refused"
    assert added.new.error == "the call would revert: fees are closed" and added.new.charges == []
    assert found.spend[0].old == found.spend[0].new == 10 * MILLI
    assert not [row for row in found.moved if row.asset == "native" and row.old != row.new]


async def test_the_candidates_concurrency_lane_skips_a_run_that_overlaps_another():
    skip = '    concurrency: { group: "all", on_conflict: skip }'
    firings = week((0, [10]), (0 + 5 / 86400, [20]))
    found = await compare(pay(), pay(extra=skip), firings, step=timedelta(seconds=10))
    [run] = found.runs
    assert run.trigger_key == "manual:1" and run.start == "would_not_start"
    assert run.new.status == "not_started" and "busy with run" in run.new.reason
    assert [c.change for c in run.sends] == ["removed"]


async def test_the_candidates_rate_limit_holds_a_start_back():
    limit = "    rate_limit: { max: 1, per: 1h }"
    firings = week((0, [10]), (0 + 600 / 86400, [20]))
    found = await compare(pay(), pay(extra=limit), firings)
    [run] = found.runs
    assert run.trigger_key == "manual:1" and run.delay == 3000.0
    assert run.new.waited == ["room in the rate limit (1 starts per 1h)"]
    assert "starts 50m later (waiting for room in the rate limit" in text(found)


async def test_a_breaker_the_candidate_adds_trips_and_holds_the_next_firing_back():
    """The first run's send reverted for real; with the candidate's breaker that failure
    pauses the workflow: the next firing waits until the window has passed (its probe)."""
    breaker = "    circuit_breaker: { max_failures: 1, window: 1h }"
    firings = week((0, [10]), (0.01, [10]), (1, [10]))

    def reverted_first(effect):
        if "manual:0" in effect.key:
            return None, StepError(kind=FailureKind.REVERTED, message="reverted in block 100")
        return sent(effect)

    found = await compare(pay(), pay(extra=breaker), firings, script=reverted_first)
    [held] = found.runs
    assert held.trigger_key == "manual:1" and held.start is None
    assert held.new.status == held.old.status == "succeeded"
    assert held.delay == 3600 + 1 - 864  # the failure at 1s, the firing at 14m24s
    assert "paused by breaker: circuit breaker tripped" in held.new.waited[0]


HTTP = """
workflows:
  quote:
    trigger: { manual: {} }
    steps:
      - id: price
        http_call: { url: "%s" }
      - id: tell
        notify: { channel: ops, message: "price ${{ steps.price.output.json.usd }} %s" }
"""


def answered(effect):
    if effect.kind == "http_call":
        return {"status": 200, "json": {"usd": 3}, "body": "{}", "headers": {}}, None
    return {"channel": "ops", "delivered": True}, None


async def test_a_recorded_request_gets_its_answer_and_a_new_one_stops_the_run():
    firings = [firing("quote", "manual:q", {}, T0)]
    same = await compare(
        HTTP % ("https://a.test/p", "x"), HTTP % ("https://a.test/p", "x"), firings, script=answered
    )
    assert same.outcome == "same" and same.marks == {}
    found = await compare(
        HTTP % ("https://a.test/p", "x"), HTTP % ("https://b.test/p", "x"), firings, script=answered
    )
    [run] = found.runs
    assert run.new.status == "incomplete" and run.old.status == "succeeded"
    [mark] = run.marks
    assert (mark.kind, mark.side, mark.path) == ("unrecorded", "candidate", "price")
    assert "GET https://b.test/p" in mark.text


async def test_a_new_notification_is_answered_as_delivered_and_marked():
    firings = [firing("quote", "manual:q", {}, T0)]
    found = await compare(
        HTTP % ("https://a.test/p", "x"), HTTP % ("https://a.test/p", "y"), firings, script=answered
    )
    assert found.runs == []  # it changes nothing the run does
    assert found.marks == {"unrecorded": 1}


APPROVAL = f"""
workflows:
  approve:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout] }}
    steps:
      - id: ok
        wait_for: {{ approval: {{ prompt: "pay?" }}, timeout: 1h, on_timeout: fail }}
      - id: pay
        send_transaction: {{ network: local, relayer: payout, to: "{ALICE}", value: "1" }}
"""

SECOND = APPROVAL.replace(
    "      - id: pay",
    '      - id: again\n        wait_for: { approval: { prompt: "sure?" }, timeout: 1h, on_timeout: fail }\n      - id: pay',
)


def approve(park: Park) -> Any:
    return {"decision": "approve", "by": "treasury-lead"}


@pytest.mark.parametrize(
    ("assume", "status", "mark"),
    [
        (None, "failed", "no_answer"),
        ("approve", "succeeded", "assumed"),
        ("reject", "rejected", "assumed"),
    ],
)
async def test_a_wait_the_original_run_never_reached_takes_assume_or_its_timeout(
    assume, status, mark
):
    firings = [firing("approve", "manual:a", {}, T0)]
    found = await compare(APPROVAL, SECOND, firings, waits=approve, assume=assume)
    [run] = found.runs
    assert (run.old.status, run.new.status) == ("succeeded", status)
    assert "again" in {change.path for change in run.steps}
    assert run.money is (status != "succeeded")  # approved, it pays as before
    assert found.marks == {mark: 1}


async def test_the_recorded_decision_answers_a_wait_at_the_time_it_came():
    firings = [firing("approve", "manual:a", {}, T0)]
    found = await compare(APPROVAL, APPROVAL, firings, waits=approve, assume="reject")
    assert found.outcome == "same" and found.marks == {}


async def test_an_effect_without_a_simulation_stops_its_run_and_is_never_carried_out(monkeypatch):
    class StartChild:
        type = "start_child"

    real = sandbox.advance

    def advance(workflow, state, event, now, config=None):
        new, effects = real(workflow, state, event, now, config)
        if workflow.steps[0].id == "pay" and state is None:
            effects = [*effects, StartChild()]
        return new, effects

    monkeypatch.setattr(sandbox, "advance", advance)
    found = await compare(pay(), pay(), week((0, [10])))
    assert found.marks["not_simulated"] == 2
    assert found.runs == []  # both versions stop at the same place
    assert found.marks["drift"] == 1  # where the real run went on


STATE = """
workflows:
  count:
    trigger: { manual: {} }
    steps:
      - id: add
        list_add: { list: seen, value: "${{ inputs.n }}" }
      - id: log
        command: { name: log, args: { message: "seen ${{ length(state.seen) }}" } }
"""


async def test_durable_state_is_the_replays_own_and_says_where_it_starts():
    firings = [
        firing("count", f"manual:{n}", {"n": n}, T0 + timedelta(minutes=n)) for n in range(3)
    ]
    found = await compare(STATE, STATE, firings)
    assert found.outcome == "same" and found.marks == {"state": 6}


async def test_drift_says_when_the_record_does_not_match_the_deployed_replay():
    firings = week((0, [10]))
    found = await compare(
        pay(cap="0.001 ether"), pay(cap="0.001 ether"), firings, recorded_with=pay()
    )
    [drift] = found.drift
    assert drift.text == "it ended succeeded, the replay failed; it made 1 sends, the replay 0"
    assert found.marks["drift"] == 1


def test_the_report_reads_back_exactly():
    from rflow.codecs.backtests import decode_report

    big = BacktestReport(
        candidate="x",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        finished_at=datetime(2026, 1, 1, tzinfo=UTC),
        window_from=datetime(2026, 1, 1, tzinfo=UTC),
        window_to=datetime(2026, 1, 2, tzinfo=UTC),
        outcome="different",
        spend=[{"budget": "b", "asset": "native", "old": 2**200, "new": 1}],
    )
    again = decode_report(big.encode())
    assert again == big and again.spend[0].old == 2**200
    assert big.document()["spend"][0]["old"] == str(2**200)
    assert big.exit_status == 1


def test_a_refusal_kind_is_decided_anew_but_a_chain_outcome_is_reused():
    assert {"reverted", "simulation_failed", "dropped", "expired"} == sends.REUSED
    assert FailureKind.BUDGET_EXCEEDED not in sends.REUSED
    assert StepError(kind=FailureKind.PERMISSION_DENIED, message="x").kind not in sends.REUSED


def allowance(strict: bool) -> str:
    return f"""
contracts:
  Token: {{ address: {{ local: "0x0000000000000000000000000000000000000077" }} }}
budgets:
  tokens:
    window: 24h
    max_token_value: {{ Token: "1000" }}
    scope: {{ relayers: [payout] }}
    strict: {str(strict).lower()}
workflows:
  allow:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout] }}
    budgets: [tokens]
    steps:
      - id: allow
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "increaseAllowance(address,uint256)"
          args: ["{ALICE}", "5"]
"""


async def test_a_budget_the_candidate_makes_strict_refuses_what_it_cannot_decode_as_the_relayer():
    chain = Chain()
    found = await compare(
        allowance(strict=False),
        allowance(strict=True),
        [firing("allow", "manual:0", {}, T0)],
        chain,
    )
    [run] = found.runs
    assert (run.old.status, run.new.status) == ("succeeded", "failed")
    [change] = run.sends
    assert change.new.outcome == "refused" and change.new.source == "rules"
    assert change.new.error_kind == "budget_undecodable"
    assert change.new.error.startswith("budget tokens is strict and caps Token: "), change.new.error
    assert chain.asked == []  # refused before the chain is asked, as the relayer refuses it
