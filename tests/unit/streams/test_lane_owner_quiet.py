"""How long a lane's owner has gone without its state changing (rflow_lane_owner_quiet_seconds)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from rflow.engine.state import RunState
from rflow.streams.metrics import _quiet_for

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def owner(updated: datetime) -> RunState:
    return RunState(
        run_id="r1",
        workflow="busy",
        version="v1",
        trigger_key="k",
        created_at=updated - timedelta(minutes=1),
        updated_at=updated,
    )


def table(found: object) -> SimpleNamespace:
    def get_in(partition: int, key: str) -> object:
        if isinstance(found, Exception):
            raise found
        return found

    return SimpleNamespace(get_in=get_in)


def test_the_owner_is_quiet_since_its_state_last_changed():
    assert _quiet_for(table(owner(NOW - timedelta(seconds=90))), 3, "r1", NOW) == 90.0
    assert _quiet_for(table(owner(NOW + timedelta(seconds=1))), 3, "r1", NOW) == 0.0


def test_an_owner_not_here_or_unreadable_counts_zero_and_never_raises():
    assert _quiet_for(table(None), 3, "r1", NOW) == 0.0
    assert _quiet_for(table("succeeded"), 3, "r1", NOW) == 0.0  # a settled run's entry
    assert _quiet_for(table(ValueError("not a run state")), 3, "r1", NOW) == 0.0
