"""Runs: the list (filtered, live), one run as a timeline, and its actions (retry, cancel,
approve, reject)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rflow import approvals, runtree
from rflow.console import present
from rflow.console.approvals import may_answer
from rflow.console.auth import PREFIX
from rflow.engine import RunStatus
from rflow.storage import budgets, runs, send_controls, sends, waits
from rflow.streams.control import resume_urls

if TYPE_CHECKING:
    from rflow.console.web import Console, Visit

STATUSES = [status.value for status in RunStatus]
SOURCES = ("event", "webhook", "schedule", "manual", "workflow")
SINCE = {
    "15m": ("the last 15 minutes", timedelta(minutes=15)),
    "1h": ("the last hour", timedelta(hours=1)),
    "24h": ("the last 24 hours", timedelta(hours=24)),
    "7d": ("the last 7 days", timedelta(days=7)),
}
"""The time filter's choices: runs admitted within each span."""
LIMITS = (50, 200, 1000)


def _filters(visit: Visit) -> tuple[dict[str, Any], list[str]]:
    """The list's filters from the query, and what was wrong with any of them."""
    query = visit.query
    problems = []
    chosen: dict[str, Any] = {
        key: (query.get(key) or None)
        for key in ("workflow", "status", "source", "since", "until", "limit")
    }
    if chosen["status"] is not None and chosen["status"] not in STATUSES:
        problems.append(f"unknown status {chosen['status']!r}: showing every status")
        chosen["status"] = None
    if chosen["source"] is not None and chosen["source"] not in SOURCES:
        problems.append(f"unknown trigger source {chosen['source']!r}: showing every source")
        chosen["source"] = None
    if chosen["since"] is not None and chosen["since"] not in SINCE:
        problems.append(f"unknown time span {chosen['since']!r}: showing any time")
        chosen["since"] = None
    if chosen["until"] is not None:
        try:
            until = datetime.fromisoformat(chosen["until"])
        except ValueError:
            problems.append(f"{chosen['until']!r} is not a date and time: ignored")
            chosen["until"] = None
        else:
            chosen["until_at"] = until if until.tzinfo else until.replace(tzinfo=UTC)
    try:
        chosen["limit"] = int(chosen["limit"] or LIMITS[0])
    except ValueError:
        chosen["limit"] = LIMITS[0]
    chosen["limit"] = min(max(chosen["limit"], 1), LIMITS[-1])
    return chosen, problems


def attach(console: Console) -> None:
    """Mount the runs pages and actions."""
    control = console.control

    async def list_page(visit: Visit) -> Any:
        chosen, problems = _filters(visit)
        since = SINCE[chosen["since"]][1] if chosen["since"] else None
        rows = await console.db(
            lambda conn: runs.list_runs(
                conn,
                workflow=chosen["workflow"],
                status=chosen["status"],
                source=chosen["source"],
                since=present.now() - since if since else None,
                until=chosen.get("until_at"),
                limit=chosen["limit"],
            ),
            "runs",
        )
        project = console.runtime.project
        names = sorted(set(project.workflows if project else ()) | {r["workflow"] for r in rows})
        return console.render(
            visit,
            "runs.html",
            active="runs",
            runs=rows,
            chosen=chosen,
            problems=problems,
            workflows=names,
            statuses=STATUSES,
            sources=SOURCES,
            spans=SINCE,
            limits=LIMITS,
            waiting=await console.approvals_waiting(),
            live=True,
            refresh_no_js=True,
        )

    async def run_page(visit: Visit) -> Any:
        run_id = visit.params["run_id"]

        async def load(conn: Any) -> tuple[Any, ...]:
            run = await runs.get_run(conn, run_id)
            if run is None:
                return None, [], [], [], [], ([], 0)
            charges = await budgets.run_charges(conn, run_id)
            transactions = await sends.of_run(conn, run_id)
            transactions += [
                {
                    "send_id": d.send_id,
                    "step": d.path,
                    "relayer": d.relayer,
                    "network": d.network,
                    "status": "waiting",
                    "waiting_for": d.reason,
                    "deferred": True,
                }
                for d in await sends.deferrals(conn, run_id=run_id)
            ]
            asked = await send_controls.of_run(conn, run_id)
            open_approvals = await waits.pending_approvals(conn, run_id=run_id)
            combinations = await runs.matrix_runs(conn, run)
            return run, charges, transactions, asked, open_approvals, combinations

        (
            run,
            charges,
            transactions,
            asked,
            open_approvals,
            (combinations, combined),
        ) = await console.db(load, "run")
        if run is None:
            return console.render(
                visit,
                "missing.html",
                status=404,
                active="runs",
                what=f"There is no run {run_id}.",
                waiting=await console.approvals_waiting(),
            )
        resume = None
        if run["settled_at"] is None and visit.may("approvals.answer"):
            # A resume URL answers a wait: shown to whoever may answer.
            base = console.settings.base_url
            resume = await console.db(lambda conn: resume_urls(conn, run_id, base), "resume URLs")
        steps = run["steps"]
        rows = runtree.rows(steps)
        bars = present.timeline([row.step for row in rows], run["started_at"], run["settled_at"])
        forks = {fork.step["path"]: fork for fork in runtree.forks(steps)}
        failed = [s for s in steps if s["status"] == "failed" and s["error_kind"]]
        retried = [s for s in steps if (s["attempt"] or 1) > 1]
        entries = []
        for row in open_approvals:
            entry = approvals.inbox_entry(row)
            entry["may_answer"] = may_answer(visit, row)
            entries.append(entry)
        return console.render(
            visit,
            "run.html",
            active="runs",
            run=run,
            steps=list(zip(rows, bars, strict=True)),
            forks=forks,
            failed_step=failed[-1] if failed else None,
            retried_steps=retried,
            charges=charges,
            transactions=transactions,
            asked=asked,
            approvals=entries,
            webhook_waits=resume,
            combinations=combinations,
            combined=combined,
            settled=run["settled_at"] is not None,
            waiting=await console.approvals_waiting(),
            live=run["settled_at"] is None,
            refresh_no_js=run["settled_at"] is None and not entries,
        )

    async def retry(visit: Visit) -> Any:
        run_id = visit.params["run_id"]

        def said(result: dict[str, Any]) -> str:
            if result["already"]:
                return (
                    f"Run {run_id} was already retried as {result['retried_as']} "
                    f"({result['status']}): nothing new was started."
                )
            return (
                f"Retrying run {run_id} as {result['retried_as']}, from step "
                f"{result['from_step']} (keeping {len(result['kept'])} settled step(s))."
            )

        async def work() -> Any:
            return await control.retry(
                run_id,
                visit.text("from"),
                confirm=visit.text("yes") == "yes",
                who=visit.principal,
                via="console",
            )

        return await console.act(visit, work, said, to=f"{PREFIX}/runs/{run_id}")

    async def cancel(visit: Visit) -> Any:
        run_id = visit.params["run_id"]
        reason = visit.text("reason")

        def said(result: dict[str, Any]) -> str:
            pending = result["pending_sends"]
            tail = (
                f" Its unsettled send(s) {', '.join(pending)} finish first (cancel them on "
                "the Sends page to stop them sooner)."
                if pending
                else ""
            )
            return f"Asked run {run_id} to stop at its next step ({reason or 'no reason'}).{tail}"

        return await console.act(
            visit,
            lambda: control.cancel(run_id, reason, visit.principal.name),
            said,
            to=f"{PREFIX}/runs/{run_id}",
        )

    def decide(decision: approvals.Decision) -> Any:
        async def answer(visit: Visit) -> Any:
            run_id = visit.params["run_id"]

            def said(result: dict[str, Any]) -> str:
                answer = result["answer"]
                extra = f" ({answer['choice']})" if answer.get("choice") else ""
                verb = "Approved" if decision == "approve" else "Rejected"
                return f"{verb}{extra} step {result['step']} of run {run_id} as {answer['by']}."

            async def work() -> Any:
                return await control.decide(
                    run_id,
                    visit.text("step"),
                    decision,
                    visit.principal,
                    choice=visit.text("choice"),
                    text=visit.text("text"),
                    via="console",
                )

            return await console.act(visit, work, said)

        return answer

    console.route("/runs", get=list_page, needs="runs.read")
    console.route("/runs/{run_id}", get=run_page, needs="runs.read")
    console.route("/runs/{run_id}/retry", post=retry, needs="runs.retry")
    console.route("/runs/{run_id}/cancel", post=cancel, needs="runs.cancel")
    console.route("/runs/{run_id}/approve", post=decide("approve"), needs="approvals.answer")
    console.route("/runs/{run_id}/reject", post=decide("reject"), needs="approvals.answer")
