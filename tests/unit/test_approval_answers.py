"""Who may answer an approval, with what, and what the inbox shows of it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rflow.approvals import Refused, answer, inbox_entry


def spec(**approval) -> dict:
    return {"approval": {"prompt": "go?", "type": "approve_reject", **approval}}


def test_an_approver_answers_as_the_principal_given():
    assert answer(spec(approvers=["alice"]), "approve", "alice") == {
        "decision": "approve",
        "by": "alice",
    }
    assert answer(spec(), "reject", "anyone", text="too much") == {
        "decision": "reject",
        "by": "anyone",
        "text": "too much",
    }


CHOICE = spec(
    type="choice",
    choices=[
        {"label": "Ship", "value": "ship", "color": "green"},
        {"label": "Hold", "value": "hold"},
    ],
)


def test_a_choice_must_be_one_of_the_values():
    assert answer(CHOICE, "approve", "alice", choice="hold")["choice"] == "hold"
    for kwargs, message in [
        ({"choice": "Ship"}, "'Ship' is not one of the choices: 'ship', 'hold'"),
        ({}, "approving a choice approval takes a choice: one of 'ship', 'hold'"),
    ]:
        with pytest.raises(Refused) as refused:
            answer(CHOICE, "approve", "alice", **kwargs)
        assert (refused.value.status, str(refused.value)) == (400, message)
    with pytest.raises(Refused, match="a rejection chooses nothing"):
        answer(CHOICE, "reject", "alice", choice="ship")
    assert answer(CHOICE, "reject", "alice") == {"decision": "reject", "by": "alice"}
    with pytest.raises(Refused, match="a choice answers a choice approval; this one is"):
        answer(spec(), "approve", "alice", choice="ship")
    # A wait parked before options had labels lists plain strings.
    assert answer(spec(type="choice", choices=["a", "b"]), "approve", "x", choice="b")


def test_a_freeform_approval_is_approved_with_its_text():
    with pytest.raises(Refused, match="takes its text"):
        answer(spec(type="freeform"), "approve", "alice")
    assert answer(spec(type="freeform"), "approve", "alice", text="42")["text"] == "42"


def test_the_inbox_entry_of_a_wait():
    at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    row = {
        "run_id": "r1",
        "workflow": "w",
        "path": "ok",
        "spec": {
            "approval": {
                **CHOICE["approval"],
                "context_fields": [{"name": "to", "value": "0xab"}, {"name": "amount", "value": 5}],
                "approvers": ["alice"],
                "priority": "urgent",
            },
            "timeout": "1h",
        },
        "timeout_at": at,
        "created_at": at,
        "escalated_at": None,
    }
    entry = inbox_entry(row)
    assert list(entry["context"]) == ["to", "amount"]  # as declared
    assert entry == {
        "run_id": "r1",
        "workflow": "w",
        "step": "ok",
        "prompt": "go?",
        "type": "choice",
        "choices": [
            {"label": "Ship", "value": "ship", "color": "green"},
            {"label": "Hold", "value": "hold"},
        ],
        "context": {"to": "0xab", "amount": 5},
        "approvers": ["alice"],
        "priority": "urgent",
        "deadline": "2026-03-01T12:00:00+00:00",
        "escalated_at": None,
        "waiting_since": "2026-03-01T12:00:00+00:00",
    }
