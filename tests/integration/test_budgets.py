"""Durable spend budgets against Postgres: reservations, the rolling window, races, gas."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from psycopg import sql

from rflow import storage
from rflow.budgets import NATIVE, Charge, GasBreaker
from rflow.classify import classify
from rflow.failures import FailureKind
from rflow.lang.model import Budget, BudgetScope
from rflow.storage import budgets
from rflow.storage.budgets import BudgetExceeded, BudgetUsage, SpendRow

pytestmark = pytest.mark.usefixtures("schema")

DAY = timedelta(hours=24)


def native(amount: int, cap: int = 1000, budget: str = "daily") -> Charge:
    return Charge(budget, NATIVE, amount, cap, DAY)


@pytest.fixture
async def conn(settings):
    connection = await storage.connect(settings)
    async with connection:
        yield connection


async def reserve(conn, send_key: str, *charges: Charge, run_id: str | None = None) -> None:
    """Reserve in its own transaction, as the relayer does when it records a send."""
    async with conn.transaction():
        await budgets.reserve(
            conn, send_key=send_key, run_id=run_id, workflow="sweep", charges=charges
        )


async def rows(conn) -> dict[tuple[str, str, str], tuple[int, str]]:
    cur = await conn.execute(
        "SELECT budget, asset, send_key, amount, status FROM budget_reservations"
    )
    return {(b, a, k): (int(amount), s) for b, a, k, amount, s in await cur.fetchall()}


async def test_reserve_settle_and_idempotency(conn):
    await reserve(conn, "s1", native(600), Charge("daily", "USDC", 40, 50, DAY), run_id="r1")
    assert await rows(conn) == {
        ("daily", NATIVE, "s1"): (600, "reserved"),
        ("daily", "USDC", "s1"): (40, "reserved"),
    }
    # A redelivered send is neither charged twice nor checked again.
    await reserve(conn, "s1", native(600), Charge("daily", "USDC", 40, 50, DAY))
    await reserve(conn, "s1", native(900, cap=100))
    assert len(await rows(conn)) == 2

    with pytest.raises(BudgetExceeded) as raised:
        await reserve(conn, "s2", native(500))
    error = raised.value
    assert (error.budget, error.asset, error.cap, error.consumed, error.amount) == (
        "daily",
        NATIVE,
        1000,
        600,
        500,
    )
    assert error.kind is FailureKind.BUDGET_EXCEEDED
    assert error.message == "budget daily: native 600 + 500 would exceed the cap 1000 in 24h"
    assert str(error) == error.message
    assert classify(error) is FailureKind.BUDGET_EXCEEDED

    # A refused send leaves nothing behind, not even its charges that fitted.
    with pytest.raises(BudgetExceeded):
        await reserve(conn, "s3", native(10), Charge("daily", "USDC", 11, 50, DAY))
    assert ("daily", NATIVE, "s3") not in await rows(conn)

    await reserve(conn, "s4", native(400))
    assert await budgets.settle(conn, "s1", "spent") == 2
    assert await budgets.settle(conn, "s1", "spent") == 0
    assert (await rows(conn))[("daily", NATIVE, "s1")] == (600, "spent")
    # Spent still counts inside the window: 600 + 400 is the whole cap.
    with pytest.raises(BudgetExceeded):
        await reserve(conn, "s5", native(1))
    # A zero amount is recorded and never fails, even at the cap.
    await reserve(conn, "s6", native(0))
    assert (await rows(conn))[("daily", NATIVE, "s6")] == (0, "reserved")

    cur = await conn.execute(
        "SELECT count(*) FROM budget_reservations WHERE settled_at IS NOT NULL"
    )
    assert (await cur.fetchone())[0] == 2
    with pytest.raises(ValueError, match="'spent' or 'released'"):
        await budgets.settle(conn, "s1", "reserved")


async def test_released_rows_never_count_and_never_come_back(conn):
    await reserve(conn, "s1", native(900))
    assert await budgets.settle(conn, "s1", "released") == 1
    await reserve(conn, "s2", native(1000))
    assert await budgets.settle(conn, "s1", "spent") == 0
    assert await budgets.settle(conn, "s1", "released") == 0
    # Redelivering the released send does not charge it again.
    await reserve(conn, "s1", native(900))
    assert (await rows(conn))[("daily", NATIVE, "s1")] == (900, "released")
    # A spent send later proven reverted is refunded.
    assert await budgets.settle(conn, "s2", "spent") == 1
    assert await budgets.settle(conn, "s2", "released") == 1
    assert await budgets.settle(conn, "s2", "spent") == 0
    await reserve(conn, "s3", native(1000))


async def test_the_window_rolls_over_spent_rows_but_not_live_ones(conn):
    await conn.execute(
        """
        INSERT INTO budget_reservations (budget, asset, send_key, amount, status, created_at)
        VALUES ('daily', 'native', 'old-spent', 900, 'spent', now() - interval '25 hours'),
               ('daily', 'native', 'old-live', 300, 'reserved', now() - interval '30 days'),
               ('daily', 'native', 'recent', 200, 'spent', now() - interval '23 hours')
        """
    )
    # Counted: the live reservation of any age and the spend inside the window (300 + 200).
    with pytest.raises(BudgetExceeded) as raised:
        await reserve(conn, "s1", native(501))
    assert raised.value.consumed == 500
    await reserve(conn, "s1", native(500))
    [row] = await budgets.usage(conn, {"daily": Budget(window=DAY, max_native_value=1000)})
    assert row == BudgetUsage("daily", NATIVE, 1000, 1000, 800, 0, DAY)


async def test_racing_reservations_never_overshoot_the_cap(settings):
    connections = [await storage.connect(settings) for _ in range(20)]
    try:

        async def attempt(conn, index: int) -> bool:
            try:
                await reserve(conn, f"send-{index}", native(7))
            except BudgetExceeded:
                return False
            return True

        async def worker(conn, indices: range) -> list[bool]:
            return [await attempt(conn, i) for i in indices]

        results = await asyncio.gather(
            *(worker(conn, range(i * 10, i * 10 + 10)) for i, conn in enumerate(connections))
        )
        outcomes = [ok for batch in results for ok in batch]
        assert outcomes.count(True) == 142
        assert outcomes.count(False) == 58
        cur = await connections[0].execute(
            "SELECT count(*), sum(amount) FROM budget_reservations WHERE status = 'reserved'"
        )
        count, total = await cur.fetchone()
        assert (count, int(total)) == (142, 994)
    finally:
        for conn in connections:
            await conn.close()


async def test_a_gas_breaker_trips_once_the_ledger_reaches_its_cap(conn):
    breaker = GasBreaker("solver-gas", 1000, DAY, networks=("ethereum",), relayers=("solver",))
    await budgets.check_gas(conn, [breaker])
    await budgets.record_gas(
        conn,
        tx_hash="0x01",
        send_key="s1",
        network="ethereum",
        relayer="solver",
        gas_used=21,
        effective_gas_price=20,
        value=5,
    )
    # Out of scope: another relayer, another network, a receipt older than the window.
    for tx_hash, network, relayer in (
        ("0x02", "ethereum", "treasury"),
        ("0x03", "base", "solver"),
        ("0x04", "ethereum", "solver"),
    ):
        await budgets.record_gas(
            conn,
            tx_hash=tx_hash,
            send_key="other",
            network=network,
            relayer=relayer,
            gas_used=1000,
            effective_gas_price=1,
            value=0,
        )
    await conn.execute(
        "UPDATE native_spend SET recorded_at = now() - interval '2 days' WHERE tx_hash = '0x04'"
    )
    scoped = await budgets.gas_spent(conn, networks=["ethereum"], relayers=["solver"], window=DAY)
    assert scoped == 420
    assert await budgets.gas_spent(conn, networks=None, relayers=None, window=DAY) == 2420
    assert await budgets.gas_spent(conn, networks=None, relayers=None, window=3 * DAY) == 3420
    await budgets.check_gas(conn, [breaker])

    await budgets.record_gas(
        conn,
        tx_hash="0x05",
        send_key="s2",
        network="ethereum",
        relayer="solver",
        gas_used=29,
        effective_gas_price=20,
        value=0,
    )
    # Recorded once per transaction hash.
    await budgets.record_gas(
        conn,
        tx_hash="0x05",
        send_key="s2",
        network="ethereum",
        relayer="solver",
        gas_used=29,
        effective_gas_price=20,
        value=0,
    )
    with pytest.raises(BudgetExceeded) as raised:
        await budgets.check_gas(conn, [breaker])
    assert (raised.value.asset, raised.value.consumed, raised.value.cap) == ("gas", 1000, 1000)
    assert (
        raised.value.message == "budget solver-gas: gas spend 1000 has reached the cap 1000 in 24h"
    )
    unscoped = GasBreaker("all-gas", 5000, DAY, networks=None, relayers=None)
    await budgets.check_gas(conn, [unscoped])
    with pytest.raises(BudgetExceeded):
        await budgets.check_gas(conn, [unscoped, breaker])


async def test_usage_and_spend(conn):
    project_budgets = {
        "treasury-daily": Budget(
            window=DAY,
            max_native_value=10**19,
            max_token_value={"USDC": 1_000_000, "DAI": 5},
            max_gas_spend=10**18,
            scope=BudgetScope(relayers=["treasury"]),
        ),
        "hourly": Budget(window=timedelta(hours=1), max_native_value=100),
    }
    await reserve(
        conn, "s1", Charge("treasury-daily", NATIVE, 3 * 10**18, 10**19, DAY), run_id="r1"
    )
    await reserve(conn, "s2", Charge("treasury-daily", NATIVE, 10**18, 10**19, DAY))
    await reserve(conn, "s2b", Charge("treasury-daily", "USDC", 250_000, 1_000_000, DAY))
    await budgets.settle(conn, "s1", "spent")
    await budgets.settle(conn, "s2b", "spent")
    await reserve(conn, "s3", Charge("hourly", NATIVE, 60, 100, timedelta(hours=1)))
    await budgets.settle(conn, "s3", "released")
    for tx_hash, relayer, gas_used, value in (
        ("0xa", "treasury", 21_000, 3 * 10**18),
        ("0xb", "treasury", 50_000, 0),
        ("0xc", "solver", 30_000, 7),
    ):
        await budgets.record_gas(
            conn,
            tx_hash=tx_hash,
            send_key=tx_hash,
            network="ethereum",
            relayer=relayer,
            gas_used=gas_used,
            effective_gas_price=10**9,
            value=value,
        )
    await budgets.record_gas(
        conn,
        tx_hash="0xd",
        send_key="0xd",
        network="base",
        relayer="treasury",
        gas_used=1,
        effective_gas_price=1,
        value=1,
    )
    await conn.execute(
        "UPDATE native_spend SET recorded_at = now() - interval '3 days' WHERE tx_hash = '0xd'"
    )

    assert await budgets.usage(conn, project_budgets) == [
        BudgetUsage("treasury-daily", NATIVE, 10**19, 4 * 10**18, 10**18, 6 * 10**18, DAY),
        BudgetUsage("treasury-daily", "USDC", 1_000_000, 250_000, 0, 750_000, DAY),
        BudgetUsage("treasury-daily", "DAI", 5, 0, 0, 5, DAY),
        BudgetUsage("treasury-daily", "gas", 10**18, 71_000 * 10**9, 0, 10**18 - 71 * 10**12, DAY),
        BudgetUsage("hourly", NATIVE, 100, 0, 0, 100, timedelta(hours=1)),
    ]
    assert await budgets.usage(conn, {}) == []

    assert await budgets.spend(conn, window=DAY) == [
        SpendRow("ethereum", "solver", 1, 30_000 * 10**9, 7),
        SpendRow("ethereum", "treasury", 2, 71_000 * 10**9, 3 * 10**18),
    ]
    assert await budgets.spend(conn, window=None) == [
        SpendRow("base", "treasury", 1, 1, 1),
        SpendRow("ethereum", "solver", 1, 30_000 * 10**9, 7),
        SpendRow("ethereum", "treasury", 2, 71_000 * 10**9, 3 * 10**18),
    ]


async def test_amounts_beyond_64_bits_are_exact(conn):
    cap = 2**256 - 1
    await reserve(conn, "big", native(2**200, cap=cap))
    with pytest.raises(BudgetExceeded) as raised:
        await reserve(conn, "bigger", native(cap - 2**200 + 1, cap=cap))
    assert raised.value.consumed == 2**200
    [row] = await budgets.usage(conn, {"daily": Budget(window=DAY, max_native_value=cap)})
    assert (row.consumed, row.remaining) == (2**200, cap - 2**200)


async def test_run_charges_lists_a_runs_reservations(conn):
    await reserve(conn, "s1", native(5), Charge("daily", "USDC", 9, 50, DAY), run_id="r1")
    await reserve(conn, "s2", native(6), run_id="r1")
    await reserve(conn, "s3", native(7), run_id="r2")
    await budgets.settle(conn, "s1", "spent")
    assert await budgets.run_charges(conn, "r1") == [
        {"budget": "daily", "asset": NATIVE, "amount": 5, "status": "spent", "send_key": "s1"},
        {"budget": "daily", "asset": "USDC", "amount": 9, "status": "spent", "send_key": "s1"},
        {"budget": "daily", "asset": NATIVE, "amount": 6, "status": "reserved", "send_key": "s2"},
    ]
    assert await budgets.run_charges(conn, "nope") == []


async def test_the_live_total_follows_every_reservation_change(conn):
    async def live_total() -> tuple[int, int]:
        cur = await conn.execute(
            """
            SELECT (SELECT coalesce(sum(reserved), 0) FROM budget_live),
                   (SELECT coalesce(sum(amount), 0) FROM budget_reservations
                    WHERE status = 'reserved')
            """
        )
        kept, summed = await cur.fetchone()
        return int(kept), int(summed)

    await reserve(conn, "a", native(100), native(5, budget="other"))
    await reserve(conn, "b", native(200))
    await reserve(conn, "c", native(300))
    assert await live_total() == (605, 605)
    await budgets.settle(conn, "a", "spent")  # live -> spent
    assert await live_total() == (500, 500)
    await budgets.settle(conn, "b", "released")  # live -> released
    await budgets.settle(conn, "a", "released")  # spent -> released: live unchanged
    assert await live_total() == (300, 300)
    # A refused reservation leaves no trace in the total.
    with pytest.raises(BudgetExceeded):
        await reserve(conn, "d", native(701))
    assert await live_total() == (300, 300)
    # A reservation written by anything but budget_reserve is counted too (by the trigger).
    await conn.execute(
        "INSERT INTO budget_reservations (budget, asset, send_key, amount) "
        "VALUES ('daily', 'native', 'g', 50)"
    )
    assert await live_total() == (350, 350)
    await conn.execute("DELETE FROM budget_reservations WHERE send_key = 'g'")
    assert await live_total() == (300, 300)
    # The cap check counts the live total: 300 live + 700 = 1000 fits, one more does not.
    await reserve(conn, "e", native(700))
    assert await live_total() == (1000, 1000)
    await reserve(conn, "e", native(700))  # redelivered: answered, not counted again
    assert await live_total() == (1000, 1000)
    with pytest.raises(BudgetExceeded):
        await reserve(conn, "f", native(1))


async def test_reserving_for_a_batch_checks_each_send_after_the_ones_before_it(conn):
    batch = [budgets.Reservation(f"b{i}", f"r{i}", "sweep", [native(300)]) for i in range(4)]
    async with conn.transaction():
        refused = await budgets.reserve_many(conn, batch)
    # 300 + 300 + 300 fits the cap of 1000; the fourth would take it to 1200.
    assert list(refused) == ["b3"]
    assert refused["b3"].consumed == 900
    assert sorted(k for (_, _, k) in await rows(conn)) == ["b0", "b1", "b2"]


async def test_a_batch_send_refused_on_one_of_two_caps_asks_for_one_at_a_time(conn):
    first = budgets.Reservation("one", None, "sweep", [native(100)])
    both = budgets.Reservation(
        "two", None, "sweep", [native(10), Charge("daily", "USDC", 60, 50, DAY)]
    )
    with pytest.raises(_RolledBack):
        async with conn.transaction():
            # The native charge of "two" fits and is reserved, its USDC charge is not:
            # a partial reservation, which the caller must roll back.
            assert await budgets.reserve_many(conn, [first, both]) is None
            assert len(await rows(conn)) == 2
            raise _RolledBack
    assert await rows(conn) == {}


class _RolledBack(Exception):
    pass


async def function_scan_buffers(conn, send_key: str) -> int:
    """The buffers one reservation touches (EXPLAIN ANALYZE of one call, trigger included)."""
    cur = await conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM budget_reserve("
        "'daily', 'native', %s, 1, 1000000, interval '1 day', NULL, 'sweep')",
        (send_key,),
    )
    [[[plan]]] = await cur.fetchall()
    top = plan["Plan"]
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"]


async def test_a_reservation_reads_its_indexes_whatever_the_statistics_say(conn):
    # Statistics taken after the table was emptied say it holds nothing; the session's
    # cached plans are made from them and kept while a burst of sends fills it.
    for i in range(300):
        await budgets.reserve(
            conn, send_key=f"old-{i}", run_id=None, workflow="sweep", charges=[native(1, 10**6)]
        )
    await conn.execute("DELETE FROM budget_reservations")
    await conn.execute("VACUUM ANALYZE budget_reservations")
    for i in range(3000):
        await budgets.reserve(
            conn, send_key=f"new-{i}", run_id=None, workflow="sweep", charges=[native(1, 10**6)]
        )
    # A scan of the budget's 3000 live rows touches 85 pages; its indexes, about 20.
    assert await function_scan_buffers(conn, "probe") < 40
    cur = await conn.execute("SELECT reserved FROM budget_live WHERE budget = 'daily'")
    assert await cur.fetchone() == (3001,)  # the probe was reserved too


async def test_the_budget_functions_find_their_tables_from_any_search_path(settings, conn):
    await reserve(conn, "a", native(600))
    other = await storage.connect(settings)
    async with other:
        await other.execute("SET search_path TO public")
        cur = await other.execute(
            sql.SQL(
                "SELECT inserted, consumed FROM {}.budget_reserve("
                "'daily', 'native', 'b', 500, 1000, interval '1 day', NULL, 'sweep')"
            ).format(sql.Identifier(settings.database_schema))
        )
        assert await cur.fetchone() == (False, 600)  # the live 600 + 500 > 1000
        await other.execute(
            sql.SQL("DELETE FROM {}.budget_reservations").format(
                sql.Identifier(settings.database_schema)
            )
        )
    cur = await conn.execute("SELECT reserved FROM budget_live")
    assert [int(r) for (r,) in await cur.fetchall()] == [0]
