"""The in-memory spend ledger counts as the relayer's reservations do."""

from __future__ import annotations

from datetime import timedelta

from rflow.backtest.history import GasEntry, SpendEntry
from rflow.backtest.ledger import Ledger
from rflow.budgets import NATIVE, Charge, GasBreaker
from tests.unit.backtest.world import T0

DAY = timedelta(hours=24)


def native(amount: int, cap: int = 1000) -> Charge:
    return Charge("daily", NATIVE, amount, cap, DAY)


def test_a_cap_counts_the_charges_of_the_window_that_ends_at_the_send():
    ledger = Ledger([SpendEntry(T0, "daily", NATIVE, 600)])
    refused = ledger.reserve(T0 + timedelta(hours=23), "s1", [native(500)])
    assert refused is not None and refused.message == (
        "budget daily: native 600 + 500 would exceed the cap 1000 in 24h"
    )
    # A day after the first charge, it no longer counts (a window is (t - 24h, t]).
    assert ledger.reserve(T0 + DAY, "s1", [native(500)]) is None
    assert ledger.consumed("daily", NATIVE, DAY, T0 + DAY) == 500


def test_a_send_takes_all_of_its_charges_or_none():
    ledger = Ledger()
    token = Charge("daily", "USDC", 60, 50, DAY)
    refused = ledger.reserve(T0, "s1", [native(10), token])
    assert refused is not None and refused.asset == "USDC"
    assert ledger.consumed("daily", NATIVE, DAY, T0) == 0
    # Charges of one pair are summed before the check, as reserve() merges them.
    assert ledger.reserve(T0, "s2", [native(600), native(600)]) is not None
    assert ledger.reserve(T0, "s3", [native(0, cap=0)]) is None  # zero never fails


def test_a_reverted_send_gives_its_charges_back():
    ledger = Ledger()
    assert ledger.reserve(T0, "s1", [native(900)]) is None
    ledger.release("s1")
    assert ledger.reserve(T0, "s2", [native(1000)]) is None


def test_a_gas_breaker_trips_once_its_scope_has_paid_the_cap_in_its_window():
    breaker = GasBreaker("daily", 100, DAY, ("local",), ("payout",))
    ledger = Ledger(gas=[GasEntry(T0, "local", "other", 500), GasEntry(T0, "base", "payout", 500)])
    assert ledger.check_gas([breaker], T0) is None
    ledger.pay_gas(T0, "s1", "local", "payout", 100)
    refused = ledger.check_gas([breaker], T0 + timedelta(hours=1))
    assert refused is not None and refused.message == (
        "budget daily: gas spend 100 has reached the cap 100 in 24h"
    )
    assert ledger.check_gas([breaker], T0 + DAY) is None
