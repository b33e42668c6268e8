"""What a dead letter's replay produces, and every reason it refuses."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from rflow.codecs import DEAD_LETTER_RAW_LIMIT, TriggerRecord
from rflow.replay import Deployed, Refused, plan

PREFIX = "t1."
FIRING = {
    "kind": "trigger",
    "v": 1,
    "workflow": "payout",
    "trigger_key": "order:1",
    "group": "acct-7",
    "source": "manual",
    "payload": {"amount": 5},
    "received_at": "2026-05-06T07:08:09Z",
}
DEPLOYED = Deployed(3, frozenset({"payout"}))


@dataclass
class Letter:
    id: int = 1
    topic: str = PREFIX + "rflow.triggers"
    key: str | None = "acct-7"
    raw: str | None = json.dumps(FIRING)
    reason: str = "workflow 'payout' is not declared"


def refusal(letter: Letter, deployed: Deployed | None = DEPLOYED) -> str:
    with pytest.raises(Refused) as caught:
        plan(letter, PREFIX, deployed)
    return str(caught.value)


def test_a_firing_goes_back_byte_for_byte_under_its_key() -> None:
    letter = Letter()
    replay = plan(letter, PREFIX, DEPLOYED)
    assert (replay.topic, replay.key, replay.value) == (
        "t1.rflow.triggers",
        b"acct-7",
        letter.raw.encode(),
    )
    assert isinstance(replay.record, TriggerRecord)


def test_a_record_other_than_a_firing_needs_no_deployment() -> None:
    retraction = {
        "kind": "trigger_retracted",
        "v": 1,
        "workflow": "gone",
        "trigger_key": "order:1",
        "reason": "reorg",
        "retracted_at": "2026-05-06T07:08:09Z",
    }
    letter = Letter(key="order:1", raw=json.dumps(retraction))
    assert plan(letter, PREFIX, None).key == b"order:1"


@pytest.mark.parametrize(
    ("letter", "reason"),
    [
        (Letter(raw=""), "the dead letter holds no record"),
        (Letter(raw=None), "the dead letter holds no record"),
        (Letter(raw='{"kind": "trigger", \ufffd}'), "not the original bytes"),
        (Letter(key="acct\ufffd"), "not the original bytes"),
        (
            Letter(raw="x" * DEAD_LETTER_RAW_LIMIT),
            f"the stored record is cut at {DEAD_LETTER_RAW_LIMIT // 1024} KiB",
        ),
        (Letter(raw="not json"), "it does not decode (not JSON"),
        (Letter(raw='{"kind": "launch", "v": 1}'), 'it does not decode ("kind" (record type) is'),
        (
            Letter(topic=PREFIX + "rflow.sends", key="local:payout"),
            "it does not decode (",
        ),
        (Letter(topic=PREFIX + "rflow.dlq"), "it came from the dead-letter topic itself"),
        (
            Letter(topic="other.rflow.triggers"),
            "topic 'other.rflow.triggers' is not a topic a replay writes to under this "
            "configuration (RFLOW_TOPIC_PREFIX='t1.'",
        ),
        (Letter(topic=PREFIX + "rflow.state.runs"), "is not a topic a replay writes to"),
        (Letter(key="acct-8"), "its key 'acct-8' is not the firing's partition key 'acct-7'"),
        (Letter(key=None), "its key none is not the firing's partition key 'acct-7'"),
    ],
)
def test_refusals_say_why(letter: Letter, reason: str) -> None:
    assert reason in refusal(letter)


def test_a_firing_of_a_workflow_not_deployed_is_refused() -> None:
    assert refusal(Letter(), None).startswith("nothing is deployed")
    assert refusal(Letter(), Deployed(4, frozenset({"sweep"}))).startswith(
        "workflow 'payout' is not in the newest deployment (4)"
    )
