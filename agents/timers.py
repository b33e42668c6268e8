"""Durable timers and answered waits, turned back into run events by the partition's owner."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rflow.agents import breakers
from rflow.agents.effects import EffectRunner
from rflow.engine import TimerFired, WaitResolved
from rflow.storage import runs, timers, waits
from rflow.streams.loops import every

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)
TIMER_INTERVAL = 0.1
WAIT_SWEEP_INTERVAL = 2.0
WAIT_GRACE = timedelta(seconds=5)
RETENTION_INTERVAL = 600.0


PAUSE_REFRESH_INTERVAL = 1.0


def attach(app: RflowApp, effects: EffectRunner, runner: Any = None) -> None:
    """Declare the timer loops on ``app``: they run on every worker, each for its partitions."""
    runtime = app.rflow
    runs_topic = runtime.catalog.full_name("rflow.runs")

    def owned() -> list[int]:
        if app.rebalancing or app.in_recovery:
            return []
        return sorted(
            tp.partition for tp in app.assignor.assigned_actives() if tp.topic == runs_topic
        )

    @every(app, TIMER_INTERVAL, "rflow.timers")
    async def fire_due_timers() -> None:
        """Fire every due timer of this worker's partitions (a fire is produced, then deleted)."""
        partitions = owned()
        if not partitions:
            return
        now = datetime.now(UTC)
        due = await runtime.database.run(
            lambda conn: timers.due(conn, partitions, now), what="due timers"
        )
        if not due:
            return
        for timer in due:
            event = TimerFired(
                run_id=timer.run_id,
                path=timer.path,
                visit=timer.visit,
                attempt=timer.attempt,
                purpose=timer.purpose,
                due_at=timer.due_at,
            )
            await effects.send_event(timer.partition_key, event)
        keys = [timer.timer_key for timer in due]
        await runtime.database.run(lambda conn: timers.delete(conn, keys), what="fired timers")

    @every(app, WAIT_SWEEP_INTERVAL, "rflow.waits")
    async def resend_answered_waits() -> None:
        """Answers whose run has not taken them yet (the answering process died before
        producing the event) are produced again; the engine takes each answer once."""
        if not owned():
            return
        before = datetime.now(UTC) - WAIT_GRACE
        answered: list[dict[str, Any]] = await runtime.database.run(
            lambda conn: waits.answered_before(conn, before), what="answered waits"
        )
        for row in answered:
            event = WaitResolved(
                run_id=row["run_id"],
                path=row["path"],
                wait_id=row["wait_id"],
                payload=row["resolution"],
            )
            await effects.send_event(row["partition_key"], event)

    if runner is not None:

        @every(app, PAUSE_REFRESH_INTERVAL, "rflow.pauses")
        async def refresh_pauses() -> None:
            """Which workflows are paused (operator, on_failure: halt), for admission;
            firings held by a lifted pause start."""
            await runner.refresh()

        @every(app, breakers.TICK_INTERVAL, "rflow.breakers")
        async def tick_breakers() -> None:
            """Open circuits go half-open after a quiet window (every worker may do it:
            each change is atomic in Postgres). The workflows with a breaker are the
            current deployment's: a deploy may add or remove one."""
            await runner.breakers.tick()

    @every(app, RETENTION_INTERVAL, "rflow.retention")
    async def apply_retention() -> None:
        """Delete settled runs older than their workflow's ``retention`` (idempotent, so
        every worker may do it)."""
        project = runtime.project
        if project is None:
            return
        now = datetime.now(UTC)
        for name, workflow in project.workflows.items():
            if workflow.retention is None:
                continue
            before = now - timedelta(days=workflow.retention)
            removed = await runtime.database.run(
                lambda conn, name=name, before=before: runs.purge(conn, name, before),
                what="retention",
            )
            if removed:
                log.info(
                    "retention: removed %d runs of %s older than %s days",
                    removed,
                    name,
                    workflow.retention,
                )
