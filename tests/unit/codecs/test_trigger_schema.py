"""The trigger record's JSON Schema: committed as generated, obeyed by the examples of
docs/producing-triggers.md (and the faust CLI's in docs/workers.md), and in agreement with
the codec a worker decodes with."""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from rflow.codecs import DecodeError, TriggerRecord, decode
from rflow.codecs.schema import SCHEMA_PATH, schema_text, trigger_record_schema
from rflow.engine.keys import run_id
from rflow.lang import load_project
from rflow.triggering import group_of
from tests.conftest import REPO

PRODUCING = REPO / "docs" / "producing-triggers.md"
FAUST_CLI = REPO / "docs" / "workers.md"
RECORD = {
    "kind": "trigger",
    "v": 1,
    "workflow": "order-paid",
    "trigger_key": "orders:4711",
    "group": "acct-42",
    "source": "manual",
    "payload": {"account": "acct-42", "order": 4711, "amount": 2**70},
    "received_at": "2026-05-06T07:08:09Z",
}


def blocks(language: str, page: Path = PRODUCING) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), re.S)


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        trigger_record_schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def test_the_committed_schema_is_the_generated_one():
    committed = (REPO / SCHEMA_PATH).read_text()
    assert committed == schema_text(), (
        f"regenerate it: python -m rflow.codecs.schema > {SCHEMA_PATH}"
    )
    jsonschema.Draft202012Validator.check_schema(json.loads(committed))


def test_the_documented_record_obeys_the_schema_and_decodes_to_the_same_firing():
    [block] = blocks("json")
    document = json.loads(block)
    validator().validate(document)
    record = decode(block.encode(), TriggerRecord)
    assert record.model_dump(mode="json", exclude={"proof"}) == {
        **document,
        "received_at": "2026-05-06T07:08:09Z",
    }
    assert record.proof is None
    assert record.payload["amount"] == 1250000000000000000000  # exact beyond 64 bits


def test_the_documented_examples_are_one_firing_keyed_by_its_workflow_group(tmp_path: Path):
    [workflow_yaml] = blocks("yaml")
    (tmp_path / "orders.yaml").write_text(workflow_yaml)
    workflow = load_project(tmp_path, {}).workflows["order-paid"]
    [block] = blocks("json")
    record = json.loads(block)
    group = group_of(workflow, record["payload"])
    assert record["group"] == group == "acct-42"
    assert run_id(record["workflow"], record["trigger_key"]) in PRODUCING.read_text()

    # kcat: the same record on one line, keyed by the group, hashed with murmur2.
    [kcat] = [b for b in blocks("sh") if "kcat -P" in b]
    words = shlex.split(kcat.replace("\\\n", " "))
    assert json.loads(words[words.index("echo") + 1]) == record
    assert words[words.index("-k") + 1] == group
    assert "topic.partitioner=murmur2_random" in words

    # aiokafka: the record passed to `fire`, keyed by its group.
    [python] = blocks("python")
    call = next(
        node
        for node in ast.walk(ast.parse(python))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "fire"
    )
    assert ast.literal_eval(call.args[0]) == record

    # faust send: another firing of the same workflow, valid and keyed by its group.
    [send] = [b for b in blocks("sh", FAUST_CLI) if "faust -A rflow.streams.app send" in b]
    words = shlex.split(send.replace("\\\n", " "))
    sent = json.loads(words[-1])
    validator().validate(sent)
    assert words[words.index("--key") + 1] == group_of(workflow, sent["payload"]) == sent["group"]


VALID: list[dict[str, Any]] = [
    RECORD,
    {**RECORD, "group": None},
    {key: value for key, value in RECORD.items() if key != "group"},
    {**RECORD, "payload": {"amount": str(2**200)}},
    {**RECORD, "received_at": "2026-05-06T09:08:09+02:00"},
]
INVALID: list[tuple[dict[str, Any], str]] = [
    ({key: value for key, value in RECORD.items() if key != "kind"}, 'no "kind"'),
    ({key: value for key, value in RECORD.items() if key != "v"}, 'no "v" (record version)'),
    ({**RECORD, "v": 3}, '"v" (record version) is 3'),
    ({**RECORD, "source": "fax"}, "source"),
    ({**RECORD, "workflow": ""}, "workflow"),
    ({**RECORD, "trigger_key": "k" * 513}, "trigger_key"),
    ({**RECORD, "extra": 1}, "extra"),
    ({**RECORD, "payload": [1]}, "payload"),
    ({key: value for key, value in RECORD.items() if key != "received_at"}, "received_at"),
]


def encoded(document: dict[str, Any]) -> bytes:
    # The standard library writes integers of any size as JSON numbers, as other
    # producers do.
    return json.dumps(document).encode()


@pytest.mark.parametrize("document", VALID)
def test_what_the_schema_accepts_a_worker_decodes(document):
    validator().validate(document)
    assert isinstance(decode(encoded(document)), TriggerRecord)


@pytest.mark.parametrize(("document", "reason"), INVALID)
def test_what_the_schema_refuses_a_worker_dead_letters(document, reason):
    assert list(validator().iter_errors(document)), document
    with pytest.raises(DecodeError) as refused:
        decode(encoded(document))
    assert reason in refused.value.reason
