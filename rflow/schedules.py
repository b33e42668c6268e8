"""Schedules for operators: list them with how they fire and how their runs went, and
disable or enable one. Shared by ``rflow schedules`` and the HTTP API.

A schedule is a workflow's schedule trigger, named by its id (``schedule`` for the
first). It fires when its definition says ``enabled`` (the default) and no operator has
disabled it; disabling stops it without pausing the workflow, whose other triggers go on
firing. Its ``consecutive_failures`` are its runs that failed since its last run that
succeeded, and ``last_error`` the error of its latest failed run, read from the runs of
its trigger keys.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rflow.ingress import schedule
from rflow.lang.model import Project
from rflow.lang.model.triggers import ScheduleSpec, key_prefix
from rflow.storage import schedules as store


class ScheduleError(Exception):
    """An operator's request about a schedule that cannot be done; ``status`` is the HTTP
    status that says why."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def declared(project: Project | None) -> list[tuple[str, str, ScheduleSpec]]:
    """``(workflow, trigger id, schedule)`` of every schedule trigger of ``project``."""
    return [
        (name, trigger_id, trigger.schedule)
        for name, workflow in (project.workflows if project else {}).items()
        for trigger_id, trigger in workflow.triggers_of("schedule")
    ]


def find(project: Project | None, workflow: str, trigger: str | None) -> tuple[str, ScheduleSpec]:
    """The schedule ``trigger`` of ``workflow`` (``None``: its only one): its id and
    definition, or :class:`ScheduleError` saying why there is none."""
    if project is None or workflow not in project.workflows:
        raise ScheduleError(f"no workflow {workflow!r} is deployed", 404)
    found = [(tid, spec) for name, tid, spec in declared(project) if name == workflow]
    if not found:
        kinds = ", ".join(project.workflows[workflow].trigger_kinds)
        raise ScheduleError(f"workflow {workflow!r} has no schedule (it starts on {kinds})", 404)
    ids = [tid for tid, _ in found]
    if trigger is None:
        if len(found) > 1:
            raise ScheduleError(
                f"workflow {workflow!r} has {len(found)} schedules ({', '.join(ids)}): "
                "say which with its trigger id",
                400,
            )
        return found[0]
    for tid, spec in found:
        if tid == trigger:
            return tid, spec
    raise ScheduleError(
        f"workflow {workflow!r} has no schedule {trigger!r} (its schedules: {', '.join(ids)})",
        404,
    )


async def listing(conn: Any, project: Project | None, now: datetime) -> list[dict[str, Any]]:
    """Every schedule of ``project``: its definition, whether it fires and why not, its
    next fire time (while it fires), its last fire time, and how its runs went."""
    items = declared(project)
    cursors = {(c.workflow, c.trigger): c for c in await store.all_cursors(conn)}
    off = {(d.workflow, d.trigger): d for d in await store.disabled(conn)}
    runs = await store.outcomes(
        conn, [(name, key_prefix("schedule", tid) + ":") for name, tid, _ in items]
    )
    found = []
    for name, tid, spec in items:
        cursor = cursors.get((name, tid))
        control = off.get((name, tid))
        outcome = runs.get((name, key_prefix("schedule", tid) + ":"), {})
        firing = spec.enabled and control is None
        upcoming = schedule.next_fire(spec.cron, spec.timezone, now) if firing else None
        found.append(
            {
                "workflow": name,
                "trigger": tid,
                "cron": spec.cron,
                "timezone": spec.timezone,
                "enabled": firing,
                "state": _state(spec, control),
                "disabled_by": "definition" if not spec.enabled else _by(control),
                "disabled_reason": control.reason if control is not None else None,
                "disabled_at": control.disabled_at if control is not None else None,
                "next_fire": upcoming,
                "last_fire": cursor.last_fired if cursor is not None else None,
                "consecutive_failures": int(outcome.get("consecutive_failures") or 0),
                "last_error": outcome.get("error_message"),
                "last_error_kind": outcome.get("error_kind"),
                "last_error_at": outcome.get("last_failure"),
                "last_error_run": outcome.get("run_id"),
                "last_success_at": outcome.get("last_success"),
            }
        )
    return found


async def disable(
    conn: Any, project: Project | None, workflow: str, trigger: str | None, *, by: str, reason: str
) -> dict[str, Any]:
    """Disable a schedule: it fires nothing from now on, the workflow's other triggers go on."""
    tid, spec = find(project, workflow, trigger)
    if not await store.disable(conn, workflow, tid, by=by, reason=reason):
        current = next(
            d for d in await store.disabled(conn) if (d.workflow, d.trigger) == (workflow, tid)
        )
        raise ScheduleError(
            f"schedule {tid} of {workflow} is disabled already (by {current.disabled_by} at "
            f"{current.disabled_at.isoformat()}: {current.reason or 'no reason given'})",
            409,
        )
    note = None if spec.enabled else "its definition disables it too (enabled: false)"
    return {"workflow": workflow, "trigger": tid, "enabled": False, "note": note}


async def enable(
    conn: Any, project: Project | None, workflow: str, trigger: str | None, *, at: datetime
) -> dict[str, Any]:
    """Enable a schedule an operator disabled: it fires the times after ``at``, never the
    ones it skipped."""
    tid, spec = find(project, workflow, trigger)
    if not spec.enabled:
        raise ScheduleError(
            f"schedule {tid} of {workflow} is disabled by its definition (enabled: false): "
            "deploy it with enabled: true",
            409,
        )
    if not await store.enable(conn, workflow, tid, at=at):
        raise ScheduleError(
            f"schedule {tid} of {workflow} was not disabled by an operator: nothing to enable",
            409,
        )
    upcoming = schedule.next_fire(spec.cron, spec.timezone, at)
    return {"workflow": workflow, "trigger": tid, "enabled": True, "next_fire": upcoming}


def _state(spec: ScheduleSpec, control: Any) -> str:
    if not spec.enabled:
        return "disabled (definition)"
    if control is not None:
        return f"disabled by {control.disabled_by}"
    return "enabled"


def _by(control: Any) -> str | None:
    return control.disabled_by if control is not None else None
