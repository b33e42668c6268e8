"""Budgets: each cap with what is consumed, reserved and remaining in its window, as bars,
and the spend over the window as a chart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rflow.console import present
from rflow.storage import budgets

if TYPE_CHECKING:
    from rflow.console.web import Console, Visit


def attach(console: Console) -> None:
    """Mount the budgets page."""

    async def page(visit: Visit) -> Any:
        project = console.runtime.project
        declared = project.budgets if project else {}

        async def load(conn: Any) -> tuple[Any, dict[str, Any]]:
            usage = await budgets.usage(conn, declared) if declared else []
            charges = {
                name: await budgets.charges(conn, name, budget.window)
                for name, budget in declared.items()
            }
            return usage, charges

        usage, charges = await console.db(load, "budgets")
        at = present.now()
        shown = []
        for name, budget in declared.items():
            caps = [row for row in usage if row.budget == name]
            value_caps = {row.asset: row.cap for row in caps if row.asset != budgets.GAS}
            series = present.spend_series(charges[name], value_caps, at - budget.window, at)
            shown.append(
                {
                    "name": name,
                    "window": budgets.format_window(budget.window),
                    "scope": budget.scope,
                    "caps": [
                        {
                            "row": row,
                            "spent": row.consumed - row.reserved,
                            "spent_pct": present.percent(row.consumed - row.reserved, row.cap),
                            "reserved_pct": present.percent(row.reserved, row.cap),
                            "used_pct": present.percent(row.consumed, row.cap),
                        }
                        for row in caps
                    ],
                    "series": [_chart(s) for s in series],
                    "recent": list(reversed(charges[name][-10:])),
                }
            )
        return console.render(
            visit,
            "budgets.html",
            active="budgets",
            budgets=shown,
            charts=bool(shown),
            waiting=await console.approvals_waiting(),
            live=True,
        )

    console.route("/budgets", get=page, needs="runs.read")


def _chart(series: present.SpendSeries) -> dict[str, Any]:
    """One cap's series as the chart draws it: native value in ETH, tokens in units."""
    scale = present.WEI_PER_ETHER if series.asset == "native" else 1
    return {
        "label": present.asset_label(series.asset),
        "cap": series.cap / scale,
        "times": series.times,
        "totals": [total / scale for total in series.totals],
    }
