"""Approvals: what an answer holds, and what the inbox shows of a wait.

Pure functions over a parked approval's spec (the ``wait_for`` the run rendered when it
parked, as its ``waits`` row keeps it), shared by the HTTP API, the console and the CLI:
which choices there are, what an answer must carry, and the inbox entry of each pending
approval. Who may answer (the principal's role, the approval's ``approvers``) is
:func:`rflow.authz.decide`'s to say; the caller says who answers: the principal its token
authenticated, never a name the request carries.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

PRIORITIES = ("urgent", "high", "normal", "low")
"""The inbox's order."""

Decision = Literal["approve", "reject"]


class Refused(Exception):
    """The answer cannot be taken; ``status`` is the HTTP status that says why."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def choices(approval: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The approval's options as ``{label, value[, color]}`` (a wait parked before options
    had labels lists plain strings)."""
    found = []
    for option in approval.get("choices") or []:
        if isinstance(option, str):
            found.append({"label": option, "value": option})
        else:
            found.append({k: v for k, v in option.items() if v is not None})
    return found


def context(approval: Mapping[str, Any]) -> dict[str, Any]:
    """The approval's context fields, rendered when the run parked, in declared order."""
    fields = approval.get("context_fields") or {}
    if isinstance(fields, list):
        return {field["name"]: field["value"] for field in fields}
    return dict(fields)


def answer(
    spec: Mapping[str, Any],
    decision: Decision,
    principal: str,
    *,
    choice: str | None = None,
    text: str | None = None,
) -> dict[str, Any]:
    """The answer ``principal`` gives, as the run will see it (``steps.<id>.output``);
    :class:`Refused` when it cannot be given as asked. Whether ``principal`` may answer
    at all (its role, the approval's ``approvers``) is :func:`rflow.authz.decide`'s to
    say, before this is asked."""
    approval = spec.get("approval") or {}
    kind = approval.get("type", "approve_reject")
    values = [option["value"] for option in choices(approval)]
    if choice is not None and kind != "choice":
        raise Refused(f"a choice answers a choice approval; this one is {kind}", 400)
    if choice is not None and decision == "reject":
        raise Refused("a rejection chooses nothing: approve with the choice instead", 400)
    if kind == "choice" and decision == "approve":
        listed = ", ".join(repr(v) for v in values)
        if choice is None:
            raise Refused(f"approving a choice approval takes a choice: one of {listed}", 400)
        if choice not in values:
            raise Refused(f"{choice!r} is not one of the choices: {listed}", 400)
    if kind == "freeform" and decision == "approve" and not text:
        raise Refused("approving a freeform approval takes its text", 400)
    payload: dict[str, Any] = {"decision": decision, "by": principal}
    if choice is not None:
        payload["choice"] = choice
    if text is not None:
        payload["text"] = text
    return payload


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def inbox_entry(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a reviewer sees of one pending approval (a ``waits`` row)."""
    spec = row["spec"] or {}
    approval = spec.get("approval") or {}
    return {
        "run_id": row["run_id"],
        "workflow": row["workflow"],
        "step": row["path"],
        "prompt": approval.get("prompt", ""),
        "type": approval.get("type", "approve_reject"),
        "choices": choices(approval),
        "context": context(approval),
        "approvers": approval.get("approvers") or [],
        "priority": approval.get("priority", "normal"),
        "deadline": _when(row["timeout_at"]),
        "escalated_at": _when(row.get("escalated_at")),
        "waiting_since": _when(row["created_at"]),
    }
