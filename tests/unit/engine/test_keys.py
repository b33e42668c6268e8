"""Keys as they leave the engine: the idempotency key as an HTTP header value."""

from __future__ import annotations

from rflow.engine.keys import header_value


def test_a_printable_key_is_sent_as_it_is():
    assert header_value("order-paid:orders:107:pay") == "order-paid:orders:107:pay"
    assert header_value("a key with spaces ~!") == "a key with spaces ~!"


def test_a_key_a_header_cannot_carry_is_sent_as_its_digest():
    for key in ("manual:echo:\x00nul:call", "line\nbreak", "café", "tab\there"):
        value = header_value(key)
        assert value.startswith("sha256:") and len(value) == 7 + 64
        assert all(" " <= ch <= "~" for ch in value)
    # Distinct keys stay distinct, and one key always gives the same value.
    assert header_value("a\x00") != header_value("a\x01")
    assert header_value("café") == header_value("café")
