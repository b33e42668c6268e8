"""Decoding contract event logs with an ABI, and argument filters."""

from __future__ import annotations

import pytest
from eth_abi import encode
from eth_utils import keccak, to_checksum_address

from rflow.ingress.logs import (
    EventAbi,
    LogDecodeError,
    Param,
    decode_log,
    filter_topic,
    find_events,
    matches,
)

SENDER = "0x" + "ab" * 20
SWAP_ABI = {
    "type": "event",
    "name": "Swap",
    "anonymous": False,
    "inputs": [
        {"name": "sender", "type": "address", "indexed": True},
        {"name": "amountIn", "type": "uint256", "indexed": False},
        {"name": "amountOut", "type": "uint256", "indexed": False},
    ],
}
ORDER_ABI = {
    "type": "event",
    "name": "Order",
    "inputs": [
        {"name": "tag", "type": "string", "indexed": True},
        {"name": "id", "type": "bytes32", "indexed": True},
        {
            "name": "order",
            "type": "tuple",
            "indexed": False,
            "components": [
                {"name": "amount", "type": "uint"},
                {"name": "owner", "type": "address"},
            ],
        },
        {"name": "levels", "type": "int8[]", "indexed": False},
        {"name": "memo", "type": "bytes", "indexed": False},
        {"name": "ok", "type": "bool", "indexed": False},
    ],
}


def topic(value: bytes) -> str:
    return "0x" + value.hex()


def word(kind: str, value) -> str:
    return topic(encode([kind], [value]))


def swap_log(amount_in: int = 5, amount_out: int = 7, **overrides) -> dict:
    event = EventAbi.from_abi(SWAP_ABI)
    entry = {
        "address": "0x" + "11" * 20,
        "topics": [event.topic0, word("address", SENDER)],
        "data": topic(encode(["uint256", "uint256"], [amount_in, amount_out])),
        "blockNumber": "0x2",
        "blockHash": "0x" + "22" * 32,
        "transactionHash": "0x" + "33" * 32,
        "transactionIndex": "0x0",
        "logIndex": "0x1",
        "removed": False,
    }
    entry.update(overrides)
    return entry


def test_the_signature_and_topic_follow_the_canonical_types():
    event = EventAbi.from_abi(SWAP_ABI)
    assert event.signature == "Swap(address,uint256,uint256)"
    assert event.topic0 == topic(keccak(text="Swap(address,uint256,uint256)"))
    order = EventAbi.from_abi(ORDER_ABI)
    assert order.signature == "Order(string,bytes32,(uint256,address),int8[],bytes,bool)"


def test_a_log_decodes_to_named_json_ready_arguments():
    args = decode_log(EventAbi.from_abi(SWAP_ABI), swap_log())
    assert args == {"sender": to_checksum_address(SENDER), "amountIn": 5, "amountOut": 7}


def test_amounts_beyond_64_bits_stay_exact_integers():
    big = 2**256 - 1
    args = decode_log(EventAbi.from_abi(SWAP_ABI), swap_log(big, 10**30))
    assert args["amountIn"] == big and isinstance(args["amountIn"], int)
    assert args["amountOut"] == 10**30


def test_structs_arrays_bytes_and_hashed_indexed_strings():
    event = EventAbi.from_abi(ORDER_ABI)
    owner = "0x" + "cd" * 20
    entry = {
        "topics": [event.topic0, topic(keccak(text="vip")), topic(b"\x01" * 32)],
        "data": topic(
            encode(
                ["(uint256,address)", "int8[]", "bytes", "bool"],
                [(12, owner), [-1, 2], b"\xbe\xef", True],
            )
        ),
    }
    args = decode_log(event, entry)
    assert args == {
        "tag": topic(keccak(text="vip")),
        "id": topic(b"\x01" * 32),
        "order": {"amount": 12, "owner": to_checksum_address(owner)},
        "levels": [-1, 2],
        "memo": "0xbeef",
        "ok": True,
    }


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"topics": "nope"}, "no topics list"),
        ({"topics": ["0x1234"]}, "not 32 bytes"),
        ({"topics": ["0xzz" + "00" * 31]}, "not 0x hex"),
        ({"data": "0x" + "00" * 40}, "cannot decode"),
        ({"data": "beef"}, "not 0x hex"),
        ({"data": "0x0g"}, "not 0x hex"),
    ],
)
def test_malformed_logs_raise_a_decode_error_with_the_reason(change, reason):
    with pytest.raises(LogDecodeError, match=reason):
        decode_log(EventAbi.from_abi(SWAP_ABI), swap_log(**change))


def test_a_log_of_another_shape_is_refused():
    event = EventAbi.from_abi(SWAP_ABI)
    with pytest.raises(LogDecodeError, match="indexed arguments"):
        decode_log(event, swap_log(topics=[event.topic0]))
    other = topic(keccak(text="Other(address,uint256,uint256)"))
    with pytest.raises(LogDecodeError, match="topic 0"):
        decode_log(event, swap_log(topics=[other, word("address", SENDER)]))
    # An address topic with dirty upper bytes is not a valid address encoding.
    with pytest.raises(LogDecodeError):
        decode_log(event, swap_log(topics=[event.topic0, "0x" + "ff" * 32]))


def test_find_events_skips_anonymous_events_and_keeps_overloads():
    anonymous = {**SWAP_ABI, "anonymous": True}
    overload = {**SWAP_ABI, "inputs": SWAP_ABI["inputs"][:2]}
    found = find_events(
        [SWAP_ABI, anonymous, overload, {"type": "function", "name": "Swap"}], "Swap"
    )
    assert [e.signature for e in found] == [
        "Swap(address,uint256,uint256)",
        "Swap(address,uint256)",
    ]
    assert find_events([SWAP_ABI], "Nope") == []
    with pytest.raises(ValueError):
        EventAbi.from_abi({"type": "event", "name": "X", "inputs": "bad"})


def test_filter_topics_match_what_the_evm_stores():
    address = Param("who", "address", True)
    assert filter_topic(address, SENDER.upper().replace("0X", "0x")) == word("address", SENDER)
    assert filter_topic(Param("n", "uint256", True), "0x10") == word("uint256", 16)
    assert filter_topic(Param("n", "uint256", True), "42") == word("uint256", 42)
    assert filter_topic(Param("f", "bool", True), True) == word("bool", True)
    assert filter_topic(Param("s", "string", True), "vip") == topic(keccak(text="vip"))
    assert filter_topic(Param("b", "bytes", True), "0xbeef") == topic(keccak(b"\xbe\xef"))
    assert filter_topic(Param("a", "uint256[]", True), [1]) is None
    with pytest.raises(ValueError):
        filter_topic(Param("n", "uint8", True), 300)
    with pytest.raises(ValueError):
        filter_topic(Param("n", "uint256", True), "lots")
    with pytest.raises(ValueError):
        filter_topic(Param("f", "bool", True), "maybe")


def test_value_filters_compare_like_the_chain_does():
    assert matches(Param("a", "address", False), to_checksum_address(SENDER), "0x" + "AB" * 20)
    assert not matches(Param("a", "address", False), to_checksum_address(SENDER), 5)
    assert matches(Param("n", "uint256", False), 1000, "1000")
    assert matches(Param("n", "uint256", False), 1000, 1000)
    assert not matches(Param("n", "uint256", False), 1, True)
    assert not matches(Param("n", "uint256", False), 1000, "many")
    assert matches(Param("b", "bytes32", False), "0x" + "ab" * 32, "0x" + "AB" * 32)
    assert matches(Param("f", "bool", False), True, "true")
    assert matches(Param("s", "string", False), "hi", "hi")
    assert matches(Param("l", "uint256[]", False), [1, 2], [1, 2])
