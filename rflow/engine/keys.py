"""Deterministic identities: run ids, matrix combinations and idempotency keys.

Every side effect carries ``workflow:trigger-key[:matrix:k=v,...]:step[i]`` so that it is
deduplicated where it lands; a step revisited by a ``goto`` loop adds ``#<visit>``.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from typing import Any


def matrix_combinations(matrix: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of a ``strategy.matrix``, in declaration order."""
    if not matrix:
        return [{}]
    names = list(matrix)
    return [
        dict(zip(names, values, strict=True))
        for values in itertools.product(*(matrix[n] for n in names))
    ]


def matrix_suffix(combination: Mapping[str, Any] | None) -> str:
    """``:matrix:network=base`` (keys sorted), or ``""`` without a matrix."""
    if not combination:
        return ""
    return ":matrix:" + ",".join(f"{key}={combination[key]}" for key in sorted(combination))


def run_key(workflow: str, trigger_key: str, combination: Mapping[str, Any] | None = None) -> str:
    """The run's own key: the workflow, the firing and the matrix combination."""
    return f"{workflow}:{trigger_key}{matrix_suffix(combination)}"


def run_id(workflow: str, trigger_key: str, combination: Mapping[str, Any] | None = None) -> str:
    """A run id derived from its key, so a redelivered firing maps to the same run."""
    digest = hashlib.sha256(run_key(workflow, trigger_key, combination).encode()).hexdigest()
    return "r" + digest[:24]


def retry_run_id(run_id: str) -> str:
    """The id of the run retrying ``run_id``: one per failed run, so asking twice (or from
    two places at once) starts one run."""
    return "r" + hashlib.sha256(f"retry-of:{run_id}".encode()).hexdigest()[:24]


def firing_runs(
    workflow: str, trigger_key: str, matrix: Mapping[str, Sequence[Any]] | None
) -> list[tuple[dict[str, Any], str]]:
    """Each run one firing starts: its matrix combination (``{}`` without a matrix) and id."""
    combinations = matrix_combinations(matrix) if matrix else [{}]
    return [(combo, run_id(workflow, trigger_key, combo or None)) for combo in combinations]


def step_path(step_id: str, index: int | None = None) -> str:
    """``payout`` or, for a foreach iteration, ``payout[3]``."""
    return step_id if index is None else f"{step_id}[{index}]"


def idempotency_key(run: str, path: str, visit: int = 1) -> str:
    """The key of one step (or iteration) of one run; attempts of a retry share it."""
    return f"{run}:{path}" if visit <= 1 else f"{run}:{path}#{visit}"


def header_value(key: str) -> str:
    """``key`` as an HTTP header value: itself when it is printable ASCII, else a digest
    of it (a trigger key may hold any character; a header may not)."""
    if all(" " <= ch <= "~" for ch in key):
        return key
    return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def fraction(*parts: object) -> float:
    """A number in [0, 1) determined by ``parts``: deterministic jitter without randomness."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def deployable(workflows: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """``{name: (version, definition as JSON)}``: what a deploy publishes."""
    return {
        name: (workflow_version(wf), wf.model_dump(mode="json", by_alias=True))
        for name, wf in workflows.items()
    }


def workflow_version(definition: Any) -> str:
    """A content address of a workflow definition: equal definitions, equal versions."""
    from rflow.codecs import json  # the one JSON writer; imported late to keep keys light

    dumped = (
        definition.model_dump(mode="json", by_alias=True)
        if hasattr(definition, "model_dump")
        else definition
    )
    return "v" + hashlib.sha256(json.dumps(dumped)).hexdigest()[:16]
