"""What the candidate does differently: run by run, then in totals. Pure.

The rules, one function each:

- :func:`pair_sends`: a send is the same when it goes to the same place with the same
  value, call data and outcome, wherever it is in the run (a recipient added at the front
  of a list shifts every path; it changes no other send). What is left is paired by step
  path, then by recipient, and the rest is added or removed.
- :func:`diff_run`: a run differs when it would start on one side only, ends in another
  status, takes a step with another outcome (or a step the other does not take), or
  sends differently. A failure appears, disappears or changes with the run's status.
- :func:`drift`: the deployed version's replay beside what the run really did.
- :func:`summarize`, :func:`spend`, :func:`moved`: the totals the report begins with.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from rflow.backtest.history import RecordedRun
from rflow.backtest.outcome import Outcome
from rflow.codecs.backtests import (
    Drift,
    Mark,
    MovedRow,
    RunDiff,
    Send,
    SendChange,
    Side,
    SpendRow,
    Step,
    StepChange,
    WorkflowSummary,
)

COMPARED = ("network", "relayer", "to", "value", "recipient", "token_amount", "contract")
"""The fields of a send that say where money goes and how much."""
SHOWN_CHANGES = (*COMPARED, "function", "data", "outcome")
OUT = frozenset({"sent", "reverted"})
"""Sends that would reach the chain."""


def side(outcome: Outcome | None, absent: str) -> Side:
    """One version's run as the report shows it."""
    if outcome is None:
        return Side(status="not_started", reason=absent)
    error = outcome.error
    return Side(
        status=outcome.status,
        reason=outcome.reason,
        error_kind=str(error.kind) if error is not None else None,
        error=error.message if error is not None else None,
        started_at=outcome.started_at,
        waited=list(outcome.waited),
        steps=list(outcome.steps.values()),
        sends=list(outcome.sends),
    )


def _value(send: Send, name: str) -> Any:
    value = getattr(send, name)
    return value.lower() if name in ("to", "recipient") and isinstance(value, str) else value


def _content(send: Send) -> tuple[Any, ...]:
    return (
        *(_value(send, name) for name in COMPARED),
        send.data_digest,
        send.outcome,
        send.error_kind,
    )


def _who(send: Send) -> str:
    return (send.recipient or send.to or "").lower()


def pair_sends(old: list[Send], new: list[Send]) -> list[SendChange]:
    """The sends added, removed and changed from ``old`` to ``new``."""
    left = list(old)
    unmatched_new: list[Send] = []
    for send in new:
        match = next((o for o in left if _content(o) == _content(send)), None)
        if match is not None:
            left.remove(match)
        else:
            unmatched_new.append(send)
    changes: list[SendChange] = []
    rest: list[Send] = []
    for send in unmatched_new:
        match = next((o for o in left if o.path == send.path), None)
        if match is None:
            match = next((o for o in left if _who(o) and _who(o) == _who(send)), None)
        if match is None:
            rest.append(send)
            continue
        left.remove(match)
        changes.append(
            SendChange(
                change="changed", path=send.path, old=match, new=send, what=_fields(match, send)
            )
        )
    changes += [SendChange(change="added", path=send.path, new=send) for send in rest]
    changes += [SendChange(change="removed", path=send.path, old=send) for send in left]
    return changes


def _fields(old: Send, new: Send) -> list[str]:
    what = [name for name in COMPARED if _value(old, name) != _value(new, name)]
    if old.function != new.function:
        what.append("function")
    if old.data_digest != new.data_digest and not {"recipient", "token_amount"} & set(what):
        what.append("data")
    if old.outcome != new.outcome or old.error_kind != new.error_kind:
        what.append("outcome")
    return what


def step_changes(old: Outcome | None, new: Outcome | None) -> list[StepChange]:
    """Steps taken by one version only, or with another status or failure."""
    before = old.steps if old is not None else {}
    after = new.steps if new is not None else {}
    changes = []
    for key in [*before, *(k for k in after if k not in before)]:
        a, b = _taken(before.get(key)), _taken(after.get(key))
        if a is None and b is None:
            continue  # skipped on one side, not there on the other: taken by neither
        if a is not None and b is not None and (a.status, a.error_kind) == (b.status, b.error_kind):
            continue
        changes.append(
            StepChange(path=key[0] if key[1] <= 1 else f"{key[0]}#{key[1]}", old=a, new=b)
        )
    return changes


def _taken(step: Step | None) -> Step | None:
    return None if step is None or step.status == "skipped" else step


def diff_run(
    run_id: str, old: Outcome | None, new: Outcome | None, marks: list[Mark]
) -> RunDiff | None:
    """How the candidate's run differs from the deployed version's, or ``None``."""
    either = new or old
    assert either is not None
    firing = either.firing
    old_side = side(old, "the deployed version has no such run")
    new_side = side(new, "the candidate has no such run")
    started = (old is not None and old.started, new is not None and new.started)
    start = None
    if started == (True, False):
        start = "would_not_start"
    elif started == (False, True):
        start = "would_start"
    failure = None
    failed = (old_side.status == "failed", new_side.status == "failed")
    if failed == (False, True):
        failure = "appears"
    elif failed == (True, False):
        failure = "disappears"
    elif failed == (True, True) and (old_side.error_kind, old_side.error) != (
        new_side.error_kind,
        new_side.error,
    ):
        failure = "changes"
    steps = step_changes(old, new)
    sends = pair_sends(old_side.sends, new_side.sends)
    delay = None
    if old_side.started_at is not None and new_side.started_at is not None:
        seconds = (new_side.started_at - old_side.started_at).total_seconds()
        delay = seconds if seconds else None
    differs = (
        delay is not None
        or start is not None
        or failure is not None
        or old_side.status != new_side.status
        or (old_side.status == "not_started" and old_side.reason != new_side.reason)
        or steps
        or sends
    )
    if not differs:
        return None
    return RunDiff(
        run_id=run_id,
        workflow=either.workflow,
        trigger_key=firing.record.trigger_key,
        fired_at=firing.at,
        origin=firing.origin,
        old=old_side,
        new=new_side,
        start=start,
        failure=failure,
        delay=delay,
        steps=steps,
        sends=sends,
        money=bool(sends),
        marks=marks,
    )


def marks_of(old: Outcome | None, new: Outcome | None) -> list[Mark]:
    """Both versions' marks, a mark both have once (as ``both``)."""
    found: list[Mark] = []
    before = old.marks if old is not None else []
    after = new.marks if new is not None else []
    for mark in before:
        twin = mark.model_copy(update={"side": "candidate"})
        same = any(m.model_copy(update={"side": "candidate"}) == twin for m in after)
        found.append(mark.model_copy(update={"side": "both"}) if same else mark)
    for mark in after:
        twin = mark.model_copy(update={"side": "deployed"})
        if not any(m.model_copy(update={"side": "deployed"}) == twin for m in before):
            found.append(mark)
    return found


def drift(deployed: Outcome, recorded: RecordedRun, version: str | None) -> Drift | None:
    """How the deployed version's replay of a run differs from what the run did, if it
    does (a run still in flight is not compared)."""
    if recorded.status in ("running", "waiting", "pending"):
        return None
    replayed = deployed.status if deployed.status != "not_started" else _never(deployed)
    real = {(send.to.lower(), send.value) for send in recorded.sends if send.status == "succeeded"}
    shown = {(send.to.lower(), send.value) for send in deployed.sends if send.outcome == "sent"}
    parts = []
    if replayed != recorded.status:
        parts.append(f"it ended {recorded.status}, the replay {replayed}")
    if real != shown:
        parts.append(
            f"it made {len(real)} sends, the replay {len(shown)}"
            if len(real) != len(shown)
            else "its sends went elsewhere or moved other amounts"
        )
    if not parts:
        return None
    if version is not None and recorded.version != version:
        parts.append(f"it ran version {recorded.version}, the deployed one is {version}")
    return Drift(run_id=recorded.run_id, workflow=recorded.workflow, text="; ".join(parts))


def _never(outcome: Outcome) -> str:
    reason = outcome.reason or ""
    for status in ("skipped", "cancelled"):
        if reason.startswith(status):
            return status
    return "not_started"


def summarize(
    workflows: Iterable[str],
    firings: Mapping[str, int],
    old: Mapping[str, Outcome],
    new: Mapping[str, Outcome],
    runs: list[RunDiff],
) -> list[WorkflowSummary]:
    """One line per workflow: firings, runs that differ, and deployed → candidate counts."""
    rows = []
    for name in workflows:
        before = [o for o in old.values() if o.workflow == name]
        after = [o for o in new.values() if o.workflow == name]
        mine = [r for r in runs if r.workflow == name]
        changes = Counter(change.change for r in mine for change in r.sends)
        rows.append(
            WorkflowSummary(
                workflow=name,
                firings=firings.get(name, 0),
                differing=len(mine),
                started=(_count(before, lambda o: o.started), _count(after, lambda o: o.started)),
                failed=(
                    _count(before, lambda o: o.status == "failed"),
                    _count(after, lambda o: o.status == "failed"),
                ),
                sends=(_sends(before, OUT), _sends(after, OUT)),
                refused=(_sends(before, {"refused"}), _sends(after, {"refused"})),
                added=changes["added"],
                removed=changes["removed"],
                changed=changes["changed"],
            )
        )
    return rows


def _count(outcomes: list[Outcome], test) -> int:
    return sum(1 for outcome in outcomes if test(outcome))


def _sends(outcomes: list[Outcome], kinds: set[str] | frozenset[str]) -> int:
    return sum(1 for o in outcomes for send in o.sends if send.outcome in kinds)


def spend(old: Mapping[str, Outcome], new: Mapping[str, Outcome]) -> list[SpendRow]:
    """What each budget's caps would count over the replayed sends, deployed → candidate."""
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for index, outcomes in enumerate((old, new)):
        for outcome in outcomes.values():
            for send in outcome.sends:
                for charge in send.charges:
                    totals[(charge.budget, charge.asset)][index] += charge.amount
    return [
        SpendRow(budget=budget, asset=asset, old=amounts[0], new=amounts[1])
        for (budget, asset), amounts in sorted(totals.items())
    ]


def moved(old: Mapping[str, Outcome], new: Mapping[str, Outcome]) -> list[MovedRow]:
    """What would leave each relayer, deployed → candidate: native value and tokens of
    the sends that would be mined, and the gas of those and of reverted ones."""
    totals: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for index, outcomes in enumerate((old, new)):
        for outcome in outcomes.values():
            for send in outcome.sends:
                where = (send.network, send.relayer)
                if send.outcome == "sent":
                    totals[(*where, "native")][index] += send.value
                    if send.token_amount is not None and send.contract:
                        totals[(*where, send.contract)][index] += send.token_amount
                if send.outcome in OUT and send.gas_cost is not None:
                    totals[(*where, "gas")][index] += send.gas_cost
    return [
        MovedRow(network=network, relayer=relayer, asset=asset, old=a[0], new=a[1])
        for (network, relayer, asset), a in sorted(totals.items())
    ]


def mark_counts(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """How many marks of each kind the runs of a replay carry."""
    return dict(sorted(Counter(mark.kind for o in outcomes for mark in o.marks).items()))
