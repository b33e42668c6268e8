"""Turning a trigger firing into the record every ingress produces to the triggers topic.

Each ingress (chain events, webhooks, schedules, manual calls) builds its payload in the
shape below, picks a deterministic trigger key, and calls :func:`trigger_record`, which
evaluates the workflow's concurrency group so that the Kafka key is that group.

Payload shapes (``${{ trigger... }}`` in expressions):

- event: ``{network, chain_id, contract, address, event, args, block: {number, hash,
  timestamp}, tx: {hash, index}, log_index}``; key ``event:<chain id>:<block hash>:<log index>``
- webhook: ``{path, body, headers, query, event_type, delivery}``; key
  ``webhook:<workflow>:<idempotency key or delivery id>:<generation>``
- schedule: ``{cron, timezone, fire_time, fire_time_utc}``; key ``schedule:<UTC fire time>``
- manual: the input object (also ``${{ inputs.<name> }}``); key ``manual:<id>``
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from rflow.codecs import TriggerRecord
from rflow.engine.context import render
from rflow.failures import FailureKind, RflowError
from rflow.lang.model import Workflow

Source = Literal["event", "webhook", "schedule", "manual"]


def group_of(workflow: Workflow, payload: dict[str, Any]) -> str | None:
    """The concurrency group of a firing, or ``None`` when the workflow declares none.

    Raises :class:`~rflow.failures.RflowError` (``invalid_input``) when the group
    expression cannot be evaluated or gives nothing: such a firing cannot be ordered.
    """
    if workflow.concurrency is None:
        return None
    value = render(workflow.concurrency.group, {"trigger": payload, "inputs": payload})
    if value is None or value == "":
        raise RflowError(
            FailureKind.INVALID_INPUT,
            f"concurrency group {workflow.concurrency.group!r} is empty for this trigger",
        )
    return value if isinstance(value, str) else str(value)


def trigger_record(
    name: str,
    workflow: Workflow,
    *,
    source: Source,
    trigger_key: str,
    payload: dict[str, Any],
    received_at: datetime,
) -> TriggerRecord:
    """The record for one firing of workflow ``name``, keyed by its concurrency group."""
    return TriggerRecord(
        workflow=name,
        trigger_key=trigger_key,
        group=group_of(workflow, payload),
        source=source,
        payload=payload,
        received_at=received_at,
    )


def paused_answer(workflow: Workflow | None, name: str, paused: str) -> dict[str, str]:
    """What a firing's answer says of a workflow paused for ``paused``: held (it starts, in
    arrival order, on resume) or, with ``paused_firings: skip``, skipped (it never starts)."""
    if workflow is not None and workflow.paused_firings == "skip":
        return {"status": "skipped", "skipped": f"workflow {name} is paused ({paused})"}
    return {"status": "held", "held": f"workflow {name} is paused ({paused})"}
