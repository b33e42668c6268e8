"""What counts as a difference: sends paired by what they do before where they are."""

from __future__ import annotations

from datetime import UTC, datetime

from rflow.backtest.diff import pair_sends, step_changes
from rflow.backtest.outcome import Outcome
from rflow.codecs.backtests import Send, Step
from tests.unit.backtest.world import T0, firing

AT = datetime(2026, 3, 2, tzinfo=UTC)


def send(path: str, to: str, value: int, **fields) -> Send:
    base = {
        "path": path,
        "network": "local",
        "relayer": "payout",
        "to": to,
        "value": value,
        "outcome": "sent",
        "source": "recorded",
        "at": AT,
        "data_digest": "d0",
    }
    return Send(**{**base, **fields})


def summary(changes) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.change, c.path, tuple(c.what)) for c in changes]


def test_a_recipient_added_at_the_front_shifts_paths_but_changes_no_other_send():
    old = [send("pay[0]", "0xa", 1), send("pay[1]", "0xb", 2)]
    new = [send("pay[0]", "0xz", 9), send("pay[1]", "0xa", 1), send("pay[2]", "0xb", 2)]
    assert summary(pair_sends(old, new)) == [("added", "pay[0]", ())]


def test_the_same_step_with_another_amount_is_a_change_of_value():
    old = [send("bonus", "0xa", 1)]
    new = [send("bonus", "0xa", 3)]
    assert summary(pair_sends(old, new)) == [("changed", "bonus", ("value",))]


def test_a_token_transfer_to_the_same_recipient_under_another_step_is_paired_by_recipient():
    token = {"contract": "USDC", "function": "transfer(address,uint256)", "to": "0xc0"}
    old = [send("pay", value=0, recipient="0xa", token_amount=10, **token)]
    new = [send("payout", value=0, recipient="0xA", token_amount=12, data_digest="d1", **token)]
    assert summary(pair_sends(old, new)) == [("changed", "payout", ("token_amount",))]


def test_a_refusal_is_a_change_of_outcome_and_what_is_left_is_removed():
    old = [send("pay[0]", "0xa", 1), send("pay[1]", "0xb", 2)]
    new = [send("pay[0]", "0xa", 1, outcome="refused", error_kind="budget_exceeded")]
    assert summary(pair_sends(old, new)) == [
        ("changed", "pay[0]", ("outcome",)),
        ("removed", "pay[1]", ()),
    ]


def test_the_same_send_twice_is_matched_twice():
    old = [send("a", "0xa", 1), send("b", "0xa", 1)]
    new = [send("a", "0xa", 1)]
    assert summary(pair_sends(old, new)) == [("removed", "b", ())]


def outcome(*steps: Step) -> Outcome:
    found = Outcome("r1", "pay", firing("pay", "k", {}, T0))
    found.steps = {(s.path, 1): s for s in steps}
    return found


def test_a_step_skipped_on_one_side_and_absent_on_the_other_is_taken_by_neither():
    old = outcome(Step(path="pay", status="succeeded"))
    new = outcome(Step(path="pay", status="succeeded"), Step(path="tip", status="skipped"))
    assert step_changes(old, new) == []
    new = outcome(Step(path="pay", status="failed", error_kind="budget_exceeded"))
    [change] = step_changes(old, new)
    assert (change.path, change.old.status, change.new.error_kind) == (
        "pay",
        "succeeded",
        "budget_exceeded",
    )
