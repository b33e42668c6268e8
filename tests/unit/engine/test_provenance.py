"""What a worker believes of a record on the triggers topic (rflow.engine.provenance)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rflow.codecs import (
    CallRecord,
    RetryRecord,
    TriggerRecord,
    TriggerRetracted,
    decode,
    encode,
)
from rflow.engine import provenance
from rflow.engine.provenance import Accepts, Believed, Keyring, Outside, Refused, judge, vouch
from rflow.engine.state import ParentLink

WHEN = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
OLD = "old:" + "o" * 40
NEW = "new:" + "n" * 40
KEYS = Keyring.parse(f"{NEW},{OLD}")
ORDERS = Accepts("order-paid", ("manual",), ("account", "order"))
TIPS = Accepts("tip-reward", ("event",), None)


def firing(source: str = "event", key: str = "event:31337:0xab:3", **fields) -> TriggerRecord:
    return TriggerRecord(
        workflow=fields.pop("workflow", "tip-reward"),
        trigger_key=key,
        source=source,
        payload=fields.pop("payload", {"args": {"from": "0xdEaD", "amount": 10**30}, "x": 0.1}),
        received_at=WHEN,
        **fields,
    )


def over_the_wire(record):
    """As a worker reads it: encoded, then decoded."""
    return decode(encode(record))


@pytest.mark.parametrize("source", ["event", "webhook", "schedule", "manual"])
def test_a_firing_rflow_vouched_for_is_believed_as_read_from_the_topic(source):
    signed = vouch(firing(source, f"{source}:x:1"), KEYS)
    assert signed.v == 2 and signed.proof.startswith("v1:new:")
    assert judge(over_the_wire(signed), KEYS, TIPS) == Believed("new")


@pytest.mark.parametrize("source", ["event", "webhook", "schedule"])
def test_a_claim_of_rflows_ingress_without_a_proof_is_unauthenticated(source):
    verdict = judge(over_the_wire(firing(source, f"{source}:x:1")), KEYS, TIPS)
    assert isinstance(verdict, Refused) and verdict.code == "unauthenticated_source"
    assert verdict.reason.startswith(
        f"unauthenticated_source: a record claiming source {source!r} is believed only with "
        "the proof of rflow's ingress, and it carries no proof"
    )


def test_a_changed_field_breaks_the_proof():
    signed = over_the_wire(vouch(firing(), KEYS))
    for change in (
        {"payload": {"args": {"from": "0xBEEF", "amount": 10**30}, "x": 0.1}},
        {"workflow": "other"},
        {"trigger_key": "event:31337:0xab:4"},
        {"group": "g"},
        {"received_at": datetime(2026, 5, 6, tzinfo=UTC)},
        {"source": "webhook"},
    ):
        verdict = judge(signed.model_copy(update=change), KEYS, TIPS)
        assert isinstance(verdict, Refused), change
        assert "does not verify with key 'new'" in verdict.message, change


def test_keys_rotate_by_listing_the_new_one_first():
    by_old = vouch(firing(), Keyring.parse(OLD))
    assert judge(by_old, KEYS, TIPS) == Believed("old")  # both listed: both verify
    only_new = Keyring.parse(NEW)
    verdict = judge(by_old, only_new, TIPS)
    assert isinstance(verdict, Refused)
    assert "names key 'old', which this worker does not hold (it holds new)" in verdict.message
    assert vouch(firing(), KEYS).proof.startswith("v1:new:")  # the first listed signs
    elsewhere = vouch(firing(), Keyring.parse("new:" + "x" * 40))  # same id, other secret
    assert isinstance(judge(elsewhere, KEYS, TIPS), Refused)


def test_a_retraction_and_a_retry_are_believed_only_with_a_proof():
    retraction = TriggerRetracted(
        workflow="tip-reward",
        trigger_key="event:31337:0xab:3",
        reason="reorg",
        retracted_at=WHEN,
    )
    retry = RetryRecord(
        workflow="tip-reward",
        run_id="r2",
        retry_of="r1",
        trigger_key="event:31337:0xab:3",
        previous={"forged": "state"},
        requested_at=WHEN,
    )
    for record in (retraction, retry):
        refused = judge(over_the_wire(record), KEYS, TIPS)
        assert isinstance(refused, Refused) and refused.code == "unauthenticated_source"
        assert judge(over_the_wire(vouch(record, KEYS)), KEYS, TIPS) == Believed("new")


def test_a_vouched_firing_lies_in_its_sources_namespace():
    verdict = judge(vouch(firing("event", "orders:1"), KEYS), KEYS, TIPS)
    assert verdict == Refused(
        "reserved_key",
        "a vouched firing from source 'event' is keyed 'orders:1', outside its namespace "
        "('event:' or 'event@')",
    )
    # A trigger with an id of its own keys its firings <kind>@<id>:...
    named = vouch(firing("webhook", "webhook@backup:reconcile:d-1:1"), KEYS)
    assert judge(named, KEYS, TIPS) == Believed("new")


def test_an_outside_firing_needs_a_manual_trigger_that_takes_outside_producers():
    outside = firing(
        "manual", "orders:1", workflow="order-paid", payload={"account": "a", "order": 1}
    )
    assert judge(outside, KEYS, ORDERS) == Outside()
    assert judge(outside, KEYS, None) == Outside()  # an unknown workflow: the runner's
    refused = judge(outside.model_copy(update={"workflow": "tip-reward"}), KEYS, TIPS)
    assert refused == Refused(
        "not_accepted",
        "workflow 'tip-reward' takes no firings from outside producers: it has no manual "
        "trigger (it starts on event)",
    )
    closed = Accepts("order-paid", ("manual",), ("account", "order"), outside=False)
    assert judge(outside, KEYS, closed).code == "not_accepted"
    assert judge(
        vouch(outside.model_copy(update={"trigger_key": "manual:o:1"}), KEYS), KEYS, closed
    ) == (
        Believed("new")  # rflow run and the API vouch for theirs
    )


@pytest.mark.parametrize(
    ("payload", "said"),
    [
        (
            {"account": "a"},
            "payload: missing input(s) 'order' for 'order-paid'; it takes: account, order",
        ),
        (
            {"account": "a", "order": 1, "amount": 9},
            "payload: unknown input(s) 'amount' for 'order-paid'; it takes: account, order",
        ),
    ],
)
def test_an_outside_firing_carries_exactly_the_declared_inputs(payload, said):
    record = firing("manual", "orders:1", workflow="order-paid", payload=payload)
    assert judge(record, KEYS, ORDERS) == Refused("invalid_input", said)


@pytest.mark.parametrize(
    "prefix",
    ["event:", "webhook:", "schedule:", "manual:", "retry-of:", "webhook@backup:", "event@"],
)
def test_an_outside_firing_cannot_take_a_key_of_rflows_own(prefix):
    record = firing("manual", prefix + "31337:0xab:3", workflow="order-paid",
                    payload={"account": "a", "order": 1})  # fmt: skip
    verdict = judge(record, KEYS, ORDERS)
    assert isinstance(verdict, Refused) and verdict.code == "reserved_key"
    said = verdict.message.split("starts with ", 1)[1].split(",", 1)[0].strip("'")
    assert prefix.startswith(said) and "a namespace of rflow's own firings" in verdict.message


def test_a_forged_proof_on_a_manual_record_is_unauthenticated_not_outside():
    record = firing(
        "manual", "orders:1", workflow="order-paid", payload={"account": "a", "order": 1}
    )
    forged = record.model_copy(update={"v": 2, "proof": "v1:new:" + "0" * 64})
    assert judge(forged, KEYS, ORDERS).code == "unauthenticated_source"


def test_a_run_event_on_the_triggers_topic_is_refused():
    assert provenance.misplaced("run_event").code == "unauthenticated_source"
    assert provenance.misplaced("pause_changed") is None


def test_without_keys_nothing_is_vouched_and_no_claim_is_believed():
    with pytest.raises(provenance.KeyringError, match="RFLOW_INGRESS_KEYS is not set"):
        vouch(firing(), Keyring())
    verdict = judge(vouch(firing(), KEYS), Keyring(), TIPS)
    assert "which this worker does not hold (it holds none)" in verdict.message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("nokey", "entry 1 is not id:secret"),
        ("k1:short", "the secret of key 'k1' is shorter than 32 characters"),
        (f"{NEW},{NEW}", "key 'new' is listed twice"),
        ("bad id:" + "s" * 40, "entry 1 is not id:secret"),
    ],
)
def test_a_malformed_keyring_says_which_entry_and_never_the_secret(text, said):
    with pytest.raises(provenance.KeyringError, match=said) as refused:
        Keyring.parse(text)
    assert "s" * 40 not in str(refused.value) and "n" * 40 not in str(refused.value)


def test_a_key_file_has_one_key_per_line_and_comments():
    ring = Keyring.parse(f"# rotated 2026-05\n{NEW}\n\n{OLD}\n")
    assert ring.ids == ["new", "old"]
    assert "n" * 40 not in repr(ring)


CHILD_KEY = "r0123456789abcdef01234567/settle"


def child_firing() -> CallRecord:
    return CallRecord(
        workflow="settle-invoice",
        trigger_key=CHILD_KEY,
        payload={"amount": 5},
        received_at=WHEN,
        parent=ParentLink(
            run_id="r0123456789abcdef01234567",
            workflow="invoice-run",
            path="settle",
            visit=1,
            attempt=1,
            wait_id="w1",
        ),
    )


SETTLE = Accepts("settle-invoice", ("manual",), ("amount",))


def test_a_child_runs_firing_and_its_retraction_are_believed_only_with_a_worker_proof():
    forged = judge(over_the_wire(child_firing()), KEYS, SETTLE)
    assert isinstance(forged, Refused) and forged.code == "unauthenticated_source"
    assert "a record claiming to start a child run" in forged.reason
    assert judge(over_the_wire(vouch(child_firing(), KEYS)), KEYS, SETTLE) == Believed("new")
    retraction = TriggerRetracted(
        workflow="settle-invoice",
        trigger_key=CHILD_KEY,
        reason="its parent was cancelled",
        retracted_at=WHEN,
    )
    assert isinstance(judge(over_the_wire(retraction), KEYS, SETTLE), Refused)
    # A child's key is not a chain event's: its retraction keeps to no event namespace.
    assert judge(over_the_wire(vouch(retraction, KEYS)), KEYS, SETTLE) == Believed("new")


def test_an_outside_firing_cannot_take_a_child_runs_key_first():
    outside = firing("manual", CHILD_KEY, workflow="settle-invoice", payload={"amount": 5})
    verdict = judge(over_the_wire(outside), KEYS, SETTLE)
    assert isinstance(verdict, Refused) and verdict.code == "reserved_key", verdict
    assert "r0123456789abcdef01234567/" in verdict.message
