"""What one version did with one run of a firing, as its replay goes: the status, the
steps it took, the sends it made or tried, and what could not be reproduced exactly."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from rflow.backtest.history import Firing
from rflow.codecs.backtests import Mark, Send, Step
from rflow.failures import StepError


@dataclass
class Outcome:
    """What one version did with one run of a firing."""

    run_id: str
    workflow: str
    firing: Firing
    status: str = "not_started"
    reason: str | None = None
    error: StepError | None = None
    kinds: dict[str, str] = field(default_factory=dict)
    steps: dict[tuple[str, int], Step] = field(default_factory=dict)
    sends: list[Send] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    waited: list[str] = field(default_factory=list)
    started_at: datetime | None = None

    @property
    def started(self) -> bool:
        return self.status not in ("not_started", "pending")

    def mark(self, mark: Mark) -> None:
        if mark not in self.marks:
            self.marks.append(mark)
