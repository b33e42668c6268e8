"""Retrying a failed run: which records it keeps and which steps run again.

A retry continues a failed run as a new run. Every step that settled before the failure
keeps its record (its output, and with it the idempotency key its effect was carried
out under, so a settled send is never signed again); settled iterations of the failed
``foreach`` stay settled. The failed step runs again, and so does everything after it,
under new keys (a new visit). ``from_step`` restarts from an earlier step: its settled
effects, sends included, go out again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rflow.engine.state import RunState, RunStatus, StepRecord, StepStatus
from rflow.engine.tree import tree
from rflow.lang.model import Workflow


class RerunError(ValueError):
    """The run cannot be retried as asked; the message says why."""


@dataclass(frozen=True)
class Plan:
    """Where a retry of a failed run starts, and what it keeps."""

    restart: int
    """Index in the main steps of the first step that runs again."""
    failed: int
    """Index of the step the run failed at."""
    kept: dict[str, StepRecord]
    """The records the new run keeps, by path."""
    resumed_foreach: str | None
    """The failed ``foreach`` step whose settled iterations are kept, if any."""
    rerun: tuple[str, ...]
    """The main steps that run again, in order (the failed one and those after it, or
    ``from_step`` on)."""
    resent: tuple[StepRecord, ...]
    """Sends that succeeded and go out again (with ``from_step``, or inside a block that
    runs again: a parallel, race or try runs again whole)."""


def failed_at(workflow: Workflow, previous: RunState) -> int:
    """Index of the main step the run stopped at: the first that has no record, or whose
    record failed (a ``continue_on_error`` failure did not stop it)."""
    for index, step in enumerate(workflow.steps):
        record = previous.steps.get(step.id)
        if record is None or record.phase != "main":
            return index
        if record.status == StepStatus.FAILED and not step.continue_on_error:
            return index
        if not record.status.settled:
            return index
    raise RerunError(f"run {previous.run_id} has no failed step to retry")


def plan(workflow: Workflow, previous: RunState, from_step: str | None = None) -> Plan:
    """What a retry of ``previous`` keeps and runs again; :class:`RerunError` if it cannot."""
    if previous.status != RunStatus.FAILED or not previous.settled:
        raise RerunError(
            f"run {previous.run_id} is {previous.status}: only a failed run can be retried"
        )
    ids = [step.id for step in workflow.steps]
    failed = failed_at(workflow, previous)
    restart = failed
    if from_step is not None:
        if from_step not in ids:
            where = "a finally step" if any(s.id == from_step for s in workflow.finally_) else None
            raise RerunError(
                f"step {from_step!r} is {where}: a retry restarts a main step"
                if where
                else f"workflow {previous.workflow} has no step {from_step!r}; "
                f"its steps are {', '.join(ids)}"
            )
        restart = ids.index(from_step)
        if restart > failed:
            raise RerunError(
                f"step {from_step!r} comes after {ids[failed]!r}, where run "
                f"{previous.run_id} failed: --from takes that step or an earlier one"
            )
    rerun_ids = set(ids[restart:])
    # A block runs again whole: the steps inside it too (their sends go out again).
    places = tree(workflow)
    rerun_ids |= {inner for step_id in ids[restart:] for inner in places.within(step_id)}
    failed_step = workflow.steps[failed]
    failed_record = previous.steps.get(failed_step.id)
    resumed_foreach = (
        failed_step.id
        if from_step is None and failed_record is not None and failed_record.fanout is not None
        else None
    )
    kept: dict[str, StepRecord] = {}
    resent: list[StepRecord] = []
    for path, record in previous.steps.items():
        if record.phase != "main":
            continue
        if record.step not in rerun_ids:
            kept[path] = record
            continue
        if record.step == resumed_foreach and path != record.step:
            if record.status in (StepStatus.SUCCEEDED, StepStatus.SKIPPED):
                kept[path] = record
            continue
        if (
            record.fanout is None  # a send itself, or one iteration of a foreach of sends
            and record.status == StepStatus.SUCCEEDED
            and _is_send(workflow, record.step)
        ):
            resent.append(record)
    return Plan(
        restart=restart,
        failed=failed,
        kept=kept,
        resumed_foreach=resumed_foreach,
        rerun=tuple(ids[restart:]),
        resent=tuple(sorted(resent, key=lambda r: r.started_at)),
    )


def _is_send(workflow: Workflow, step_id: str) -> bool:
    step: Any = next((s for s in workflow.all_steps() if s.id == step_id), None)
    return step is not None and step.kind == "send_transaction"
