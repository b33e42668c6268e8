"""The JSON written to Postgres's JSONB columns (rflow.codecs.json.dumps_exact)."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime

from rflow.codecs.json import dumps_exact

WEI = 10**20 + 7  # 100 ether and 7 wei: beyond 64 bits


def test_an_integer_beyond_64_bits_stays_a_number_with_every_digit():
    written = dumps_exact({"amount": WEI, "steps": [{"n": -(2**70)}]})
    assert written == b'{"amount":100000000000000000007,"steps":[{"n":-1180591620717411303424}]}'
    assert json.loads(written)["amount"] == WEI


def test_keys_keep_their_order():
    assert dumps_exact({"b": 1, "a": WEI}) == b'{"b":1,"a":100000000000000000007}'


def test_a_document_with_a_long_integer_writes_everything_else_as_without_one():
    when = datetime(2026, 12, 3, 14, 0, tzinfo=UTC)
    ident = uuid.UUID(int=5)
    rest = {"at": when, "id": ident, "ratio": math.nan, 3: "three", "ok": True}
    plain = json.loads(dumps_exact(rest))
    assert json.loads(dumps_exact({**rest, "amount": WEI})) == {**plain, "amount": WEI}
    assert plain == {
        "at": "2026-12-03T14:00:00+00:00",
        "id": str(ident),
        "ratio": None,  # Postgres refuses NaN in JSONB
        "3": "three",
        "ok": True,
    }


def test_pretty_writes_a_wide_integer_as_the_number_it_is():
    from rflow.codecs.json import pretty

    assert (
        pretty({"b": [2**70], "a": 1})
        == '{\n  "a": 1,\n  "b": [\n    1180591620717411303424\n  ]\n}'
    )
