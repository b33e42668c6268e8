"""The Faust codecs of rflow's tables and changelogs: JSON through :mod:`rflow.codecs.json`.

Faust's default for table values is pickle-free JSON already, but through the stdlib;
registering ours keeps big integers exact and every byte on Kafka in one format.

The ``runs`` table keeps each run's entry as the JSON bytes of its state, encoded and
read by pydantic (:func:`run_entry`, :func:`read_run_entry`): a parked run costs its
JSON's length in memory instead of a tree of Python objects several times that size,
and the bytes go to the changelog as they are. A settled run leaves a small entry in the
``settled`` table instead (:func:`write_settled_entry`).
"""

from __future__ import annotations

from typing import Any

from faust.serializers import codecs as faust_codecs

from rflow.codecs import json
from rflow.engine.lanes import Lane
from rflow.engine.memory import Settled
from rflow.engine.state import RunState

CODEC_NAME = "rflow-json"
RAW_CODEC_NAME = "rflow-json-bytes"
_SETTLED = b'{"settled":'


class JSONCodec(faust_codecs.Codec):
    """Table keys and values as rflow JSON."""

    def _dumps(self, obj: Any) -> bytes:
        return json.dumps(obj)

    def _loads(self, s: bytes) -> Any:
        return json.loads(s)


class JSONBytesCodec(faust_codecs.Codec):
    """Table values kept as JSON bytes: written as they are, read back as bytes."""

    def _dumps(self, obj: Any) -> bytes:
        return obj if isinstance(obj, bytes) else json.dumps(obj)

    def _loads(self, s: bytes) -> Any:
        return bytes(s)


def register() -> str:
    """Register the codecs with Faust (idempotent); returns the name of the JSON one."""
    if CODEC_NAME not in faust_codecs.codecs:
        faust_codecs.register(CODEC_NAME, JSONCodec())
    if RAW_CODEC_NAME not in faust_codecs.codecs:
        faust_codecs.register(RAW_CODEC_NAME, JSONBytesCodec())
    return CODEC_NAME


def run_entry(state: RunState) -> bytes:
    """The ``runs`` table entry of an unsettled run: its state as JSON, defaults left out."""
    return RunState.__pydantic_serializer__.to_json(state, exclude_defaults=True)


def write_run_entry(value: RunState | str) -> bytes:
    """The ``runs`` table entry of a run's state (a status: a settled run's entry as it
    was kept there before the ``settled`` table)."""
    return run_entry(value) if isinstance(value, RunState) else json.dumps({"settled": value})


def write_settled_entry(value: Settled) -> dict[str, Any]:
    """The ``settled`` table entry of a run that settled."""
    found: dict[str, Any] = {"settled": value.status}
    if value.at is not None:
        found["at"] = value.at
    if value.workflow is not None:
        found["workflow"] = value.workflow
    return found


def read_settled_entry(stored: dict[str, Any]) -> Settled:
    """A ``settled`` table entry."""
    return Settled(stored["settled"], stored.get("at"), stored.get("workflow"))


def read_run_entry(stored: Any) -> RunState | str | None:
    """A ``runs`` table entry: the run's state, ``None``, or the status of a settled run
    (an entry kept there before the ``settled`` table: moved there by the sweep)."""
    if stored is None:
        return None
    if isinstance(stored, dict):  # an entry another codec decoded
        stored = json.dumps(stored)
    if stored.startswith(_SETTLED):
        return json.loads(stored)["settled"]
    return RunState.model_validate_json(stored)


def write_lane_entry(value: Lane | dict[str, Any]) -> dict[str, Any]:
    """The ``lanes`` table entry of a lane, or of the firings held while a workflow is
    paused (``{"held": [...]}``, as it is)."""
    return value.model_dump(mode="json") if isinstance(value, Lane) else value


def read_lane_entry(stored: dict[str, Any]) -> Lane | dict[str, Any]:
    """A ``lanes`` table entry: a :class:`~rflow.engine.lanes.Lane`, or held firings."""
    return stored if "held" in stored else Lane.model_validate(stored)
