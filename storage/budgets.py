"""Durable spend budgets: reservations against a cap in a rolling window, and the gas ledger.

A send reserves its charges (:class:`rflow.budgets.Charge`) inside the transaction that
allocates its nonce and stores its signed transaction, so a send is either recorded with
its reservations or not at all. Each (budget, asset) is checked and charged under a
transaction-scoped advisory lock: racing sends are serialized per cap, and the lock is
released when their transaction ends. Live ``reserved`` rows count whatever their age,
``spent`` rows while they are inside the window, ``released`` rows never.

A check sums the budget's rows in its window, so its cost grows with the sends the window
holds. ``native_spend`` is the receipt-derived gas ledger that ``max_gas_spend`` breakers
read.
Amounts are ``numeric(78, 0)`` in SQL and Python ints here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from rflow.budgets import NATIVE, Charge, GasBreaker
from rflow.failures import FailureKind, RflowError
from rflow.lang.units import format_duration
from rflow.storage.columns import columns
from rflow.storage.errors import translated

if TYPE_CHECKING:
    from rflow.lang.model import Budget

GAS = "gas"
"""The asset name of a ``max_gas_spend`` cap in :func:`usage` and :class:`BudgetExceeded`."""

# Two int4 keys: the schema's, and the (budget, asset) pair's. Two-key advisory locks live
# apart from the one-key locks of migrations and chain followers; a hash collision only
# makes two caps wait for each other, it never lets one overshoot.
_LOCK = """
SELECT pg_advisory_xact_lock(hashtext('rflow.budgets.' || current_schema()),
                             hashtext(%s || chr(31) || %s))
"""

# The lock, the cap check and the insert of one charge, in one statement (migration 0011).
_RESERVE = """
SELECT existed, consumed, inserted
FROM budget_reserve(%(budget)s, %(asset)s, %(send_key)s, %(amount)s::numeric, %(cap)s::numeric,
                    %(window)s::interval, %(run_id)s, %(workflow)s)
"""

_SETTLE = {
    "spent": """
UPDATE budget_reservations SET status = 'spent', settled_at = now()
WHERE send_key = ANY(%s) AND status = 'reserved'
""",
    "released": """
UPDATE budget_reservations SET status = 'released', settled_at = now()
WHERE send_key = ANY(%s) AND status <> 'released'
""",
}

_RECORD_GAS = """
INSERT INTO native_spend (tx_hash, send_key, network, relayer, gas_used, effective_gas_price,
                          gas_cost, value)
SELECT tx_hash, send_key, network, relayer, gas_used, price, gas_used * price, value
FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::numeric[], %b::numeric[],
            %b::numeric[]) AS x(tx_hash, send_key, network, relayer, gas_used, price, value)
ON CONFLICT (tx_hash) DO NOTHING
"""

_GAS_SPENT = """
SELECT coalesce(sum(gas_cost), 0) FROM native_spend
WHERE recorded_at > now() - %(window)s::interval
  AND (%(networks)s::text[] IS NULL OR network = ANY(%(networks)s::text[]))
  AND (%(relayers)s::text[] IS NULL OR relayer = ANY(%(relayers)s::text[]))
"""

# Each scope is a row of the JSON parameter: [{budget, networks, relayers, micros}, ...].
_GAS_BY_BUDGET = """
SELECT b.budget, coalesce(sum(s.gas_cost), 0)
FROM jsonb_to_recordset(%s) AS b(budget text, networks text[], relayers text[], micros bigint)
LEFT JOIN native_spend s
       ON s.recorded_at > now() - b.micros * interval '1 microsecond'
      AND (b.networks IS NULL OR s.network = ANY(b.networks))
      AND (b.relayers IS NULL OR s.relayer = ANY(b.relayers))
GROUP BY b.budget
"""

# Each cap is a row of the JSON parameter: [{budget, asset, micros}, ...].
_USAGE = """
SELECT b.budget, b.asset,
       coalesce(sum(r.amount) FILTER (WHERE r.status = 'reserved'), 0),
       coalesce(sum(r.amount) FILTER (WHERE r.status = 'spent'), 0)
FROM jsonb_to_recordset(%s) AS b(budget text, asset text, micros bigint)
LEFT JOIN budget_reservations r
       ON r.budget = b.budget AND r.asset = b.asset AND r.status <> 'released'
      AND (r.status = 'reserved' OR r.created_at > now() - b.micros * interval '1 microsecond')
GROUP BY b.budget, b.asset
"""

_SPEND = """
SELECT network, relayer, count(*), coalesce(sum(gas_cost), 0), coalesce(sum(value), 0)
FROM native_spend
WHERE %(window)s::interval IS NULL OR recorded_at > now() - %(window)s::interval
GROUP BY network, relayer
ORDER BY network, relayer
"""

# The charges a budget holds now, oldest first: live reservations whatever their age,
# spent ones inside the window (what `usage` sums, one row at a time).
_CHARGES = """
SELECT created_at, asset, amount, status, run_id FROM budget_reservations
WHERE budget = %(budget)s AND status <> 'released'
  AND (status = 'reserved' OR created_at > now() - %(window)s::interval)
ORDER BY created_at, send_key, asset
LIMIT %(limit)s
"""

_RUN_CHARGES = """
SELECT budget, asset, amount, status, send_key FROM budget_reservations
WHERE run_id = %s
ORDER BY created_at, send_key, budget, asset <> 'native', asset
"""


class BudgetExceeded(RflowError):
    """A charge would take a cap past its limit in the window, or a gas breaker has tripped.

    An :class:`RflowError` of kind ``budget_exceeded`` (the send fails before anything is
    broadcast, and is not retried); ``str()`` is the message alone.
    For a gas breaker ``asset`` is ``"gas"``, ``consumed`` the recorded gas spend and
    ``amount`` 0.
    """

    def __init__(
        self,
        *,
        budget: str,
        asset: str,
        cap: int,
        consumed: int,
        amount: int,
        window: timedelta,
    ) -> None:
        self.budget = budget
        self.asset = asset
        self.cap = cap
        self.consumed = consumed
        self.amount = amount
        self.window = window
        span = format_window(window)
        if asset == GAS:
            message = f"budget {budget}: gas spend {consumed} has reached the cap {cap} in {span}"
        else:
            message = (
                f"budget {budget}: {asset} {consumed} + {amount} would exceed the cap {cap} "
                f"in {span}"
            )
        super().__init__(FailureKind.BUDGET_EXCEEDED, message)

    def __str__(self) -> str:
        return self.message


def format_window(window: timedelta) -> str:
    """A budget window as people write one: hours at most, so a day reads ``24h``."""
    hours, rest = divmod(window, timedelta(hours=1))
    if not rest:
        return f"{hours}h" if hours else "0s"
    return (f"{hours}h" if hours else "") + format_duration(rest)


@dataclass(frozen=True, slots=True)
class BudgetUsage:
    """One cap of one budget now: ``consumed`` (reserved + spent in the window) of ``cap``."""

    budget: str
    asset: str
    cap: int
    consumed: int
    reserved: int
    remaining: int
    window: timedelta

    def document(self) -> dict[str, Any]:
        """This row as the CLI's ``--json`` and the API show it (the window as ``24h``)."""
        return {
            "budget": self.budget,
            "asset": self.asset,
            "cap": self.cap,
            "consumed": self.consumed,
            "reserved": self.reserved,
            "remaining": self.remaining,
            "window": format_window(self.window),
        }


@dataclass(frozen=True, slots=True)
class SpendRow:
    """What the sends of one relayer on one network cost: gas paid and value moved, in wei."""

    network: str
    relayer: str
    transactions: int
    gas_cost: int
    value: int


@dataclass(frozen=True, slots=True)
class Reservation:
    """What one send reserves: its charges, under its key."""

    send_key: str
    run_id: str | None
    workflow: str | None
    charges: Sequence[Charge]


async def lock(conn: psycopg.AsyncConnection, charges: Sequence[Charge]) -> None:
    """Take the lock of every (budget, asset) of ``charges``, in sorted order, for the rest
    of the caller's transaction: a transaction that reserves for several sends takes them
    all first, so two of them can never wait for each other."""
    pairs = sorted({(charge.budget, charge.asset) for charge in charges})
    if not pairs:
        return
    with translated():
        async with conn.pipeline():
            for pair in pairs:
                await conn.execute(_LOCK, pair)


async def reserve(
    conn: psycopg.AsyncConnection,
    *,
    send_key: str,
    run_id: str | None,
    workflow: str | None,
    charges: Sequence[Charge],
) -> None:
    """Reserve each of ``charges`` for ``send_key``, or raise :class:`BudgetExceeded`.

    Call it inside the caller's open (READ COMMITTED) transaction, the one that records the
    send: the locks are held until it ends, and when this raises the caller rolls it back,
    so no charge of a refused send survives. Pairs are locked in sorted order (racing sends
    with several charges cannot deadlock); charges of one pair are summed. A reservation
    that exists already (a redelivered send) is left as it is and not checked again; a zero
    amount is recorded and never fails. A single charge is one statement: on a connection
    in autocommit mode it is a transaction of its own.
    """
    [(_, refusal)] = await _reserve(conn, [Reservation(send_key, run_id, workflow, charges)])
    if refusal is not None:
        raise refusal


async def reserve_many(
    conn: psycopg.AsyncConnection, reservations: Sequence[Reservation]
) -> dict[str, BudgetExceeded] | None:
    """:func:`reserve` for several sends in one round trip, in their order, each check
    seeing the reservations of the sends before it. Returns the refused sends by key.

    A send with charges on several caps that is refused on one of them has reserved the
    others: then this returns ``None``, and the caller rolls its transaction back and
    reserves one send at a time (as :func:`reserve` under a savepoint each).
    """
    refused: dict[str, BudgetExceeded] = {}
    for (reservation, refusal), partial in await _reserve(conn, reservations, partial=True):
        if refusal is not None:
            if partial:
                return None
            refused[reservation.send_key] = refusal
    return refused


async def _reserve(conn, reservations, *, partial=False):
    """Lock and reserve in one pipeline; each reservation with its first refusal (and,
    with ``partial``, whether another of its charges was reserved)."""
    planned = [(reservation, _merged(reservation.charges)) for reservation in reservations]
    statements = [
        {
            "budget": budget,
            "asset": asset,
            "send_key": reservation.send_key,
            "amount": charge.amount,
            "cap": charge.cap,
            "window": charge.window,
            "run_id": reservation.run_id,
            "workflow": reservation.workflow,
        }
        for reservation, pairs in planned
        for (budget, asset), charge in pairs
    ]
    with translated():
        if len(statements) == 1:
            cursors = [await conn.execute(_RESERVE, statements[0])]
        else:
            # One round trip for every charge: the server still runs them in order, each
            # check after its lock is granted.
            async with conn.pipeline():
                cursors = [await conn.execute(_RESERVE, params) for params in statements]
        answers = iter(cursors)
        results = []
        for reservation, pairs in planned:
            refusal = None
            reserved = False
            for (budget, asset), charge in pairs:
                existed, consumed, inserted = await next(answers).fetchone()
                reserved = reserved or inserted
                if not existed and not inserted and refusal is None:
                    refusal = BudgetExceeded(
                        budget=budget,
                        asset=asset,
                        cap=charge.cap,
                        consumed=int(consumed),
                        amount=charge.amount,
                        window=charge.window,
                    )
            result = (reservation, refusal)
            results.append((result, refusal is not None and reserved) if partial else result)
    return results


def _merged(charges: Sequence[Charge]) -> list[tuple[tuple[str, str], Charge]]:
    """Charges summed per (budget, asset), in sorted order."""
    merged: dict[tuple[str, str], Charge] = {}
    for charge in charges:
        if charge.amount < 0:
            raise ValueError(f"budget {charge.budget}: negative {charge.asset} amount")
        key = (charge.budget, charge.asset)
        if key in merged:
            charge = replace(charge, amount=merged[key].amount + charge.amount)
        merged[key] = charge
    return sorted(merged.items())


async def settle(conn: psycopg.AsyncConnection, send_key: str, status: str) -> int:
    """Move ``send_key``'s reservations to ``spent`` or ``released``; returns rows changed.

    ``spent`` (handed off) applies to ``reserved`` rows only; ``released`` (refunded after
    a proven failure, or a revert, drop or expiry) applies to ``reserved`` and ``spent``
    rows and is final, so repeating either is harmless.
    """
    return await settle_many(conn, [send_key], status)


async def settle_many(conn: psycopg.AsyncConnection, send_keys: Sequence[str], status: str) -> int:
    """:func:`settle` for every key of ``send_keys`` in one statement."""
    statement = _SETTLE.get(status)
    if statement is None:
        raise ValueError(f"a reservation settles as 'spent' or 'released', not {status!r}")
    with translated():
        cur = await conn.execute(statement, (list(send_keys),))
        return cur.rowcount


async def record_gas(
    conn: psycopg.AsyncConnection,
    *,
    tx_hash: str,
    send_key: str,
    network: str,
    relayer: str,
    gas_used: int,
    effective_gas_price: int,
    value: int,
) -> None:
    """Record a mined transaction's gas cost (``gas_used`` x ``effective_gas_price``) and
    the native value it moved, once per ``tx_hash``."""
    await record_gas_many(
        conn, [GasSpent(tx_hash, send_key, network, relayer, gas_used, effective_gas_price, value)]
    )


@dataclass(frozen=True, slots=True)
class GasSpent:
    """What one mined transaction cost, for :func:`record_gas_many`."""

    tx_hash: str
    send_key: str
    network: str
    relayer: str
    gas_used: int
    effective_gas_price: int
    value: int


async def record_gas_many(conn: psycopg.AsyncConnection, spent: Sequence[GasSpent]) -> None:
    """:func:`record_gas` for several transactions in one statement."""
    if not spent:
        return
    rows = [
        (
            item.tx_hash,
            item.send_key,
            item.network,
            item.relayer,
            item.gas_used,
            item.effective_gas_price,
            item.value,
        )
        for item in spent
    ]
    with translated():
        await conn.execute(_RECORD_GAS, columns(rows, 7))


async def gas_spent(
    conn: psycopg.AsyncConnection,
    *,
    networks: Sequence[str] | None,
    relayers: Sequence[str] | None,
    window: timedelta,
) -> int:
    """The gas recorded inside ``window`` on ``networks`` from ``relayers`` (None: any)."""
    with translated():
        cur = await conn.execute(
            _GAS_SPENT,
            {
                "window": window,
                "networks": None if networks is None else list(networks),
                "relayers": None if relayers is None else list(relayers),
            },
        )
        (total,) = await cur.fetchone()
        return int(total)


async def check_gas(conn: psycopg.AsyncConnection, breakers: Sequence[GasBreaker]) -> None:
    """Raise :class:`BudgetExceeded` when a breaker's recorded gas spend has reached its cap.

    A circuit breaker over settled receipts, not a reservation: sends in flight when it
    trips may overshoot the cap by their own gas.
    """
    if not breakers:
        return
    spent = await _gas_by_budget(
        conn, [(b.budget, b.networks, b.relayers, b.window) for b in breakers]
    )
    for breaker in breakers:
        consumed = spent.get(breaker.budget, 0)
        if consumed >= breaker.cap:
            raise BudgetExceeded(
                budget=breaker.budget,
                asset=GAS,
                cap=breaker.cap,
                consumed=consumed,
                amount=0,
                window=breaker.window,
            )


async def usage(conn: psycopg.AsyncConnection, budgets: Mapping[str, Budget]) -> list[BudgetUsage]:
    """Every cap the budgets declare, as it stands now: native, each token, then gas.

    Two queries whatever the number of budgets: one over the reservations, one over the
    gas ledger.
    """
    caps = {name: _value_caps(budget) for name, budget in budgets.items()}
    rows = [
        {"budget": name, "asset": asset, "micros": _micros(budgets[name].window)}
        for name, assets in caps.items()
        for asset, _ in assets
    ]
    scopes = [
        (name, budget.scope.networks, budget.scope.relayers, budget.window)
        for name, budget in budgets.items()
        if budget.max_gas_spend is not None
    ]
    held: dict[tuple[str, str], tuple[int, int]] = {}
    if rows:
        with translated():
            cur = await conn.execute(_USAGE, (Jsonb(rows),))
            for name, asset, reserved, spent in await cur.fetchall():
                held[(name, asset)] = (int(reserved), int(spent))
    gas = await _gas_by_budget(conn, scopes) if scopes else {}
    result = []
    for name, budget in budgets.items():
        figures = [(asset, cap, *held.get((name, asset), (0, 0))) for asset, cap in caps[name]]
        if budget.max_gas_spend is not None:
            figures.append((GAS, budget.max_gas_spend, 0, gas.get(name, 0)))
        for asset, cap, reserved, spent in figures:
            consumed = reserved + spent
            remaining = max(cap - consumed, 0)
            result.append(
                BudgetUsage(name, asset, cap, consumed, reserved, remaining, budget.window)
            )
    return result


async def spend(conn: psycopg.AsyncConnection, *, window: timedelta | None) -> list[SpendRow]:
    """Per network and relayer: transactions, gas paid and value moved inside ``window``
    (all recorded time when None)."""
    with translated():
        cur = await conn.execute(_SPEND, {"window": window})
        return [
            SpendRow(network, relayer, int(count), int(gas), int(value))
            for network, relayer, count, gas, value in await cur.fetchall()
        ]


async def run_charges(conn: psycopg.AsyncConnection, run_id: str) -> list[dict[str, Any]]:
    """The budget charges of ``run_id``'s sends: budget, asset, amount, status, send_key."""
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_RUN_CHARGES, (run_id,))
            rows = await cur.fetchall()
    return [{**row, "amount": int(row["amount"])} for row in rows]


async def charges(
    conn: psycopg.AsyncConnection, budget: str, window: timedelta, limit: int = 5000
) -> list[dict[str, Any]]:
    """The charges ``budget`` counts now, oldest first (``created_at``, ``asset``,
    ``amount``, ``status``, ``run_id``): what its spend over the window is made of."""
    params = {"budget": budget, "window": window, "limit": limit}
    with translated():
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_CHARGES, params)
            rows = await cur.fetchall()
    return [{**row, "amount": int(row["amount"])} for row in rows]


async def _gas_by_budget(
    conn: psycopg.AsyncConnection,
    scopes: Sequence[tuple[str, Sequence[str] | None, Sequence[str] | None, timedelta]],
) -> dict[str, int]:
    rows = [
        {
            "budget": name,
            "networks": None if networks is None else list(networks),
            "relayers": None if relayers is None else list(relayers),
            "micros": _micros(window),
        }
        for name, networks, relayers, window in scopes
    ]
    with translated():
        cur = await conn.execute(_GAS_BY_BUDGET, (Jsonb(rows),))
        return {name: int(total) for name, total in await cur.fetchall()}


def _value_caps(budget: Budget) -> list[tuple[str, int]]:
    """The reserved caps of ``budget``: native value first, then each token."""
    caps = [] if budget.max_native_value is None else [(NATIVE, budget.max_native_value)]
    return caps + list(budget.max_token_value.items())


def _micros(window: timedelta) -> int:
    return window // timedelta(microseconds=1)
