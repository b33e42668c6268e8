"""The audit trail: every operator action taken, and every attempt refused, newest first,
filtered by principal, action (or family), outcome and time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rflow import authz
from rflow.audit import OUTCOMES, since_of, target_text
from rflow.console import present
from rflow.storage import audit

if TYPE_CHECKING:
    from rflow.console.web import Console, Visit

LIMIT = 200


def attach(console: Console) -> None:
    """Mount the audit page."""

    async def page(visit: Visit) -> Any:
        query = visit.query
        problems = []
        principal = query.get("principal") or None
        action = query.get("action") or None
        outcome = query.get("outcome") or None
        if outcome is not None and outcome not in OUTCOMES:
            problems.append(f"unknown outcome {outcome!r}: showing every outcome")
            outcome = None
        try:
            since = since_of(query.get("since"), present.now())
        except ValueError as exc:
            problems.append(f"{exc}: showing any time")
            since = None
        rows = await console.db(
            lambda conn: audit.listing(
                conn,
                principal=principal,
                action=action,
                since=since,
                outcome=outcome,
                limit=LIMIT,
            ),
            "audit trail",
        )
        return console.render(
            visit,
            "audit.html",
            active="audit",
            entries=rows,
            chosen={
                "principal": principal,
                "action": action,
                "outcome": outcome,
                "since": query.get("since") or "",
            },
            actions=list(authz.ACTIONS),
            outcomes=OUTCOMES,
            problems=problems,
            target_text=target_text,
            limit=LIMIT,
            waiting=await console.approvals_waiting(),
        )

    console.route("/audit", get=page, needs="audit.read")
