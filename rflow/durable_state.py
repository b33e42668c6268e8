"""A workflow's durable state, for people: what ``state_set``, ``list_add`` and
``list_remove`` have written, key by key. Shared by ``rflow state``, ``GET
/api/workflows/{name}/state`` and the console's workflow page; read only.

The state lives in Postgres, in the ``workflow_state`` table (one row per workflow and
key, its value as JSON and when a step last wrote it). A step changes it once per
idempotency key, so a repeated step never applies twice; a run reads it as ``${{ state }}``
when it starts (and a retried run as it is when it is retried).
"""

from __future__ import annotations

from typing import Any

from rflow.lang.messages import did_you_mean
from rflow.storage import versions
from rflow.storage import workflow_state as store

READ_ACTION = "state.read"
"""The authorization action of reading a workflow's state (every principal that may read
runs may read it)."""


class StateError(Exception):
    """There is no such workflow, or no such key; ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int = 404) -> None:
        super().__init__(message)
        self.status = status


def describe(value: Any) -> str:
    """What a value is, in a few words: ``list of 3``, ``object of 2 keys``, ``integer``."""
    if isinstance(value, list):
        return f"list of {len(value)}"
    if isinstance(value, dict):
        return f"object of {len(value)} key" + ("" if len(value) == 1 else "s")
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "text"
    return "null"


def _entry(entry: store.StateEntry) -> dict[str, Any]:
    return {
        "key": entry.key,
        "value": entry.value,
        "type": describe(entry.value),
        "updated_at": entry.updated_at.isoformat(),
    }


async def read(conn: Any, workflow: str, key: str | None = None) -> dict[str, Any]:
    """``workflow``'s state: ``{"workflow", "keys": [{key, value, type, updated_at}]}``,
    or with ``key`` that key alone: ``{"workflow", "key", "value", "type", "updated_at"}``.

    :class:`StateError` when the workflow is neither deployed nor has state or runs, or
    has no such key (naming the keys it has)."""
    found = await store.entries(conn, workflow)
    if not found and not await versions.known(conn, workflow):
        raise StateError(
            f"no workflow {workflow!r}: none is deployed under that name, and none has runs"
        )
    if key is None:
        return {"workflow": workflow, "keys": [_entry(entry) for entry in found]}
    for entry in found:
        if entry.key == key:
            return {"workflow": workflow, **_entry(entry)}
    names = [entry.key for entry in found]
    has = f" (it has: {', '.join(names)})" if names else " (it has no state yet)"
    raise StateError(
        f"workflow {workflow!r} has no state key {key!r}{did_you_mean(key, names)}{has}"
    )
