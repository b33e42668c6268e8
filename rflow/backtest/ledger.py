"""Spend in memory: what a version's budgets and gas breakers count during a replay.

A copy of the window's real spend (the charges and gas of the sends the replay does not
make again) with the replayed sends' charges added as the sandbox decides them. A cap
counts the charges of its window before the send's time, as
``storage/migrations/0011_budget_reserve.sql`` does for live and spent reservations; a
send's charges, summed per (budget, asset), are all taken or none
(:func:`rflow.storage.budgets.reserve`). Which budgets a send charges and by how much is
:func:`rflow.budgets.charges`, the relayer's own rule. Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from rflow.backtest.history import GasEntry, SpendEntry
from rflow.budgets import Charge, GasBreaker
from rflow.storage.budgets import GAS, BudgetExceeded


@dataclass(frozen=True, slots=True)
class _Entry:
    at: datetime
    amount: int
    key: str


class _Series:
    """Amounts in time order with their running totals: a window's sum is two
    bisections and a subtraction (sends come in time order, so an entry is appended)."""

    def __init__(self) -> None:
        self.times: list[datetime] = []
        self.entries: list[_Entry] = []
        self.totals: list[int] = []
        """``totals[i]``: the sum of the amounts of entries ``0..i``."""

    def add(self, entry: _Entry) -> None:
        index = bisect.bisect_right(self.times, entry.at)
        self.times.insert(index, entry.at)
        self.entries.insert(index, entry)
        before = self.totals[index - 1] if index else 0
        self.totals.insert(index, before + entry.amount)
        for later in range(index + 1, len(self.totals)):
            self.totals[later] += entry.amount

    def remove(self, key: str) -> None:
        kept = [entry for entry in self.entries if entry.key != key]
        if len(kept) == len(self.entries):
            return
        self.times, self.entries, self.totals = [], [], []
        for entry in kept:
            self.add(entry)

    def within(self, after: datetime, until: datetime) -> int:
        """The sum of the amounts at times in ``(after, until]``."""
        low = bisect.bisect_right(self.times, after)
        high = bisect.bisect_right(self.times, until)
        if high <= low:
            return 0
        return self.totals[high - 1] - (self.totals[low - 1] if low else 0)


class Ledger:
    """The spend one version's replay counts against its budgets."""

    def __init__(self, spend: Iterable[SpendEntry] = (), gas: Iterable[GasEntry] = ()) -> None:
        self._charges: dict[tuple[str, str], _Series] = defaultdict(_Series)
        self._gas: dict[tuple[str, str], _Series] = defaultdict(_Series)
        for index, entry in enumerate(spend):
            self._charges[(entry.budget, entry.asset)].add(
                _Entry(entry.at, entry.amount, f"~live:{index}")
            )
        for index, entry in enumerate(gas):
            self._gas[(entry.network, entry.relayer)].add(
                _Entry(entry.at, entry.cost, f"~live:{index}")
            )

    def consumed(self, budget: str, asset: str, charge_window, at: datetime) -> int:
        """What the cap of ``budget`` on ``asset`` counts at ``at``: the charges of the
        window that ends then."""
        series = self._charges.get((budget, asset))
        return series.within(at - charge_window, at) if series is not None else 0

    def reserve(self, at: datetime, key: str, charges: Sequence[Charge]) -> BudgetExceeded | None:
        """Take every one of ``charges`` for the send ``key`` at ``at``, or none and the
        refusal of the first cap it would pass (in the order the relayer checks them)."""
        merged: dict[tuple[str, str], Charge] = {}
        for charge in charges:
            pair = (charge.budget, charge.asset)
            if pair in merged:
                charge = Charge(
                    charge.budget,
                    charge.asset,
                    merged[pair].amount + charge.amount,
                    charge.cap,
                    charge.window,
                )
            merged[pair] = charge
        for (budget, asset), charge in sorted(merged.items()):
            consumed = self.consumed(budget, asset, charge.window, at)
            if charge.amount and consumed + charge.amount > charge.cap:
                return BudgetExceeded(
                    budget=budget,
                    asset=asset,
                    cap=charge.cap,
                    consumed=consumed,
                    amount=charge.amount,
                    window=charge.window,
                )
        for (budget, asset), charge in merged.items():
            self._charges[(budget, asset)].add(_Entry(at, charge.amount, key))
        return None

    def release(self, key: str) -> None:
        """Give back every charge of the send ``key`` (it reverted: nothing moved)."""
        for series in self._charges.values():
            series.remove(key)

    def gas_spent(self, breaker: GasBreaker, at: datetime) -> int:
        """The gas a ``max_gas_spend`` breaker counts at ``at``."""
        total = 0
        for (network, relayer), series in self._gas.items():
            if breaker.networks is not None and network not in breaker.networks:
                continue
            if breaker.relayers is not None and relayer not in breaker.relayers:
                continue
            total += series.within(at - breaker.window, at)
        return total

    def check_gas(self, breakers: Sequence[GasBreaker], at: datetime) -> BudgetExceeded | None:
        """The refusal of the first breaker whose window's gas has reached its cap."""
        for breaker in breakers:
            spent = self.gas_spent(breaker, at)
            if spent >= breaker.cap:
                return BudgetExceeded(
                    budget=breaker.budget,
                    asset=GAS,
                    cap=breaker.cap,
                    consumed=spent,
                    amount=0,
                    window=breaker.window,
                )
        return None

    def pay_gas(self, at: datetime, key: str, network: str, relayer: str, cost: int) -> None:
        """Record the gas a mined send paid."""
        self._gas[(network, relayer)].add(_Entry(at, cost, key))
