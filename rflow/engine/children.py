"""Child runs: a ``call_workflow`` step starts a run of another workflow of the project.

The child is a run like any other: its own id, its own pinned version (the one deployed
when it starts), its own budgets and lanes. It is started by a firing of the called
workflow, so it is admitted (and deduplicated) like every firing. The rules, one
function each:

- :func:`trigger_key`: the child's firing is keyed ``<parent run>/<step>`` (a step
  revisited by a ``goto`` adds ``#<visit>``, a retried step ``~<attempt>``), so asking
  again (a redelivery, a restart) starts nothing new, and a new attempt starts a new child.
- :func:`child_run_id`: the child's run id, derived from that key as every run's is.
- :func:`answer`: what the child's settling tells the parent's waiting step: its status,
  its ``outputs`` and its failure. The read model writes it into the parent's wait row,
  from the child's journal, so it is answered even if the worker that settled the child
  dies right after.
- :func:`result`: the parent's step ends with the child's outputs, or fails with the
  child's failure (its kind kept, so ``retry`` and ``catch`` treat it as the step's own).
- :func:`never_started`: a child its lane never started (skipped, superseded) answers
  its parent all the same, as cancelled.

Cancelling the parent (or the race its step is in) retracts the child's firing: a child
not started yet never starts, a running one is cancelled at its next step boundary.
"""

from __future__ import annotations

from typing import Any

from rflow.engine import keys
from rflow.engine.effects import Settle
from rflow.engine.events import Start
from rflow.engine.statuses import RunStatus
from rflow.failures import FailureKind, StepError


def trigger_key(run_id: str, path: str, visit: int = 1, attempt: int = 1) -> str:
    """The trigger key of the child run a step starts."""
    key = f"{run_id}/{path}"
    if visit > 1:
        key += f"#{visit}"
    if attempt > 1:
        key += f"~{attempt}"
    return key


def child_run_id(workflow: str, key: str) -> str:
    """The run id of the child of ``workflow`` fired under ``key`` (no matrix: a called
    workflow has none)."""
    return keys.run_id(workflow, key)


def answer(
    run_id: str,
    status: RunStatus,
    outputs: dict[str, Any] | None,
    error: StepError | None,
) -> dict[str, Any]:
    """The answer a settled child gives its parent's wait."""
    found: dict[str, Any] = {"run_id": run_id, "status": str(status), "outputs": outputs or {}}
    if error is not None:
        found["error"] = error.model_dump(mode="json")
    return found


def result(workflow: str, payload: Any) -> tuple[Any, StepError | None]:
    """The output of the parent's step, or its failure, from the child's answer."""
    if not isinstance(payload, dict):
        return None, StepError(
            kind=FailureKind.INVALID_INPUT,
            message=f"the child run's answer is not a mapping: {payload!r}",
        )
    run_id, status = payload.get("run_id"), payload.get("status")
    if status == RunStatus.SUCCEEDED:
        return payload.get("outputs") or {}, None
    error = payload.get("error") or {}
    kind = error.get("kind") or (
        FailureKind.CANCELLED if status == RunStatus.CANCELLED else FailureKind.ASSERT_FAILED
    )
    try:
        kind = FailureKind(kind)
    except ValueError:
        kind = FailureKind.ASSERT_FAILED
    message = f"child run {run_id} of {workflow} {status}: {error.get('message') or status}"
    return None, StepError(kind=kind, message=message, retry_after=error.get("retry_after"))


def never_started(start: Start, status: RunStatus, reason: str) -> Settle | None:
    """The settling of a child run that never started, for the parent that waits for it
    (``None`` for a run no parent waits for)."""
    if start.parent is None or start.parent.wait_id is None:
        return None
    return Settle(
        run_id=start.run_id,
        workflow=start.workflow,
        status=status,
        error=StepError(kind=FailureKind.CANCELLED, message=f"never started: {reason}"),
        parent=start.parent,
    )
