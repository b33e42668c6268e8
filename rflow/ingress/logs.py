"""Contract events from a JSON ABI: their topics, log decoding and argument filters.

All pure. :func:`decode_log` turns one JSON-RPC log into named arguments, or raises
:class:`LogDecodeError` with the reason: a malformed log is reported and skipped by the
caller, never fatal. Decoded values are JSON-ready: integers stay exact ``int``s,
addresses are checksummed, bytes are 0x hex, structs are objects by component name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eth_abi import decode, encode
from eth_abi.exceptions import DecodingError, EncodingError
from eth_utils import keccak, to_checksum_address

_CANONICAL = {"uint": "uint256", "int": "int256", "ufixed": "ufixed128x18", "fixed": "fixed128x18"}


class LogDecodeError(ValueError):
    """A log that does not decode as the expected event; the message says why."""


@dataclass(frozen=True, slots=True)
class Param:
    """One event argument."""

    name: str
    type: str
    """Canonical ABI type, tuples spelled ``(t1,t2)``, e.g. ``(uint256,address)[]``."""
    indexed: bool
    components: tuple[Param, ...] = ()
    """For tuple types: the members (names give structs their keys)."""

    @classmethod
    def from_abi(cls, entry: Mapping[str, Any], position: int) -> Param:
        """Read an ABI parameter (an unnamed one is called ``arg<position>``)."""
        kind = str(entry.get("type", ""))
        components = tuple(cls.from_abi(c, i) for i, c in enumerate(entry.get("components") or ()))
        if kind.startswith("tuple"):
            canonical = "(" + ",".join(c.type for c in components) + ")" + kind[len("tuple") :]
        else:
            base, bracket, rest = kind.partition("[")
            canonical = _CANONICAL.get(base, base) + bracket + rest
        if not canonical:
            raise ValueError(f"argument {position} has no type")
        return cls(
            str(entry.get("name") or f"arg{position}"),
            canonical,
            bool(entry.get("indexed")),
            components,
        )

    @property
    def hashed_when_indexed(self) -> bool:
        """Dynamic types are stored in a topic as the keccak of their encoding."""
        return (
            self.type in ("string", "bytes") or self.type.endswith("]") or self.type.startswith("(")
        )


@dataclass(frozen=True, slots=True)
class EventAbi:
    """One event of a contract ABI."""

    name: str
    inputs: tuple[Param, ...]
    anonymous: bool = False

    @classmethod
    def from_abi(cls, entry: Mapping[str, Any]) -> EventAbi:
        """Read an ABI entry of type ``event``; ``ValueError`` if it is malformed."""
        if entry.get("type") != "event" or not isinstance(entry.get("name"), str):
            raise ValueError("not an event entry")
        inputs = entry.get("inputs") or []
        if not isinstance(inputs, list) or not all(isinstance(p, dict) for p in inputs):
            raise ValueError(f"event {entry['name']} has malformed inputs")
        params = tuple(Param.from_abi(p, i) for i, p in enumerate(inputs))
        return cls(entry["name"], params, bool(entry.get("anonymous")))

    @property
    def signature(self) -> str:
        """``Name(type,type)``, whose keccak is topic 0."""
        return f"{self.name}({','.join(p.type for p in self.inputs)})"

    @property
    def topic0(self) -> str:
        """The event's first topic: keccak of its signature, 0x hex."""
        return "0x" + keccak(text=self.signature).hex()

    @property
    def indexed(self) -> tuple[Param, ...]:
        """The indexed arguments, in topic order."""
        return tuple(p for p in self.inputs if p.indexed)


def find_events(entries: Sequence[Any], name: str) -> list[EventAbi]:
    """Every non-anonymous event called ``name`` in a JSON ABI (overloads included)."""
    found = []
    for entry in entries:
        if isinstance(entry, dict) and entry.get("type") == "event" and entry.get("name") == name:
            event = EventAbi.from_abi(entry)
            if not event.anonymous:
                found.append(event)
    return found


def _hex_bytes(value: Any, what: str) -> bytes:
    if not isinstance(value, str) or not value.startswith(("0x", "0X")):
        raise LogDecodeError(f"{what} is not 0x hex: {value!r}")
    try:
        return bytes.fromhex(value[2:])
    except ValueError:
        raise LogDecodeError(f"{what} is not 0x hex: {value[:80]!r}") from None


def decode_log(event: EventAbi, log: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of ``event`` carried by ``log`` (a JSON-RPC log object), by name.

    Indexed arguments of dynamic types (string, bytes, arrays, structs) cannot be
    recovered from a topic: they decode to the topic itself, as 0x hex.
    """
    raw_topics = log.get("topics")
    if not isinstance(raw_topics, list):
        raise LogDecodeError("the log has no topics list")
    topics = [_hex_bytes(t, f"topic {i}") for i, t in enumerate(raw_topics)]
    if any(len(t) != 32 for t in topics):
        raise LogDecodeError("a topic is not 32 bytes")
    indexed = event.indexed
    if len(topics) != len(indexed) + 1:
        raise LogDecodeError(
            f"{event.signature} has {len(indexed)} indexed arguments, "
            f"the log has {len(topics) - 1} topics after the signature"
        )
    if "0x" + topics[0].hex() != event.topic0:
        raise LogDecodeError(f"topic 0 is not the signature of {event.signature}")
    data = _hex_bytes(log.get("data", "0x"), "data")
    plain = [p for p in event.inputs if not p.indexed]
    try:
        values = iter(decode([p.type for p in plain], data))
        by_topic = iter(topics[1:])
        args: dict[str, Any] = {}
        for param in event.inputs:
            if not param.indexed:
                args[param.name] = to_json(param, next(values))
            elif param.hashed_when_indexed:
                args[param.name] = "0x" + next(by_topic).hex()
            else:
                args[param.name] = to_json(param, decode([param.type], next(by_topic))[0])
    except (DecodingError, ValueError, TypeError, OverflowError) as exc:
        raise LogDecodeError(f"cannot decode {event.signature}: {exc}") from None
    return args


def to_json(param: Param, value: Any) -> Any:
    """A decoded ABI value as JSON data (exact ints, checksummed addresses, 0x bytes)."""
    kind = param.type
    if kind.endswith("]"):
        element = Param(param.name, kind[: kind.rindex("[")], False, param.components)
        return [to_json(element, item) for item in value]
    if kind.startswith("("):
        return {c.name: to_json(c, item) for c, item in zip(param.components, value, strict=True)}
    if kind == "address":
        return to_checksum_address(value)
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    return value


def filter_topic(param: Param, wanted: Any) -> str | None:
    """The topic an indexed argument equal to ``wanted`` has, or ``None`` if not computable.

    Static types are ABI-encoded; strings and bytes are hashed as the EVM does.
    Raises ``ValueError`` when ``wanted`` cannot be a value of the argument's type.
    """
    if param.type == "string":
        if not isinstance(wanted, str):
            raise ValueError(f"{param.name} is a string, the filter gives {wanted!r}")
        return "0x" + keccak(text=wanted).hex()
    if param.type == "bytes":
        return "0x" + keccak(_coerce_bytes(wanted)).hex()
    if param.hashed_when_indexed:
        return None
    try:
        encoded = encode([param.type], [_coerce(param.type, wanted)])
    except (EncodingError, ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{param.name} ({param.type}) cannot equal {wanted!r}: {exc}") from None
    return "0x" + encoded.hex()


def _coerce_bytes(value: Any) -> bytes:
    if isinstance(value, str) and value.startswith(("0x", "0X")):
        return bytes.fromhex(value[2:])
    raise ValueError(f"expected 0x hex bytes, got {value!r}")


def _coerce(kind: str, value: Any) -> Any:
    """A YAML filter value as the Python value eth_abi expects for ``kind``."""
    if kind.startswith(("uint", "int")):
        if isinstance(value, bool):
            raise ValueError("a boolean is not an integer")
        if isinstance(value, str):
            text = value.strip()
            return int(text, 16) if text.lower().startswith("0x") else int(text)
        return int(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ValueError(f"expected true or false, got {value!r}")
    if kind == "address":
        if not isinstance(value, str):
            raise ValueError(f"expected an address, got {value!r}")
        return to_checksum_address(value)
    if kind.startswith("bytes"):
        return _coerce_bytes(value)
    return value


def matches(param: Param, actual: Any, wanted: Any) -> bool:
    """Whether decoded argument value ``actual`` equals filter value ``wanted``."""
    try:
        if param.type == "address":
            return isinstance(wanted, str) and str(actual).lower() == wanted.lower()
        if param.type.endswith("]") or param.type.startswith("("):
            return actual == wanted
        if param.type.startswith("bytes"):
            return str(actual).lower() == "0x" + _coerce_bytes(wanted).hex()
        if param.type.startswith(("uint", "int", "bool")):
            return actual == _coerce(param.type, wanted)
    except (ValueError, TypeError):
        return False
    return actual == wanted
