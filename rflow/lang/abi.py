"""Solidity function signatures and JSON ABIs, as far as static validation needs them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ELEMENTARY = re.compile(r"[a-z]+[0-9x]*")
_SIZED = re.compile(r"(u?int|bytes|u?fixed)([0-9]+)(?:x([0-9]+))?")
_PLAIN_TYPES = frozenset(
    {"address", "bool", "string", "bytes", "function", "uint", "int", "ufixed", "fixed"}
)


def _is_type(word: str) -> bool:
    if word in _PLAIN_TYPES:
        return True
    match = _SIZED.fullmatch(word)
    if match is None:
        return False
    base, size, frac = match.group(1), int(match.group(2)), match.group(3)
    if base == "bytes":
        return frac is None and 1 <= size <= 32
    if base.endswith("int"):
        return frac is None and size % 8 == 0 and 8 <= size <= 256
    return frac is not None and size % 8 == 0 and 8 <= size <= 256 and int(frac) <= 80


_ARRAY = re.compile(r"(?:\[[0-9]*\])*")
_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


class SignatureError(ValueError):
    """A function signature that does not parse; the message is for a person."""


@dataclass(frozen=True, slots=True)
class Signature:
    """``name(inputs)`` with optional ``(outputs)``, types in canonical form."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...] | None = None

    @property
    def selector_text(self) -> str:
        """``name(type,type)``, the text whose keccak gives the selector."""
        return f"{self.name}({','.join(self.inputs)})"


def _canonical(kind: str) -> str:
    return {
        "uint": "uint256",
        "int": "int256",
        "ufixed": "ufixed128x18",
        "fixed": "fixed128x18",
    }.get(kind, kind)


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> SignatureError:
        return SignatureError(
            f"function signature {self.text!r} does not parse: {what} at character {self.pos + 1} "
            "(write it like transfer(address,uint256) or balanceOf(address)(uint256))"
        )

    def types(self) -> tuple[str, ...]:
        if self.pos >= len(self.text) or self.text[self.pos] != "(":
            raise self.fail("expected '('")
        self.pos += 1
        out: list[str] = []
        if self.text.startswith(")", self.pos):
            self.pos += 1
            return ()
        while True:
            out.append(self.type())
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith(")", self.pos):
                self.pos += 1
                return tuple(out)
            raise self.fail("expected ',' or ')'")

    def type(self) -> str:
        if self.text.startswith("(", self.pos):
            inner = f"({','.join(self.types())})"
        else:
            match = _ELEMENTARY.match(self.text, self.pos)
            if match is None or not _is_type(match.group(0)):
                raise self.fail("expected a Solidity type")
            end = match.end()
            if end < len(self.text) and self.text[end] == " ":
                self.pos = end
                raise self.fail("parameter names are not allowed, give types only")
            inner = _canonical(match.group(0))
            self.pos = end
        arrays = _ARRAY.match(self.text, self.pos)
        assert arrays is not None
        self.pos = arrays.end()
        return inner + arrays.group(0)


def parse_signature(text: str) -> Signature:
    """Parse ``transfer(address,uint256)`` or ``balanceOf(address)(uint256)``."""
    compact = re.sub(r"\s*([(),\[\]])\s*", r"\1", text.strip())
    reader = _Reader(compact)
    match = _NAME.match(compact)
    if match is None:
        raise reader.fail("expected a function name")
    reader.pos = match.end()
    inputs = reader.types()
    outputs = reader.types() if reader.pos < len(compact) else None
    if reader.pos != len(compact):
        raise reader.fail("unexpected text")
    return Signature(match.group(0), inputs, outputs)


def _abi_type(param: dict[str, Any]) -> str:
    kind = str(param.get("type", ""))
    if kind.startswith("tuple"):
        inner = ",".join(_abi_type(c) for c in param.get("components", []))
        return f"({inner}){kind[len('tuple') :]}"
    return _canonical(kind)


@dataclass(frozen=True, slots=True)
class Abi:
    """The events and functions of a JSON ABI, by name."""

    events: dict[str, tuple[str, ...]]
    """Event name -> argument names."""
    functions: dict[str, tuple[tuple[str, ...], ...]]
    """Function name -> the input type lists of its overloads."""

    @classmethod
    def from_entries(cls, entries: list[Any]) -> Abi:
        """Index a JSON ABI (a list of entries); malformed entries raise ``ValueError``."""
        events: dict[str, tuple[str, ...]] = {}
        functions: dict[str, tuple[tuple[str, ...], ...]] = {}
        for entry in entries:
            if not isinstance(entry, dict):
                raise ValueError("an ABI entry is not an object")
            inputs = entry.get("inputs", [])
            if not isinstance(inputs, list) or not all(isinstance(p, dict) for p in inputs):
                raise ValueError(f"ABI entry {entry.get('name')!r} has malformed inputs")
            if entry.get("type") == "event":
                events[str(entry.get("name"))] = tuple(str(p.get("name", "")) for p in inputs)
            elif entry.get("type") == "function":
                name = str(entry.get("name"))
                functions[name] = (*functions.get(name, ()), tuple(_abi_type(p) for p in inputs))
        return cls(events, functions)


def abi_entries(text: str) -> list[Any]:
    """The entries of a JSON ABI, or of a build artifact's ``abi`` key (Foundry, Hardhat);
    ``ValueError`` (``json.JSONDecodeError`` included) when ``text`` holds neither."""
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("abi")
    if not isinstance(data, list):
        raise ValueError("expected a JSON list of ABI entries, or an object with an 'abi' list")
    return data


def read_abi_file(path: Path) -> Abi:
    """Read a JSON ABI, or a build artifact with an ``abi`` key (Foundry, Hardhat)."""
    return Abi.from_entries(abi_entries(path.read_text(encoding="utf-8")))
