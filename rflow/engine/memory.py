"""What a worker remembers, and for how long: the de-duplication window.

Pure, beside :mod:`~rflow.engine.admission`: the runner passes the entries of its tables
and ``now`` in and carries out what comes back. A worker remembers

- a firing, by its gate key (``<workflow>:<trigger key>``) in the ``triggers`` table, to
  start no second run for a repeated delivery of it: while its runs are being admitted,
  with the record as accepted (its runs start from it); once every run of it has begun,
  only what de-duplication needs (:func:`remembered`): the runs, when it was admitted
  and a digest of the record. The record itself stays on the triggers topic and in the
  read model;
- a settled run, by its id in the ``settled`` table (:class:`Settled`), to recognise a
  late or repeated event of it.

Both are forgotten a window after they were admitted (settled), and the window is the
workflow's ``dedup_window`` (else ``config.dedup_window``, 7 days). Forgetting is a
deletion of the entry, which reaches the table's changelog as a tombstone, so the
changelog compacts down to what is remembered. What is live is never forgotten: a
firing whose runs are not all begun (held while its workflow is paused, waiting in a
lane, deferred by a rate limit, a matrix with combinations left) or any of whose runs has
not settled, and a run that has not settled (waiting days for an approval or a signal).

The rules, one function each:

- :func:`digest`: the digest of a firing's record (its received time left out).
- :func:`remembered`: the entry a firing keeps once every run of it has begun.
- :func:`settled_marker`: the entry of a run that settled.
- :func:`sweep`: which entries of a partition are forgotten now, and which are stamped
  with a time first (entries written before the window existed have none).
- :func:`comes_due`: when an entry is next looked at by a sweep.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

RECEIVED_FIELDS = ("received_at", "requested_at", "v", "proof")
"""Record fields a digest leaves out: when and how a copy of the firing was made (its
time, the version of its shape, the proof rflow's ingress signed it with), not what it
is."""


def epoch(moment: datetime) -> float:
    """``moment`` as seconds since the epoch, to the millisecond (how entries keep time)."""
    return round(moment.timestamp(), 3)


def gate_workflow(gate: str) -> str:
    """The workflow of gate key ``gate`` (``<workflow>:...``: a name holds no colon)."""
    return gate.split(":", 1)[0]


# --- firings ----------------------------------------------------------------------------


def digest(record: Mapping[str, Any]) -> str:
    """The digest of a firing's record as accepted (JSON): equal for every delivery of the
    same firing, whatever time each copy was made."""
    from rflow.codecs import json  # the one JSON writer (keys sorted); imported late

    content = {k: v for k, v in record.items() if k not in RECEIVED_FIELDS}
    return hashlib.sha256(json.dumps(content)).hexdigest()[:32]


def is_remembered(entry: Mapping[str, Any]) -> bool:
    """Whether a gate entry is the compact form of :func:`remembered` (it has no record)."""
    return "kind" not in entry


def being_admitted(entry: Mapping[str, Any]) -> bool:
    """Whether runs of a firing wait to begin, or its matrix goes on: it is held while
    its workflow is paused, a run of it is deferred (rate limit, a circuit's probe), or
    combinations of its matrix are active or pending."""
    matrix = entry.get("matrix") or {}
    return bool(
        entry.get("held") or entry.get("deferred") or matrix.get("active") or matrix.get("pending")
    )


def remembered(entry: Mapping[str, Any], begun: Callable[[str], bool]) -> dict[str, Any] | None:
    """The compact entry of a firing every run of which has begun (``begun``: the run has
    a state, running or settled), else ``None`` (it keeps its record: a run of it starts
    from it later). A held firing, a deferred run or a matrix with combinations active
    or pending keep theirs too."""
    if is_remembered(entry) or being_admitted(entry):
        return None
    runs = list(entry.get("runs", ()))
    if not all(begun(rid) for rid in runs):
        return None
    compact: dict[str, Any] = {"runs": runs}
    for name in ("at", "digest", "retracted", "skipped"):
        if name in entry:
            compact[name] = entry[name]
    return compact


def restored(
    entry: Mapping[str, Any], record: Mapping[str, Any], record_digest: str
) -> dict[str, Any] | None:
    """The full entry of a compact one, rebuilt from a repeated delivery of its firing
    (``record``), when the delivery is the firing as accepted (its digest matches): a run
    of it lost its start to a crash and starts from it. ``None`` when it differs."""
    if entry.get("digest") != record_digest:
        return None
    return {**record, **entry}


# --- runs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settled:
    """The entry of a settled run in the ``settled`` table."""

    status: str
    at: float | None
    """When it settled (seconds since the epoch); ``None`` in an entry written before
    entries had a time (:func:`sweep` gives it one)."""
    workflow: str | None = None


def settled_marker(status: str, workflow: str, now: datetime) -> Settled:
    """What a run that settled with ``status`` at ``now`` leaves behind."""
    return Settled(str(status), epoch(now), workflow)


# --- the sweep --------------------------------------------------------------------------


Table = Literal["triggers", "settled", "runs"]


@dataclass(frozen=True)
class Forget:
    """Delete ``key`` from ``table``: its changelog gets a tombstone."""

    table: Table
    key: str
    why: str


@dataclass(frozen=True)
class Rewrite:
    """Write ``entry`` under ``key`` of ``table``."""

    table: Table
    key: str
    entry: Any


SweepDecision = Forget | Rewrite


@dataclass(frozen=True)
class Book:
    """What the sweep reads besides the entries it is given."""

    window: Callable[[str | None], timedelta]
    """The de-duplication window of a workflow (``None``: unknown, the project's)."""
    live: Callable[[str], bool]
    """Whether a run has a state that has not settled."""
    begun: Callable[[str], bool]
    """Whether a run has a state, running or settled."""


def sweep(
    table: Table, entries: Iterable[tuple[str, Any]], book: Book, now: datetime
) -> list[SweepDecision]:
    """What to do with ``entries`` of ``table`` (each as the table holds it now) at
    ``now``: the owner of their partition carries it out, under the partition's lock."""
    decisions: list[SweepDecision] = []
    at = epoch(now)
    for key, entry in entries:
        decision = (
            _gate(key, entry, book, now, at)
            if table == "triggers"
            else _settled(key, entry, book, now, at)
            if table == "settled"
            else _legacy_run(key, entry, at)
        )
        if decision is not None:
            decisions += decision
    return decisions


def _gate(
    key: str, entry: Mapping[str, Any], book: Book, now: datetime, at: float
) -> list[SweepDecision] | None:
    if entry.get("held"):
        return None  # waits for its workflow's resume, however long that takes
    if "at" not in entry:
        return [Rewrite("triggers", key, {**entry, "at": at})]
    compact = remembered(entry, book.begun) if not is_remembered(entry) else dict(entry)
    if compact is None:
        return None  # runs of it are still being admitted
    window = book.window(gate_workflow(key))
    runs = compact.get("runs", ())
    if _due(compact["at"], window, now) and not any(book.live(rid) for rid in runs):
        return [Forget("triggers", key, f"admitted more than {_shown(window)} ago")]
    return None if compact == entry else [Rewrite("triggers", key, compact)]


def _settled(
    key: str, entry: Settled, book: Book, now: datetime, at: float
) -> list[SweepDecision] | None:
    if entry.at is None:
        return [Rewrite("settled", key, Settled(entry.status, at, entry.workflow))]
    window = book.window(entry.workflow)
    if _due(entry.at, window, now):
        return [Forget("settled", key, f"settled more than {_shown(window)} ago")]
    return None


def _legacy_run(key: str, entry: Any, at: float) -> list[SweepDecision] | None:
    """A settled run's status kept in the ``runs`` table (before the ``settled`` table
    existed) moves there, with a time."""
    if not isinstance(entry, str):
        return None
    return [
        Forget("runs", key, "moved to the settled table"),
        Rewrite("settled", key, Settled(entry, at, None)),
    ]


def comes_due(
    table: Table, key: str, entry: Any, window: Callable[[str | None], timedelta]
) -> float | None:
    """When ``entry`` of ``table`` comes due for the sweep (seconds since the epoch), as
    the windows are now; ``None``: it has no time yet (a sweep gives it one)."""
    if table == "triggers":
        at = entry.get("at")
        return None if at is None else at + window(gate_workflow(key)).total_seconds()
    if table == "settled":
        return None if entry.at is None else entry.at + window(entry.workflow).total_seconds()
    return None


def _due(at: float, window: timedelta, now: datetime) -> bool:
    return at + window.total_seconds() <= now.timestamp()


def _shown(window: timedelta) -> str:
    seconds = window.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def sweep_interval(windows: Iterable[timedelta], *, indexed: bool = True) -> float:
    """Seconds between two sweeps of a worker's partitions: a tenth of the shortest
    window, from 1 s to a minute when the tables know when each entry comes due (on
    disk), to an hour when every entry is read (in memory). An entry is forgotten at
    most that long after its window ends."""
    shortest = min(windows, default=timedelta(days=7)).total_seconds()
    return min(60.0 if indexed else 3600.0, max(1.0, shortest / 10))
