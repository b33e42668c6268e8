"""Backtests: the last reports of ``rflow backtest`` (and ``rflow deploy --backtest``),
and each one's diff, in the same words as the CLI's report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rflow.backtest import report as words
from rflow.codecs.backtests import decode_report
from rflow.storage import backtests

if TYPE_CHECKING:
    from rflow.console.web import Console, Visit

SHOWN = 30


def attach(console: Console) -> None:
    """Mount the backtests pages."""

    async def list_page(visit: Visit) -> Any:
        rows = await console.db(lambda conn: backtests.recent(conn, SHOWN), "backtests")
        return console.render(
            visit,
            "backtests.html",
            active="backtests",
            backtests=rows,
            words=words,
            waiting=await console.approvals_waiting(),
        )

    async def backtest_page(visit: Visit) -> Any:
        raw = visit.params["backtest_id"]
        found = None
        if raw.isdigit() and len(raw) < 19:
            found = await console.db(lambda conn: backtests.get(conn, int(raw)), "backtest")
        if found is None:
            return console.render(
                visit,
                "missing.html",
                status=404,
                active="backtests",
                what=f"There is no backtest {raw!r}.",
                waiting=await console.approvals_waiting(),
            )
        return console.render(
            visit,
            "backtest.html",
            active="backtests",
            id=found["id"],
            report=decode_report(found["report"]),
            words=words,
            waiting=await console.approvals_waiting(),
        )

    console.route("/backtests", get=list_page, needs="backtests.read")
    console.route("/backtests/{backtest_id}", get=backtest_page, needs="backtests.read")
