"""What a backtest replays: the retained firings of a window, what each firing's runs
really did (the read model's journal, sends and charges), and the spend around them.

Plain data. :mod:`rflow.backtest.load` reads it from the triggers topic and Postgres;
tests and benchmarks build it in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from rflow.codecs import json
from rflow.codecs.records import TriggerRecord
from rflow.engine.keys import run_key
from rflow.failures import FailureKind, StepError
from rflow.lang.timespec import parse_instant
from rflow.lang.units import UnitError, parse_duration


class WindowError(ValueError):
    """The window asked for makes no sense (the message says which option and why)."""


@dataclass(frozen=True, slots=True)
class Window:
    """The firings replayed: received at or after ``start`` and before ``end``."""

    start: datetime
    end: datetime

    def __contains__(self, at: datetime) -> bool:
        return self.start <= at < self.end

    @property
    def length(self) -> timedelta:
        return self.end - self.start


def window(*, since: str | None, start: str | None, end: str | None, now: datetime) -> Window:
    """The window of ``--since 7d`` or ``--from T --to T`` (``--to`` defaults to now);
    without any, the last 7 days. A date-time without a zone is UTC."""
    if since is not None and (start is not None or end is not None):
        raise WindowError("--since and --from/--to are two ways to give the window: give one")
    if since is not None:
        try:
            length = parse_duration(since)
        except (UnitError, ValueError) as exc:
            raise WindowError(f"--since {since!r}: {exc}") from None
        if length <= timedelta(0):
            raise WindowError(f"--since {since!r}: the window must be longer than zero")
        return Window(now - length, now)
    if start is None and end is None:
        return Window(now - timedelta(days=7), now)
    if start is None:
        raise WindowError("--to needs --from (or use --since)")
    begin = _instant(start, "--from")
    finish = _instant(end, "--to") if end is not None else now
    if finish <= begin:
        raise WindowError(f"--to ({finish.isoformat()}) must be after --from ({begin.isoformat()})")
    return Window(begin, finish)


def _instant(text: str, option: str) -> datetime:
    try:
        at = parse_instant(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except (UnitError, ValueError) as exc:
        raise WindowError(f"{option} {text!r}: {exc}") from None
    if at.tzinfo is None:
        from datetime import UTC

        at = at.replace(tzinfo=UTC)
    return at


@dataclass(frozen=True, slots=True)
class Retraction:
    """The source withdrew the firing (a reorg removed its event's block)."""

    at: datetime
    reason: str


@dataclass(frozen=True, slots=True)
class Firing:
    """One firing of the window, as it was first accepted."""

    record: TriggerRecord
    origin: Literal["topic", "read_model"] = "topic"
    """Where it was found: on the triggers topic, or (its record gone with the topic's
    retention) rebuilt from the read model's row of its run."""
    retracted: Retraction | None = None
    offset: tuple[int, int] | None = None
    """Partition and offset on the triggers topic (ties of ``received_at`` keep that order)."""

    @property
    def gate(self) -> str:
        """``<workflow>:<trigger key>``: the firing's key in the admission gate."""
        return run_key(self.record.workflow, self.record.trigger_key)

    @property
    def at(self) -> datetime:
        """When the firing happened: its ``received_at``."""
        return self.record.received_at


@dataclass(frozen=True, slots=True)
class RecordedStep:
    """One step (or iteration) of a recorded run, from the read model's step logs."""

    path: str
    visit: int
    kind: str | None
    status: str
    attempt: int
    input: Any
    output: Any
    error_kind: str | None
    error_message: str | None
    started_at: datetime | None
    settled_at: datetime | None

    @property
    def settled(self) -> bool:
        return self.settled_at is not None and self.status not in ("running", "retrying")

    @property
    def duration(self) -> timedelta:
        """How long the step took (zero when the log does not say)."""
        if self.started_at is None or self.settled_at is None:
            return timedelta(0)
        return max(self.settled_at - self.started_at, timedelta(0))

    @property
    def error(self) -> StepError | None:
        if self.error_kind is None:
            return None
        try:
            kind = FailureKind(self.error_kind)
        except ValueError:
            kind = FailureKind.INVALID_INPUT
        return StepError(kind=kind, message=self.error_message or self.error_kind)


@dataclass(frozen=True, slots=True)
class RecordedSend:
    """One send of a recorded run, from the relayer's ``sends`` table."""

    send_key: str
    path: str | None
    network: str
    relayer: str
    address: str
    to: str
    value: int
    status: str
    block_number: int | None
    gas_used: int | None
    effective_gas_price: int | None
    tx_hash: str | None


@dataclass(frozen=True, slots=True)
class RecordedCharge:
    """One budget reservation of a recorded run."""

    budget: str
    asset: str
    amount: int
    status: str
    send_key: str


@dataclass(frozen=True)
class RecordedRun:
    """What one run of a firing really did."""

    run_id: str
    workflow: str
    version: str
    status: str
    trigger_key: str
    matrix: dict[str, Any] | None = None
    error_kind: str | None = None
    error_message: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    settled_at: datetime | None = None
    steps: tuple[RecordedStep, ...] = ()
    sends: tuple[RecordedSend, ...] = ()
    charges: tuple[RecordedCharge, ...] = ()
    _by_path: dict[tuple[str, int], RecordedStep] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_request: dict[tuple[str, bytes], list[RecordedStep]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for step in self.steps:
            self._by_path[(step.path, step.visit)] = step
            if step.settled and step.input is not None:
                self._by_request.setdefault((step.kind or "", request_key(step.input)), []).append(
                    step
                )

    def step(self, path: str, visit: int = 1) -> RecordedStep | None:
        """The step logged at ``path`` (visit ``visit``), if any."""
        return self._by_path.get((path, visit))

    def answer_for(self, kind: str, action: Any, path: str, visit: int) -> RecordedStep | None:
        """The settled step that made the same request: the one at ``path`` first, else
        any step of the same kind that was given the same input."""
        same = request_key(action)
        here = self._by_path.get((path, visit))
        if (
            here is not None
            and here.settled
            and here.input is not None
            and request_key(here.input) == same
        ):
            return here
        found = self._by_request.get((kind, same))
        return found[0] if found else None


def request_key(value: Any) -> bytes:
    """A request as comparable bytes (sorted keys, exact integers)."""
    return json.dumps(value)


@dataclass(frozen=True, slots=True)
class SpendEntry:
    """A budget charge of the live system that the replay keeps as it is (the sends of
    runs it does not replay)."""

    at: datetime
    budget: str
    asset: str
    amount: int


@dataclass(frozen=True, slots=True)
class GasEntry:
    """Gas the live system paid for a transaction the replay does not make again."""

    at: datetime
    network: str
    relayer: str
    cost: int


@dataclass(frozen=True)
class History:
    """Everything a backtest replays."""

    window: Window
    firings: tuple[Firing, ...]
    runs: Mapping[str, tuple[RecordedRun, ...]] = field(default_factory=dict)
    """The recorded runs of each firing, by gate (``<workflow>:<trigger key>``)."""
    spend: tuple[SpendEntry, ...] = ()
    gas: tuple[GasEntry, ...] = ()
    notes: tuple[str, ...] = ()

    def recorded(self, firing: Firing, run_id: str) -> RecordedRun | None:
        """The recorded run ``run_id`` of ``firing``."""
        for run in self.runs.get(firing.gate, ()):
            if run.run_id == run_id:
                return run
        return None
