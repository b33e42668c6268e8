"""Property tests of trigger-log decoding: what a contract emits comes back exactly, and
anything else a node could send is a :class:`LogDecodeError`, never another exception."""

from __future__ import annotations

from typing import Any

from eth_abi import encode
from eth_utils import to_checksum_address
from hypothesis import given, settings
from hypothesis import strategies as st

from rflow.ingress.logs import EventAbi, LogDecodeError, decode_log

EVENT = EventAbi.from_abi(
    {
        "type": "event",
        "name": "Paid",
        "inputs": [
            {"name": "payer", "type": "address", "indexed": True},
            {"name": "ref", "type": "string", "indexed": True},
            {"name": "amount", "type": "uint256", "indexed": False},
            {"name": "delta", "type": "int128", "indexed": False},
            {"name": "memo", "type": "string", "indexed": False},
            {"name": "parts", "type": "uint32[]", "indexed": False},
            {
                "name": "order",
                "type": "tuple",
                "indexed": False,
                "components": [
                    {"name": "id", "type": "bytes32"},
                    {"name": "flag", "type": "bool"},
                ],
            },
        ],
    }
)

addresses = st.binary(min_size=20, max_size=20).map(lambda b: to_checksum_address(b))
hex32 = st.binary(min_size=32, max_size=32).map(lambda b: "0x" + b.hex())


@settings(max_examples=200, deadline=None)
@given(
    payer=addresses,
    ref_topic=hex32,
    amount=st.integers(0, 2**256 - 1),
    delta=st.integers(-(2**127), 2**127 - 1),
    memo=st.text(max_size=200),
    parts=st.lists(st.integers(0, 2**32 - 1), max_size=20),
    order_id=st.binary(min_size=32, max_size=32),
    flag=st.booleans(),
)
def test_an_emitted_log_decodes_to_exactly_what_was_emitted(
    payer, ref_topic, amount, delta, memo, parts, order_id, flag
):
    data = encode(
        ["uint256", "int128", "string", "uint32[]", "(bytes32,bool)"],
        [amount, delta, memo, parts, (order_id, flag)],
    )
    log = {
        "topics": [EVENT.topic0, "0x" + encode(["address"], [payer]).hex(), ref_topic],
        "data": "0x" + data.hex(),
    }
    assert decode_log(EVENT, log) == {
        "payer": payer,
        "ref": ref_topic,  # an indexed string is only its hash
        "amount": amount,
        "delta": delta,
        "memo": memo,
        "parts": parts,
        "order": {"id": "0x" + order_id.hex(), "flag": flag},
    }


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=10,
)
hexes = st.binary(max_size=400).map(lambda b: "0x" + b.hex())


@settings(max_examples=500, deadline=None)
@given(
    topics=st.one_of(
        json_values,
        st.lists(st.one_of(hex32, hexes, json_values), max_size=5),
        st.lists(hex32, min_size=3, max_size=3).map(lambda t: [EVENT.topic0, *t[1:]]),
    ),
    data=st.one_of(hexes, json_values, st.just("0x")),
)
def test_anything_else_is_refused_with_a_reason(topics: Any, data: Any):
    log = {"topics": topics, "data": data}
    try:
        decoded = decode_log(EVENT, log)
    except LogDecodeError as exc:
        assert str(exc)
    else:
        # Only a well-formed log of this event decodes, with every argument named.
        assert list(decoded) == [p.name for p in EVENT.inputs]
