"""What the console shows a person: amounts, durations, redaction, diffs, spend series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rflow.console import present


def test_amounts_read_as_people_write_them():
    assert present.ether(5 * 10**17) == "0.5 ETH"
    assert present.ether(1) == "0.000000000000000001 ETH"
    assert present.ether(10**24) == "1,000,000 ETH"
    assert present.gwei(2_539_466_482) == "2.539 gwei"
    assert present.gwei(10**9) == "1 gwei"
    assert present.fee(51_533 * 1_894_733_242) == "0.0000976413 ETH"
    assert present.fee(21_000 * 10**9) == "0.000021 ETH"
    assert present.asset_amount("Token", 999_993) == "999,993 Token"
    assert present.asset_amount("native", None) == "—"
    assert present.short_hash("0x" + "ab" * 32) == "0xababab…ababab"
    assert present.percent_text(0.0007) == "< 0.1 %"
    assert present.percent(7, 0) == 100.0


def test_durations_and_engine_timestamps():
    assert present.span_text(timedelta(milliseconds=850)) == "850 ms"
    assert present.span_text(timedelta(seconds=185)) == "3 min 5 s"
    assert present.span_text(timedelta(hours=50)) == "2 d 2 h"
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    assert present.ago(now - timedelta(seconds=24.4), at=now) == "24 s ago"
    assert present.ago(now + timedelta(hours=2), at=now) == "in 2 h"
    assert (
        present.readable("an approval at step review until 2026-12-02T14:58:37.080021+00:00")
        == "an approval at step review until 2026-12-02 14:58:37 UTC"
    )


def test_secrets_are_hidden_but_placeholders_say_which_variable():
    shown = present.redact(
        {
            "url": "https://api.example.com",
            "headers": {"Authorization": "Bearer abc123", "X-Api-Key": "${API_KEY}"},
            "body": {"amount": 5, "password": "hunter2", "tokens": ["t1", "t2"]},
        }
    )
    assert shown["headers"] == {"Authorization": present.REDACTED, "X-Api-Key": "${API_KEY}"}
    assert shown["body"] == {
        "amount": 5,
        "password": present.REDACTED,
        "tokens": [present.REDACTED, present.REDACTED],
    }
    assert shown["url"] == "https://api.example.com"


def test_fields_flatten_a_value_for_reading():
    lines = present.fields({"tx": {"hash": "0xab", "gas_used": 51_533, "ok": True}, "n": None})
    assert [(f.label, f.text) for f in lines] == [
        ("tx.hash", "0xab"),
        ("tx.gas_used", "51,533"),
        ("tx.ok", "yes"),
        ("n", "null"),
    ]


def test_block_numbers_timestamps_and_chain_ids_are_plain_integers_amounts_are_grouped():
    firing = {
        "chain_id": 31337,
        "block": {"number": 18_000_123, "timestamp": 1_796_472_708, "hash": "0x01"},
        "tx": {"hash": "0x02", "index": 12_345},
        "log_index": 10_001,
        "args": {"amount": 1_250_000_000_000_000_000, "request_id": 123_456},
        "balance": 51_533,
    }
    assert [(f.label, f.text) for f in present.fields(firing)] == [
        ("chain_id", "31337"),
        ("block.number", "18000123"),
        ("block.timestamp", "1796472708"),
        ("block.hash", "0x01"),
        ("tx.hash", "0x02"),
        ("tx.index", "12345"),
        ("log_index", "10001"),
        ("args.amount", "1,250,000,000,000,000,000"),
        ("args.request_id", "123456"),
        ("balance", "51,533"),
    ]


def test_a_diff_pairs_a_changed_line_with_its_replacement():
    old = present.definition_text({"steps": [{"id": "greet", "msg": "hello", "timeout": None}]})
    new = present.definition_text({"steps": [{"id": "greet", "msg": "hi there"}]})
    assert "timeout" not in old  # unset fields are not shown
    lines = present.diff(old, new)
    assert [(line.kind, line.old.strip(), line.new.strip()) for line in lines] == [
        ("same", "steps:", "steps:"),
        ("same", "- id: greet", "- id: greet"),
        ("changed", "msg: hello", "msg: hi there"),
    ]
    assert present.diff(old, old) == []


def test_the_spend_series_climbs_by_each_charge_from_the_window_start():
    start = datetime(2026, 12, 1, tzinfo=UTC)
    at = start + timedelta(hours=24)
    charges = [
        {"created_at": start - timedelta(hours=1), "asset": "Token", "amount": 5},  # live
        {"created_at": start + timedelta(hours=2), "asset": "Token", "amount": 7},
        {"created_at": start + timedelta(hours=3), "asset": "native", "amount": 1},
    ]
    [token] = present.spend_series(charges, {"Token": 100}, start, at)
    assert token.totals == [0, 5, 12, 12]
    assert token.times == [
        start.timestamp(),
        start.timestamp(),
        charges[1]["created_at"].timestamp(),
        at.timestamp(),
    ]
    assert token.cap == 100


def test_timeline_bars_sit_within_the_run():
    start = datetime(2026, 12, 1, tzinfo=UTC)
    steps = [
        {"started_at": start, "settled_at": start + timedelta(seconds=2)},
        {"started_at": start + timedelta(seconds=2), "settled_at": None},
    ]
    first, second = present.timeline(steps, start, start + timedelta(seconds=8))
    assert (first.left, first.width, first.open) == (0.0, 25.0, False)
    assert (second.left, second.width, second.open) == (25.0, 75.0, True)
