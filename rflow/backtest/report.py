"""A backtest's report in words: the summary tables first, then each run that differs.

The CLI prints :func:`text`; the console shows the same sentences (each built by one
function here) in its pages. Native amounts read as ether, exact to the wei
(``0.0015 ether``, ``7 wei``); token amounts are in the token's raw units, as budgets
count them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from rflow.codecs.backtests import BacktestReport, Mark, RunDiff, Send, SendChange, Side, StepChange

MARK_WORDS = {
    "unrecorded": "request the original run never made (no answer)",
    "latest": "read or simulated at the latest block (no archive state)",
    "assumed": "wait answered by --assume",
    "no_answer": "wait without a recorded answer (its timeout applies)",
    "live": "GET sent for real (--live-http)",
    "state": "reads durable state (none kept from before the window)",
    "not_simulated": "effect without a simulation",
    "unknown_sender": "send simulated without its relayer's address",
    "reconstructed": "firing rebuilt from the read model",
    "drift": "deployed version's replay differs from what the run did",
}
"""Each mark in a few words (docs/backtest.md says more)."""


def when(at: datetime) -> str:
    """A time as the report writes it, with its weekday (UTC)."""
    return at.astimezone(UTC).strftime("%a %Y-%m-%d %H:%M:%S UTC")


def ether(wei: int) -> str:
    """Wei as ether, exact to the wei: ``0.0005 ether``, ``0.000218117220594 ether``."""
    if not wei:
        return "0"
    return f"{format(Decimal(wei).scaleb(-18).normalize(), 'f')} ether"


def amount(asset: str, value: int) -> str:
    """``value`` of ``asset``: native value and gas in ether (exact), tokens in raw units."""
    if asset in ("native", "gas"):
        return ether(value)
    return f"{value} {asset}"


def change(old: int, new: int, asset: str) -> str:
    if old == new:
        return "="
    sign = "+" if new > old else "-"
    return sign + amount(asset, abs(new - old))


def send_line(send: Send, *, outcome: bool = True) -> str:
    """One send: what it moves, where to, and (``outcome``) how it ends."""
    if send.token_amount is not None and send.contract:
        what = f"{send.token_amount} {send.contract} to {send.recipient}"
        if send.value:
            what += f" (+{amount('native', send.value)})"
    elif send.function:
        what = f"{send.function} on {send.contract or send.to}"
        if send.value:
            what += f" with {amount('native', send.value)}"
    else:
        what = f"{amount('native', send.value)} to {send.to}"
    where = f" from {send.relayer} on {send.network}"
    if send.outcome == "sent" or not outcome:
        end = ""
    elif send.outcome == "refused":
        end = f", refused {send.error_kind}: {send.error}"
    else:
        end = f", {send.outcome} ({send.error_kind}: {send.error})"
    return f"{send.path}: {what}{where}{end}"


def change_line(found: SendChange) -> str:
    """One send added, removed or changed, the change first."""
    return f"{found.change:<8} {change_text(found)}"


def change_text(found: SendChange) -> str:
    """What one send change is: the send, and for a change what differs."""
    if found.change == "added":
        return send_line(found.new)
    if found.change == "removed":
        return send_line(found.old)
    old, new = found.old, found.new
    parts: list[str] = []
    for name in found.what:
        if name == "value":
            parts.append(f"value {amount('native', old.value)} → {amount('native', new.value)}")
        elif name == "token_amount":
            asset = new.contract or old.contract or ""
            parts.append(
                f"amount {_maybe(old.token_amount, asset)} → {_maybe(new.token_amount, asset)}"
            )
        elif name == "outcome":
            parts.append(f"outcome {_ending(old)} → {_ending(new)}")
            if new.error:
                parts.append(new.error)
        elif name == "data":
            parts.append("call data")
        else:
            parts.append(f"{name} {getattr(old, name)} → {getattr(new, name)}")
    return f"{send_line(new, outcome=False)}: " + "; ".join(parts)


def _maybe(value: int | None, asset: str) -> str:
    return "-" if value is None else amount(asset, value)


def _ending(send: Send) -> str:
    if send.outcome == "sent":
        return "sent"
    return f"{send.outcome} {send.error_kind}"


def side_line(side: Side) -> str:
    """A run's status on one side, with why when it has a reason."""
    text = side.status
    if side.error_kind:
        text += f" ({side.error_kind}: {side.error})"
    elif side.reason and side.status in ("not_started", "incomplete", "pending", "waiting"):
        text += f" ({side.reason})"
    return text


def step_line(found: StepChange) -> str:
    def shown(step) -> str:
        if step is None:
            return "not taken"
        return step.status + (f" ({step.error_kind})" if step.error_kind else "")

    return f"{found.path}: {shown(found.old)} → {shown(found.new)}"


def mark_line(mark: Mark) -> str:
    where = f" at {mark.path}" if mark.path else ""
    side = "" if mark.side == "both" else f" [{mark.side}]"
    return f"{mark.kind}{side}{where}: {mark.text}"


def headline(report: BacktestReport) -> str:
    """The verdict in one sentence."""
    if report.outcome == "failed":
        return f"The backtest could not run: {report.reason}"
    if report.outcome == "same" and not report.firings:
        return (
            "No firing of these workflows in the window: nothing was compared (exit 0 says "
            "nothing differs, not that the candidate was tried; widen --since, or backtest "
            "where the workflows fire)."
        )
    if report.outcome == "same":
        return f"No difference: the candidate does what the deployed version does with all {report.firings} firings."
    money = "; money moves differently" if report.money_moves else "; no money moves differently"
    count = len(report.runs)
    return f"{count} run{'s' if count != 1 else ''} differ{'s' if count == 1 else ''}{money}."


def run_heading(run: RunDiff) -> str:
    return (
        f"Run {run.run_id} of {run.workflow} (firing {run.trigger_key}, {when(run.fired_at)}"
        + (", rebuilt from the read model" if run.origin == "read_model" else "")
        + ")"
    )


def text(report: BacktestReport) -> str:
    """The whole report, for a terminal."""
    lines = [
        f"Backtest of {report.candidate} against "
        + (
            f"deployment {report.deployment}"
            if report.deployment is not None
            else "nothing deployed"
        ),
        f"Window {when(report.window_from)} → {when(report.window_to)}: {report.firings} firings"
        + (
            f" ({report.from_topic} from the triggers topic, {report.from_read_model} rebuilt "
            "from the read model)"
            if report.from_read_model
            else ""
        ),
        headline(report),
    ]
    if report.outcome == "failed":
        return "\n".join(lines)
    if report.summary:
        rows = [
            [
                s.workflow,
                s.firings,
                s.differing,
                pair(s.started),
                pair(s.failed),
                pair(s.sends),
                pair(s.refused),
                s.added,
                s.removed,
                s.changed,
            ]
            for s in report.summary
        ]
        header = ["WORKFLOW", "FIRINGS", "DIFFER", "STARTED", "FAILED", "SENDS", "REFUSED"]
        lines += ["", table(rows, [*header, "ADDED", "REMOVED", "CHANGED"])]
    if report.spend:
        rows = [
            [
                r.budget,
                r.asset,
                amount(r.asset, r.old),
                amount(r.asset, r.new),
                change(r.old, r.new, r.asset),
            ]
            for r in report.spend
        ]
        lines += ["", table(rows, ["BUDGET", "ASSET", "DEPLOYED", "CANDIDATE", "CHANGE"])]
    if report.moved:
        rows = [
            [
                r.relayer,
                r.network,
                r.asset,
                amount(r.asset, r.old),
                amount(r.asset, r.new),
                change(r.old, r.new, r.asset),
            ]
            for r in report.moved
        ]
        lines += [
            "",
            table(rows, ["RELAYER", "NETWORK", "MOVES", "DEPLOYED", "CANDIDATE", "CHANGE"]),
        ]
    if report.marks:
        lines += ["", "Not reproduced exactly (see each run below, and docs/backtest.md):"]
        lines += [
            f"  {count} {kind}: {MARK_WORDS.get(kind, kind)}"
            for kind, count in report.marks.items()
        ]
    for run in report.runs:
        lines += ["", *run_lines(run)]
    if report.drift:
        lines += ["", "The deployed version's replay differs from what these runs did:"]
        lines += [f"  {d.run_id} ({d.workflow}): {d.text}" for d in report.drift]
    if report.notes:
        lines += ["", *(f"Note: {note}" for note in report.notes)]
    return "\n".join(lines)


def run_lines(run: RunDiff) -> list[str]:
    """One differing run: status, then its sends, steps and marks."""
    lines = [run_heading(run)]
    status = f"  status: {side_line(run.old)} → {side_line(run.new)}"
    if run.start == "would_not_start":
        status += "  [would not start]"
    elif run.start == "would_start":
        status += "  [would start]"
    if run.failure is not None:
        status += f"  [failure {run.failure}]"
    lines.append(status)
    if run.delay is not None:
        later = "later" if run.delay > 0 else "earlier"
        waited = "; ".join(run.new.waited or run.old.waited)
        lines.append(
            f"  starts {_duration(abs(run.delay))} {later}"
            + (f" (waiting for {waited})" if waited else "")
        )
    if run.sends:
        lines.append("  sends:")
        lines += [f"    {change_line(found)}" for found in run.sends]
    if run.steps:
        lines.append("  steps:")
        lines += [f"    {step_line(found)}" for found in run.steps]
    if run.marks:
        lines.append("  not reproduced exactly:")
        lines += [f"    {mark_line(mark)}" for mark in run.marks]
    return lines


def table(rows: list[list[object]], header: list[str]) -> str:
    """Rows under a header, in columns as wide as their widest cell."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


def _duration(seconds: float) -> str:
    from datetime import timedelta

    from rflow.lang.units import format_duration

    return format_duration(timedelta(seconds=round(seconds)))


def pair(counts: tuple[int, int]) -> str:
    """Deployed → candidate counts (one number when they are equal)."""
    old, new = counts
    return str(old) if old == new else f"{old} → {new}"
