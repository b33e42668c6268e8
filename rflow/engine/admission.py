"""Admission: which runs of a firing start, when, and what is recorded of the others.

Pure, beside :func:`~rflow.engine.advance`: every function here takes what the tables say
(through a :class:`Book`), what only Postgres knows (whether the workflow is paused, the
answer of its rate limit and of its circuit breaker, asked by the caller before), and an
event, and returns decisions. The runner reads the entries, carries out the decisions in
order, and journals them; replay tests feed recorded events and expect the same decisions.

The rules, one function each:

- :func:`fired`: a firing is admitted once per gate key (for the de-duplication window,
  :mod:`rflow.engine.memory`). While its workflow is paused it is held (queued per
  partition, in arrival order) or, with ``paused_firings: skip``, recorded as skipped;
  otherwise its runs begin: a matrix's runs within ``max_parallel`` now, the rest
  pending. A repeated delivery starts only a run that lost its start.
- :func:`begun`: a run reaches its concurrency lane (:mod:`rflow.engine.lanes`) and starts,
  waits, is skipped or supersedes, by ``on_conflict``; without a lane it starts.
- :func:`start_or_defer`: a run about to start waits for a half-open circuit's probe, or
  for room in its rate limit, on a durable timer; the first wait gives it a pending row.
- :func:`settled`: a run settled: its lane passes on, and its matrix applies ``fail_fast``
  and starts the next combinations within ``max_parallel``.
- :func:`released`: a workflow was resumed: what was held on a partition begins in order.
- :func:`retracted`: the source withdrew a firing: its runs are asked to stop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from rflow.engine import lanes, memory
from rflow.engine.lanes import Lane, OnConflict
from rflow.engine.state import RunStatus

PROBE_WAIT = timedelta(seconds=1)
"""How often a run waiting behind a half-open circuit's probe asks again."""


# --- inputs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One run of a firing: its id and its matrix combination (empty without one)."""

    run_id: str
    combo: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Firing:
    """A firing (or a retry) as admission sees it."""

    gate: str
    """Its key in the ``triggers`` table: ``<workflow>:<trigger key>`` (a retry's own)."""
    workflow: str
    group: str | None
    runs: tuple[Run, ...]
    record: Mapping[str, Any]
    """The record as accepted (JSON), kept in the gate entry while its runs begin."""
    retry: bool = False
    digest: str = ""
    """The record's :func:`~rflow.engine.memory.digest`, kept in the gate entry for the
    window."""


@dataclass(frozen=True)
class Policy:
    """What a workflow's definition says about admitting its runs."""

    on_conflict: OnConflict | None = None
    """Its concurrency lane's rule; ``None`` without a concurrency group."""
    max_parallel: int | None = None
    """A matrix's runs at once; ``None`` without a matrix (or without a limit)."""
    matrix: bool = False
    fail_fast: bool = False
    paused_firings: Literal["hold", "skip"] = "hold"


@dataclass
class Book:
    """The tables as admission reads them, with the changes decided so far on top (so
    that the decisions of one event see each other)."""

    gate: Callable[[str], dict[str, Any] | None]
    lane: Callable[[str, str], Lane | None]
    held: Callable[[str, int], list[str]]
    started: Callable[[str], bool]
    """Whether a run has a state (running or settled)."""
    gates: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    lanes: dict[tuple[str, str], Lane | None] = field(default_factory=dict)

    def gate_of(self, key: str) -> dict[str, Any] | None:
        return self.gates[key] if key in self.gates else self.gate(key)

    def lane_of(self, workflow: str, group: str) -> Lane | None:
        key = (workflow, group)
        return self.lanes[key] if key in self.lanes else self.lane(workflow, group)


# --- decisions ------------------------------------------------------------------------


@dataclass(frozen=True)
class SetGate:
    """Write the gate entry of a firing."""

    gate: str
    entry: dict[str, Any]


@dataclass(frozen=True)
class SetLane:
    """Write a concurrency lane (``None``: it is free and its entry goes)."""

    workflow: str
    group: str
    lane: Lane | None


@dataclass(frozen=True)
class SetHeld:
    """Write the firings of a workflow held on a partition, in arrival order."""

    workflow: str
    partition: int
    gates: tuple[str, ...]


@dataclass(frozen=True)
class Start:
    """Start a run now (it has cleared its lane, its circuit breaker and its rate limit)."""

    run_id: str
    gate: str


@dataclass(frozen=True)
class Begin:
    """Ask the run's circuit breaker and rate limit (Postgres), then
    :func:`start_or_defer`."""

    run_id: str
    gate: str


@dataclass(frozen=True)
class Defer:
    """Start the run at ``until`` instead: a durable timer (attempt ``attempt``)."""

    run_id: str
    gate: str
    until: datetime
    attempt: int
    reason: Literal["probe", "rate_limit"]


@dataclass(frozen=True)
class Pending:
    """Give a run its pending row: admitted, not started, and what it waits for."""

    run_id: str
    gate: str
    reason: Literal["lane", "rate_limit", "paused", "probe", "matrix"]
    waiting_for: str


@dataclass(frozen=True)
class NeverStarted:
    """Record a run that will never start (skipped, or superseded while waiting)."""

    run_id: str
    gate: str
    status: RunStatus
    reason: str


@dataclass(frozen=True)
class Cancel:
    """Ask a running run to stop at its next step boundary."""

    run_id: str
    reason: str


@dataclass(frozen=True)
class Admitted:
    """A firing's runs begin (counted once per firing; a held one when it is released)."""

    gate: str


@dataclass(frozen=True)
class Ignored:
    """The event changes nothing (said for the log)."""

    why: str


Decision = (
    SetGate
    | SetLane
    | SetHeld
    | Admitted
    | Start
    | Begin
    | Defer
    | Pending
    | NeverStarted
    | Cancel
    | Ignored
)


# --- the rules --------------------------------------------------------------------------


def fired(
    firing: Firing,
    policy: Policy,
    book: Book,
    *,
    paused: str | None,
    partition: int,
    now: datetime,
) -> list[Decision]:
    """Admit ``firing`` (once per gate key), as the gate entry and ``paused`` (why its
    workflow starts no runs now, or ``None``) say; ``now`` is when it is admitted."""
    admitted = book.gate_of(firing.gate)
    if admitted is not None:
        return [] if firing.retry else _again(firing, policy, book, admitted)
    entry = gate_entry(firing, policy, now)
    if paused and policy.paused_firings == "skip":
        reason = f"workflow paused: {paused}"
        decisions: list[Decision] = [_set_gate(book, firing.gate, {**entry, "skipped": reason})]
        decisions += [
            NeverStarted(r.run_id, firing.gate, RunStatus.SKIPPED, reason) for r in firing.runs
        ]
        return decisions
    if paused:
        waiting = f"the workflow to be resumed (paused {paused})"
        held = (*book.held(firing.workflow, partition), firing.gate)
        return [
            _set_gate(book, firing.gate, {**entry, "held": paused}),
            SetHeld(firing.workflow, partition, held),
            *(Pending(r.run_id, firing.gate, "paused", waiting) for r in firing.runs),
        ]
    return [_set_gate(book, firing.gate, entry), *_begin_firing(firing, policy, book, entry)]


def gate_entry(firing: Firing, policy: Policy, now: datetime) -> dict[str, Any]:
    """The gate entry of a firing: the record as accepted, its runs, when it was admitted
    and the record's digest, with a matrix's bookkeeping (every combination's run is
    keyed like the firing, so they all settle on its partition, in order). Once every
    run has begun it keeps less (:func:`~rflow.engine.memory.remembered`)."""
    run_ids = [r.run_id for r in firing.runs]
    entry = {**firing.record, "runs": run_ids, "at": memory.epoch(now), "digest": firing.digest}
    if policy.matrix and not firing.retry:
        limit = policy.max_parallel or len(run_ids)
        entry["matrix"] = {
            "pending": list(range(limit, len(run_ids))),
            "active": run_ids[:limit],
            "failed": False,
        }
    return entry


def begun(run: Run, firing: Firing, policy: Policy, book: Book) -> list[Decision]:
    """``run`` reaches its concurrency lane (or starts, without one)."""
    if policy.on_conflict is None or firing.group is None:
        return [Begin(run.run_id, firing.gate)]
    arrival = lanes.arrive(
        book.lane_of(firing.workflow, firing.group), run.run_id, firing.gate, policy.on_conflict
    )
    decisions: list[Decision] = [_set_lane(book, firing.workflow, firing.group, arrival.lane)]
    if arrival.start:
        if book.started(run.run_id):
            return decisions  # the owner arrived again and has started
        return [*decisions, Begin(run.run_id, firing.gate)]
    for waiting in arrival.superseded:
        reason = f"superseded by run {run.run_id} (on_conflict: {policy.on_conflict})"
        decisions.append(NeverStarted(waiting.run_id, waiting.gate, RunStatus.CANCELLED, reason))
    if arrival.skip:
        reason = f"concurrency group {firing.group!r} busy with run {arrival.lane.active}"
        decisions.append(NeverStarted(run.run_id, firing.gate, RunStatus.SKIPPED, reason))
    if arrival.cancel is not None:
        reason = f"superseded by run {run.run_id} (on_conflict: cancel_in_progress)"
        decisions.append(Cancel(arrival.cancel, reason))
    if not arrival.skip and arrival.lane.holds(run.run_id):
        waiting = f"run {arrival.lane.active} of concurrency group {firing.group!r} to settle"
        decisions.append(Pending(run.run_id, firing.gate, "lane", waiting))
    return decisions


def start_or_defer(
    begin: Begin,
    book: Book,
    *,
    probe_admits: bool,
    room_at: datetime | None,
    rate_limit: str | None,
    attempt: int,
    now: datetime,
) -> list[Decision]:
    """A run about to start: ``probe_admits`` is the circuit breaker's answer (True without
    one), ``room_at`` when its rate limit has room again (``None``: it took a start now),
    ``rate_limit`` the limit for the pending row ("10 starts per 1h"), ``attempt`` how many
    deferrals it had (0 first). A deferred run keeps a timer, never a drop; its first
    deferral for a reason gives it a pending row, and its gate entry remembers it, so a
    repeated delivery of the firing does not start it early."""
    if not probe_admits or room_at is not None:
        if not probe_admits:
            reason, until = "probe", now + PROBE_WAIT
            waiting = "the probe run of the workflow's half-open circuit breaker to settle"
        else:
            reason, until = "rate_limit", room_at
            waiting = f"room in the rate limit ({rate_limit})"
        decisions: list[Decision] = [Defer(begin.run_id, begin.gate, until, attempt + 1, reason)]
        entry = book.gate_of(begin.gate)
        if entry is not None and entry.get("deferred", {}).get(begin.run_id) != reason:
            deferred = {**entry.get("deferred", {}), begin.run_id: reason}
            decisions.append(_set_gate(book, begin.gate, {**entry, "deferred": deferred}))
            decisions.append(Pending(begin.run_id, begin.gate, reason, waiting))
        return decisions
    decisions = []
    entry = book.gate_of(begin.gate)
    if attempt and entry is not None and begin.run_id in entry.get("deferred", {}):
        deferred = {k: v for k, v in entry["deferred"].items() if k != begin.run_id}
        decisions.append(_set_gate(book, begin.gate, {**entry, "deferred": deferred}))
    return [*decisions, Start(begin.run_id, begin.gate)]


def settled(
    run_id: str,
    status: RunStatus,
    firing: Firing | None,
    policy: Policy,
    book: Book,
    *,
    workflow: str,
    group: str | None,
    retried: bool,
) -> list[Decision]:
    """Run ``run_id`` settled with ``status``: its lane passes to the next run waiting,
    and, a combination of a matrix (``firing``, unless the run is a retry of one), the
    matrix applies fail_fast and starts what ``max_parallel`` allows."""
    decisions: list[Decision] = []
    if group is not None and policy.on_conflict is not None:
        lane, following = lanes.leave(book.lane_of(workflow, group), run_id)
        decisions.append(_set_lane(book, workflow, group, lane))
        if following is not None:
            decisions.append(Begin(following.run_id, following.gate))
    if firing is None or retried or not policy.matrix:
        return decisions
    entry = book.gate_of(firing.gate)
    if entry is None or "matrix" not in entry:
        return decisions
    matrix = dict(entry["matrix"])
    active = [rid for rid in matrix["active"] if rid != run_id]
    pending = list(matrix["pending"])
    cancel: list[str] = []
    dropped: list[int] = []
    if status == RunStatus.FAILED and policy.fail_fast and not matrix["failed"]:
        matrix["failed"] = True
        dropped, pending, cancel = pending, [], active
    limit = policy.max_parallel or len(firing.runs)
    starting = []
    while pending and len(active) < limit:
        index = pending.pop(0)
        active.append(entry["runs"][index])
        starting.append(index)
    updated = {**entry, "matrix": {**matrix, "active": active, "pending": pending}}
    decisions.append(_set_gate(book, firing.gate, updated))
    reason = f"fail_fast: {run_id} failed"
    decisions += [Cancel(rid, reason) for rid in cancel]
    # Pending since the firing was admitted: recorded as never started.
    decisions += [
        NeverStarted(entry["runs"][i], firing.gate, RunStatus.CANCELLED, reason) for i in dropped
    ]
    for index in starting:
        decisions += begun(firing.runs[index], firing, policy, book)
    return decisions


def released(
    held: list[tuple[Firing | None, Policy]], book: Book, *, workflow: str, partition: int
) -> list[Decision]:
    """``workflow`` was resumed: the firings held on ``partition`` begin, in the order they
    arrived (``None`` for one whose workflow is gone: it starts nothing)."""
    decisions: list[Decision] = [SetHeld(workflow, partition, ())]
    for firing, policy in held:
        if firing is None:
            continue
        entry = book.gate_of(firing.gate)
        if entry is None or "held" not in entry:
            continue
        entry = {k: v for k, v in entry.items() if k != "held"}
        decisions.append(_set_gate(book, firing.gate, entry))
        decisions += _begin_firing(firing, policy, book, entry)
    return decisions


def retracted(gate: str, reason: str, book: Book, *, now: datetime) -> list[Decision]:
    """The source withdrew firing ``gate``: its runs are asked to stop; before it is
    admitted, the gate remembers (for the window, from ``now``), so a late delivery
    starts nothing."""
    accepted = book.gate_of(gate)
    if accepted is None:
        return [_set_gate(book, gate, {"retracted": reason, "at": memory.epoch(now)})]
    why = f"trigger retracted: {reason}"
    return [
        _set_gate(book, gate, {**accepted, "retracted": reason}),
        *(Cancel(rid, why) for rid in accepted.get("runs", [])),
    ]


# --- helpers --------------------------------------------------------------------------


def _begin_firing(
    firing: Firing, policy: Policy, book: Book, entry: Mapping[str, Any]
) -> list[Decision]:
    """An admitted firing's runs: those within the matrix's max_parallel begin now, the
    rest are pending."""
    active = set(entry.get("matrix", {}).get("active", entry["runs"]))
    decisions: list[Decision] = [Admitted(firing.gate)]
    waiting = f"a free slot of its matrix (max_parallel: {policy.max_parallel})"
    for run in firing.runs:
        if run.run_id not in active:
            decisions.append(Pending(run.run_id, firing.gate, "matrix", waiting))
    for run in firing.runs:
        if run.run_id in active:
            decisions += begun(run, firing, policy, book)
    return decisions


def _again(
    firing: Firing, policy: Policy, book: Book, admitted: Mapping[str, Any]
) -> list[Decision]:
    """A firing delivered again. Its gate entry and its runs' states can be lost
    separately by a crash (the gate kept, a run's first state lost): such a run starts
    again (a start is idempotent), from the record as accepted, which a compact entry
    (:func:`~rflow.engine.memory.remembered`) no longer holds: the repeated delivery is
    that record when its digest matches. Anything else about a repeated firing is
    ignored: a held or skipped firing stays so, and a deferred run waits for its timer."""
    if "held" in admitted or "skipped" in admitted or "retracted" in admitted:
        return [Ignored(f"duplicate delivery of firing {firing.gate} ignored")]
    started = admitted.get("matrix", {}).get("active", admitted.get("runs", []))
    deferred = admitted.get("deferred", {})
    lane = (
        book.lane_of(firing.workflow, firing.group)
        if policy.on_conflict is not None and firing.group is not None
        else None
    )
    lost = [
        rid
        for rid in started
        if not book.started(rid)
        and rid not in deferred
        and not (lane and lane.holds(rid) and lane.active != rid)
    ]
    if not lost:
        return [Ignored(f"duplicate delivery of firing {firing.gate} ignored")]
    decisions: list[Decision] = []
    if memory.is_remembered(admitted):
        full = memory.restored(admitted, firing.record, firing.digest)
        if full is None:
            return [
                Ignored(
                    f"firing {firing.gate} delivered again with another record than the one "
                    f"accepted: run(s) {', '.join(lost)} cannot start from it"
                )
            ]
        decisions.append(_set_gate(book, firing.gate, full))
    for run in firing.runs:
        if run.run_id not in lost:
            continue
        if lane is not None and lane.active == run.run_id:
            decisions.append(Begin(run.run_id, firing.gate))
        else:
            decisions += begun(run, firing, policy, book)  # its lane lost it too: it arrives again
    return decisions


def _set_gate(book: Book, gate: str, entry: dict[str, Any]) -> SetGate:
    book.gates[gate] = entry
    return SetGate(gate, entry)


def _set_lane(book: Book, workflow: str, group: str, lane: Lane | None) -> SetLane:
    book.lanes[(workflow, group)] = lane
    return SetLane(workflow, group, lane)
