"""Topic records: round trips, exact big integers, and reasons for every refusal."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rflow.codecs import (
    MAX_RECORD_BYTES,
    DeadLetter,
    DecodeError,
    RunJournal,
    SendControl,
    SendRequest,
    TriggerRecord,
    decode,
    encode,
    encode_journal,
)
from rflow.codecs import json as rjson
from rflow.engine import Execute, Journal

WHEN = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)


def trigger(**payload) -> TriggerRecord:
    return TriggerRecord(
        workflow="w", trigger_key="k", source="manual", payload=payload, received_at=WHEN
    )


def test_trigger_round_trips():
    record = trigger(to="0xabc", n=3)
    assert decode(encode(record)) == record
    assert decode(encode(record), TriggerRecord) == record


def test_partition_key_is_the_group_or_the_trigger_key():
    assert trigger().partition_key == "k"
    grouped = trigger().model_copy(update={"group": "0xsender"})
    assert grouped.partition_key == "0xsender"


def test_integers_beyond_64_bits_stay_exact():
    amount = 2**256 - 1
    data = encode(trigger(amount=amount, small=5, nested=[{"x": -(2**100)}]))
    payload = decode(data).payload
    assert int(payload["amount"]) == amount
    assert payload["small"] == 5
    assert int(payload["nested"][0]["x"]) == -(2**100)


def test_encoding_is_stable():
    assert encode(trigger(b=1, a=2)) == encode(trigger(a=2, b=1))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (None, "empty record: it has no value (a tombstone?); expected one JSON object"),
        (b"\x00\xff", "not JSON: its bytes are not UTF-8; a record is one JSON object, and "),
        (
            b"nope",
            "not JSON: invalid literal, expected 'null': line 1 column 1 (char 0); a record is "
            "one JSON object, and this one begins 'nope'",
        ),
        (b'"text"', "not a JSON object: the record is a string; expected an object such as"),
        (
            b"{}",
            "no \"kind\" (record type): expected one of 'call', 'dead_letter', 'pause_changed', "
            "'retry', 'run_event', 'run_journal', 'send', 'send_control', 'trigger', "
            "'trigger_retracted'",
        ),
        (b'{"kind": "launch"}', "\"kind\" (record type) is 'launch', which no rflow record is"),
        (
            b'{"kind": "trigger"}',
            'no "v" (record version): a \'trigger\' record carries one of "v": 1, "v": 2',
        ),
        (
            b'{"kind": "trigger", "v": 3}',
            "\"v\" (record version) is 3: this worker reads 'trigger' records with one of "
            '"v": 1, "v": 2',
        ),
        (
            b'{"kind": "send", "v": true}',
            "\"v\" (record version) is true: this worker reads 'send' records with one of "
            '"v": 1, "v": 2',
        ),
        (
            b'{"kind": "trigger", "v": 1, "workflow": "w", "trigger_key": "k", "source": "fax", '
            b'"received_at": "2026-01-01T00:00:00Z"}',
            "invalid 'trigger' record: \"source\" is 'fax': expected 'event', 'webhook', "
            "'schedule' or 'manual'",
        ),
        (
            b'{"kind": "trigger", "v": 1, "workflow": "w", "trigger_key": "k", "source": "manual", '
            b'"received_at": "2026-01-01T00:00:00Z", "extra": 1}',
            "invalid 'trigger' record: unexpected field \"extra\" (not part of this record)",
        ),
        (
            b'{"kind": "trigger", "v": 1, "workflow": "", "source": "manual", "payload": [1], '
            b'"received_at": "yesterday"}',
            "invalid 'trigger' record: \"workflow\" is '': expected at least 1 character; no "
            '"trigger_key" (a required field); "payload" is a list: expected a JSON object; '
            "\"received_at\" is 'yesterday': expected an RFC 3339 time with a time zone, such "
            "as 2026-05-06T07:08:09Z",
        ),
    ],
)
def test_refusals_say_why(data, reason):
    with pytest.raises(DecodeError) as err:
        decode(data)
    assert err.value.reason.startswith(reason)


def test_oversized_records_are_refused_before_parsing():
    with pytest.raises(DecodeError, match=f"exceeds the {MAX_RECORD_BYTES}-byte limit"):
        decode(b" " * (MAX_RECORD_BYTES + 1))


def test_expecting_one_kind_refuses_another():
    letter = DeadLetter(
        topic="t", partition=0, offset=1, key=None, reason="r", raw="", failed_at=WHEN
    )
    with pytest.raises(DecodeError, match="expected a 'trigger' record, got 'dead_letter'"):
        decode(encode(letter), TriggerRecord)


@given(st.binary(max_size=512))
def test_arbitrary_bytes_never_raise_anything_but_decode_error(data):
    with contextlib.suppress(DecodeError):
        decode(data)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_json_round_trips_within_64_bits(value):
    assert rjson.loads(rjson.dumps(value)) == value


def test_big_integers_written_as_json_numbers_by_other_producers_stay_exact():
    raw = b'{"kind": "trigger", "v": 1, "workflow": "w", "trigger_key": "k", "source": "manual", '
    raw += b'"received_at": "2026-01-01T00:00:00Z", "payload": {"wei": 123456789012345678901234567890}}'
    assert decode(raw).payload["wei"] == 123456789012345678901234567890


def test_deeply_nested_json_is_refused_before_any_parser_recurses():
    from rflow.codecs import json as rjson

    with pytest.raises(rjson.JSONDecodeError, match="nested deeper than 512 levels"):
        rjson.loads(b"[" * 100_000 + b"1" * 30)
    with pytest.raises(DecodeError):
        decode(b"[" * 100_000)


def journal(event: str, run_id: str = "r1", **data) -> Journal:
    return Journal(run_id=run_id, workflow="w", event=event, status="running", at=WHEN, data=data)


def test_a_run_journal_carries_one_decisions_entries_and_still_reads_version_1():
    entries = [journal("run_started"), journal("step_started", input={"n": 2})]
    record = decode(encode(RunJournal(entries=entries)), RunJournal)
    assert record.v == 2 and record.journal == entries
    old = b'{"kind":"run_journal","v":1,"entry":' + entries[0].model_dump_json().encode() + b"}"
    assert decode(old, RunJournal).journal == entries[:1]


def test_a_journal_encoded_from_its_entries_is_the_records_own_bytes():
    from rflow.engine import Settle

    entries = [
        journal("run_started", trigger={"n": 2**70}),
        journal("step_settled", output={"k": [1, "x"]}),
        Settle(run_id="r1", workflow="w", status="failed", journal={"a": 1}),
    ]
    assert encode_journal(entries) == encode(RunJournal(entries=entries))


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ({"v": 2, "entries": []}, "carries its entries in 'entries'"),
        ({"v": 1, "entries": ["E"]}, "carries exactly one entry"),
        ({"v": 2, "entries": ["E", "F"]}, "belongs to one run"),
    ],
)
def test_a_run_journal_of_the_wrong_shape_is_refused_with_the_reason(doc, reason):
    entries = {"E": journal("run_started"), "F": journal("run_started", run_id="r2")}
    doc = {
        "kind": "run_journal",
        **doc,
        "entries": [json.loads(entries[e].model_dump_json()) for e in doc["entries"]],
    }
    with pytest.raises(DecodeError, match=reason):
        decode(json.dumps(doc).encode())


def test_a_decisions_journal_is_one_record_unless_that_would_be_large():
    from rflow.agents.effects import JOURNAL_RECORD_BYTES, journal_records

    small = [journal("step_settled"), journal("run_settled")]
    [together] = journal_records(small)
    assert decode(together, RunJournal).journal == small
    big = [journal("step_settled", output="x" * JOURNAL_RECORD_BYTES), journal("run_settled")]
    apart = journal_records(big)
    assert [decode(value, RunJournal).journal for value in apart] == [[big[0]], [big[1]]]
    assert all(len(value) < MAX_RECORD_BYTES for value in apart)


def send_request(**execute) -> SendRequest:
    fields = {
        "run_id": "r1",
        "workflow": "w",
        "path": "pay",
        "visit": 1,
        "attempt": 1,
        "key": "w:k:pay",
        "kind": "send_transaction",
        "action": {"network": "local", "relayer": "payout"},
        **execute,
    }
    return SendRequest(execute=Execute(**fields), reply_key="k")


def test_a_send_carries_its_deadline_from_version_2_and_version_1_is_still_read():
    record = send_request(deadline=WHEN)
    assert record.v == 2
    assert decode(encode(record), SendRequest).execute.deadline == WHEN
    old = json.loads(encode(send_request()))
    old["v"] = 1
    assert decode(json.dumps(old).encode(), SendRequest).execute.deadline is None
    old["execute"]["deadline"] = WHEN.isoformat()
    with pytest.raises(DecodeError, match="a version 1 send carries no deadline"):
        decode(json.dumps(old).encode())


def test_a_send_control_is_keyed_like_the_sends_it_controls():
    control = SendControl(
        request_id="q1",
        send_key="w:k:pay",
        network="local",
        relayer="payout",
        action="cancel",
        requested_at=WHEN,
    )
    assert control.partition_key == send_request().partition_key == "local:payout"
    assert decode(encode(control), (SendRequest, SendControl)) == control
    letter = DeadLetter(
        topic="t", partition=0, offset=1, key=None, reason="r", raw="", failed_at=WHEN
    )
    with pytest.raises(
        DecodeError, match="expected a 'send' or 'send_control' record, got 'dead_letter'"
    ):
        decode(encode(letter), (SendRequest, SendControl))
