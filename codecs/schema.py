"""The JSON Schema of the trigger record: the contract for producers outside rflow.

Generated from :class:`~rflow.codecs.records.TriggerRecord` and committed as
``schemas/trigger-record.schema.json``; a unit test keeps the file equal to
:func:`trigger_record_schema`, so the published contract cannot drift from what a
worker decodes. Regenerate it with::

    python -m rflow.codecs.schema > schemas/trigger-record.schema.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rflow.codecs.records import TriggerRecord

SCHEMA_PATH = "schemas/trigger-record.schema.json"
"""Where the schema is committed, relative to the repository root."""

DESCRIPTION = (
    "One firing of an rflow workflow, produced as UTF-8 JSON to the triggers topic "
    "(<RFLOW_TOPIC_PREFIX>rflow.triggers). The Kafka key is `group` when the workflow "
    "declares a concurrency group, else `trigger_key`; no headers are needed. A record "
    "that does not match this schema, names an unknown workflow or carries another key "
    "is dead-lettered with the reason."
)

# The wire meaning of each field, for people writing producers; the model's own
# docstrings speak to rflow's code.
_FIELDS: dict[str, str] = {
    "kind": 'Which record this is: always "trigger".',
    "v": "The version of the record's shape: 1 (version 2 adds the proof rflow's own "
    "ingresses sign their firings with).",
    "workflow": "The name of the workflow to fire, as declared in the worker's project.",
    "trigger_key": "The firing's idempotency key, unique per firing and stable across "
    "retries of it (e.g. orders:4711), not starting with one of rflow's own namespaces "
    "(event:, webhook:, schedule:, manual:, their <kind>@ forms, retry-of:). Deliveries with the same workflow and trigger_key "
    "start one run, whose id is 'r' + the first 24 hex digits of "
    "sha256('<workflow>:<trigger_key>'). Re-send a firing unchanged: its payload decides "
    "its concurrency group, hence its partition.",
    "group": "The workflow's concurrency group, exactly as its concurrency.group "
    "expression computes it from payload; null or absent when the workflow declares "
    "none. The Kafka key must equal it (or trigger_key when it is null).",
    "source": 'Where the firing comes from: "manual" for a producer outside rflow. '
    '"event", "webhook" and "schedule" are believed only of records rflow\'s own '
    "ingresses produce and prove; claimed by anyone else, the record is dead-lettered "
    "(unauthenticated_source). A manual firing starts a workflow with a manual trigger, "
    "with exactly the inputs it declares.",
    "payload": "The trigger data: ${{ trigger }} (and ${{ inputs }}) in the workflow. "
    "Integers beyond 64 bits lose no digits, as JSON numbers or as decimal strings.",
    "received_at": "When the producer received the event: an RFC 3339 date-time with a "
    "time zone. Kept with the firing; ordering comes from the partition, not from it.",
}


def trigger_record_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a version-1 trigger record on the wire."""
    schema = TriggerRecord.model_json_schema()
    properties = schema["properties"]
    # What an outside producer writes: version 1, without the proof of rflow's ingress.
    del properties["proof"]
    properties["v"] = {"const": 1, "title": "V", "type": "integer"}
    for name, description in _FIELDS.items():
        properties[name]["description"] = description
    # The model fills `kind` and `v` in by default, but a record on the wire must carry
    # both: they are how a reader knows what it holds before validating anything else.
    for name in ("kind", "v"):
        properties[name].pop("default", None)
    schema["required"] = ["kind", "v", *schema["required"]]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "rflow trigger record, version 1",
        "description": DESCRIPTION,
        **{key: value for key, value in schema.items() if key not in ("title", "description")},
    }


def schema_text() -> str:
    """:func:`trigger_record_schema` as stable, indented JSON with a trailing newline."""
    return json.dumps(trigger_record_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
