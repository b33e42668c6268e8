"""Manual runs: ``rflow run`` and ``POST /api/workflows/{name}/runs``.

Both check that the workflow exists and has a manual trigger, and that the inputs are
exactly the ones its ``manual: {inputs: [...]}`` declares, then produce the firing keyed
by the workflow's concurrency group. The trigger key is ``manual:<workflow>:<id>``, where
the id is the caller's idempotency key (``Idempotency-Key`` header, ``--key``) or a new
uuid: repeating a request with the same key starts no second run, because the intake
agent keeps one firing per trigger key.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from rflow.codecs import TriggerRecord
from rflow.deployment import ProjectAt, project_reader
from rflow.engine import provenance
from rflow.engine.keys import firing_runs
from rflow.failures import RflowError
from rflow.ingress.request import (
    DEFAULT_MAX_BODY_BYTES,
    BodyError,
    Reply,
    json_type,
    lower_keys,
    parse_json,
    record_refusal,
    refuse,
    size_refusal,
)
from rflow.ingress.webhooks import (
    MAX_IDEMPOTENCY_KEY,
    PRODUCE_TIMEOUT,
    RETRY_AFTER,
    TriggerProducer,
)
from rflow.lang.model import Project, Workflow
from rflow.streams.producer import ProduceError
from rflow.triggering import paused_answer, trigger_record

log = logging.getLogger(__name__)

IDEMPOTENCY_HEADER = "Idempotency-Key"


class ManualRunError(Exception):
    """A manual run that cannot start; ``status`` is the HTTP answer, ``reason`` says why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def manual_workflow(project: Project | None, name: str) -> Workflow:
    """Workflow ``name`` of ``project`` if it has a manual trigger, else :class:`ManualRunError`."""
    workflow = project.workflows.get(name) if project else None
    if workflow is None:
        raise ManualRunError(404, f"no workflow {name!r}")
    if workflow.manual is None:
        kinds = ", ".join(workflow.trigger_kinds)
        raise ManualRunError(422, f"workflow {name!r} has no manual trigger (it starts on {kinds})")
    return workflow


def check_inputs(name: str, workflow: Workflow, inputs: Mapping[str, Any]) -> None:
    """:class:`ManualRunError` (422) unless ``inputs`` are exactly the declared ones (the
    rule a worker applies to an outside producer's firing too)."""
    assert workflow.manual is not None
    problem = provenance.input_problem(name, workflow.manual.manual.inputs, inputs)
    if problem is not None:
        raise ManualRunError(422, problem)


def manual_record(
    name: str,
    workflow: Workflow | None,
    inputs: dict[str, Any],
    *,
    run_id: str,
    received_at: datetime,
) -> TriggerRecord:
    """The firing of a manual run of ``name`` with id ``run_id``.

    Without the workflow (no project at hand) nothing is checked and the record is keyed
    by its trigger key, not by a concurrency group.
    """
    trigger_key = f"manual:{name}:{run_id}"
    if workflow is None:
        return TriggerRecord(
            workflow=name,
            trigger_key=trigger_key,
            source="manual",
            payload=inputs,
            received_at=received_at,
        )
    check_inputs(name, workflow, inputs)
    try:
        return trigger_record(
            name,
            workflow,
            source="manual",
            trigger_key=trigger_key,
            payload=inputs,
            received_at=received_at,
        )
    except RflowError as exc:
        raise ManualRunError(422, exc.message) from None


class ManualIngress:
    """Starts manual runs from HTTP requests, each acknowledged once durable in Kafka."""

    def __init__(
        self,
        project: Project | ProjectAt | None,
        producer: TriggerProducer,
        clock: Callable[[], datetime],
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        new_id: Callable[[], uuid.UUID] = uuid.uuid4,
        paused: Callable[[str], str | None] = lambda name: None,
    ) -> None:
        self.max_body_bytes = max_body_bytes
        self._paused = paused
        self._project = project_reader(project)
        self._producer = producer
        self._clock = clock
        self._new_id = new_id

    async def handle(self, name: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """Answer one POST that starts a run of workflow ``name`` with the body as inputs."""
        headers = lower_keys(headers)
        refusal = size_refusal(headers, body, self.max_body_bytes)
        if refusal is not None:
            return refusal
        run_id = headers.get(IDEMPOTENCY_HEADER.lower(), "").strip() or self._new_id().hex
        if len(run_id) > MAX_IDEMPOTENCY_KEY:
            return refuse(
                400,
                f"the {IDEMPOTENCY_HEADER} header is longer than {MAX_IDEMPOTENCY_KEY} characters",
            )
        try:
            workflow = manual_workflow(self._project(), name)
            inputs = _inputs(body)
            record = manual_record(name, workflow, inputs, run_id=run_id, received_at=self._clock())
        except BodyError as exc:
            return refuse(400, str(exc))
        except ManualRunError as exc:
            return refuse(exc.status, exc.reason)
        refusal = record_refusal(record)
        if refusal is not None:
            return refusal
        try:
            await asyncio.wait_for(self._producer.trigger(record), PRODUCE_TIMEOUT)
        except (ProduceError, TimeoutError) as exc:
            log.warning("manual run %s not produced: %s", record.trigger_key, exc)
            return refuse(
                503, "the firing could not be stored in Kafka; retry later", retry_after=RETRY_AFTER
            )
        strategy = workflow.strategy if workflow is not None else None
        runs = firing_runs(name, record.trigger_key, strategy.matrix if strategy else None)
        reply = {
            "accepted": True,
            "workflow": name,
            "trigger_key": record.trigger_key,
            "run_ids": [rid for _, rid in runs],
            "status": "accepted",
        }
        paused = self._paused(name)
        if paused is not None:
            # Held, not dropped (the runs start, in arrival order, on resume), or skipped.
            reply.update(paused_answer(workflow, name, paused))
        return Reply(202, reply)


def _inputs(body: bytes) -> dict[str, Any]:
    """The inputs object of a request body; an empty body means no inputs."""
    if not body.strip():
        return {}
    doc = parse_json(body)
    if not isinstance(doc, dict):
        raise BodyError(f"the inputs must be a JSON object, got {json_type(doc)}")
    return doc
