"""What the audit trail shows: a row as a document, and how ``--since`` is read.

Shared by ``rflow audit ls``, ``GET /api/audit`` and the console's audit page; the rows
themselves are written by :class:`rflow.streams.gate.Gate` through
:mod:`rflow.storage.audit`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rflow.lang.units import UnitError, parse_duration

OUTCOMES = ("done", "failed", "refused")


def since_of(text: str | None, now: datetime) -> datetime | None:
    """``--since``: an ISO 8601 time (UTC unless it says otherwise), or a duration back
    from ``now`` (``24h``, ``7d``); ``None`` when not given. ``ValueError`` says why
    another value is not one."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    try:
        return now - parse_duration(text)
    except UnitError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"since {text!r} is neither a time (2026-05-06T07:08:09Z) nor a duration back "
            "from now (24h, 7d)"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def target_text(row: Mapping[str, Any]) -> str:
    """``run r1f0…``, ``workflow payout``, or ``-``."""
    kind, ident = row.get("target_kind"), row.get("target_id")
    if not kind:
        return "-"
    return kind if ident is None else f"{kind} {ident}"


def document(row: Mapping[str, Any]) -> dict[str, Any]:
    """One row as ``GET /api/audit`` and ``rflow audit ls --json`` give it."""
    at = row["at"]
    return {
        "id": row["id"],
        "at": at.isoformat() if isinstance(at, datetime) else at,
        "principal": row["principal"],
        "role": row["role"],
        "action": row["action"],
        "target": {"kind": row["target_kind"], "id": row["target_id"]}
        if row["target_kind"]
        else None,
        "arguments": row["arguments"] or {},
        "outcome": row["outcome"],
        "reason": row["reason"],
        "via": row["via"],
    }
