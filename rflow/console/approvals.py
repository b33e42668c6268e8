"""Approvals: the inbox of pending approvals, most urgent first, answered as the
signed-in principal (the forms post to the run's approve and reject actions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rflow import approvals
from rflow.authz import Target
from rflow.storage import waits

if TYPE_CHECKING:
    from rflow.console.web import Console, Visit


def attach(console: Console) -> None:
    """Mount the inbox."""

    async def inbox(visit: Visit) -> Any:
        workflow = visit.query.get("workflow") or None
        mine = visit.query.get("mine") == "yes"
        rows = await console.db(
            lambda conn: waits.pending_approvals(
                conn,
                workflow=workflow,
                approver=visit.principal.name if mine else None,
                limit=500,
            ),
            "approvals",
        )
        entries = []
        for row in rows:
            entry = approvals.inbox_entry(row)
            entry["may_answer"] = may_answer(visit, row)
            entries.append(entry)
        return console.render(
            visit,
            "approvals.html",
            active="approvals",
            approvals=entries,
            workflow=workflow,
            mine=mine,
            waiting=await console.approvals_waiting(),
            live=True,
        )

    console.route("/approvals", get=inbox, needs="runs.read")


def may_answer(visit: Visit, row: Mapping[str, Any]) -> bool:
    """Whether the signed-in principal may answer this pending approval (a ``waits`` row):
    the decision :mod:`rflow.authz` makes, its ``approvers`` included."""
    approvers = tuple(((row["spec"] or {}).get("approval") or {}).get("approvers") or ())
    target = Target("approval", f"{row['run_id']} {row['path']}", approvers)
    return visit.may("approvals.answer", target)
