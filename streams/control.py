"""Operator actions on runs from outside a worker: answer a wait, cancel a run.

Each writes what must be durable first (the wait's answer, first answer wins), then
produces the run event keyed like the run, so its owner applies it in order.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rflow import storage
from rflow.codecs import RunEvent
from rflow.engine import CancelRequested, WaitResolved
from rflow.settings import Settings
from rflow.storage import runs, waits
from rflow.streams.producer import Producer


class ControlError(Exception):
    """The action does not apply (no such run, no open wait, already answered...)."""


async def answer(
    settings: Settings, run_id: str, step: str | None, payload: dict[str, Any]
) -> dict[str, Any]:
    """Answer the open wait of ``run_id`` (at ``step`` if given); the first answer wins."""
    conn = await storage.connect(settings)
    async with conn:
        open_waits = await waits.open_waits(conn, run_id, step)
        if not open_waits:
            where = f" at step {step!r}" if step else ""
            raise ControlError(f"run {run_id} has no open wait{where}")
        if len(open_waits) > 1 and step is None:
            paths = ", ".join(w["path"] for w in open_waits)
            raise ControlError(
                f"run {run_id} waits at several steps ({paths}): name one with --step"
            )
        wait = open_waits[0]
        if "decision" in payload and wait["kind"] != "approval":
            raise ControlError(
                f"step {wait['path']} of run {run_id} waits for a {wait['kind']}, not an approval"
            )
        resolved = await waits.resolve(conn, wait["wait_id"], payload, datetime.now(UTC))
    if resolved is None:
        raise ControlError(f"the wait of run {run_id} at {wait['path']} was answered already")
    event = WaitResolved(run_id=run_id, path=wait["path"], wait_id=wait["wait_id"], payload=payload)
    async with Producer(settings) as producer:
        await producer.send("rflow.runs", resolved["partition_key"], RunEvent(event=event))
    return {"run_id": run_id, "step": wait["path"], "answer": payload}


async def cancel(settings: Settings, run_id: str, reason: str) -> dict[str, Any]:
    """Ask the run to stop at its next step boundary (a send in flight is never cut off)."""
    conn = await storage.connect(settings)
    async with conn:
        run = await runs.get_run(conn, run_id)
    if run is None:
        raise ControlError(f"no run {run_id}")
    if run["settled_at"] is not None:
        raise ControlError(f"run {run_id} is already {run['status']}")
    key = run["group_key"] if run["group_key"] is not None else run["trigger_key"]
    async with Producer(settings) as producer:
        await producer.send(
            "rflow.runs", key, RunEvent(event=CancelRequested(run_id=run_id, reason=reason))
        )
    return {"run_id": run_id, "cancel_requested": reason}
