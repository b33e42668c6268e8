"""Function signatures and ABI indexing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rflow.lang.abi import Abi, Signature, SignatureError, parse_signature, read_abi_file


@pytest.mark.parametrize(
    ("text", "signature"),
    [
        ("transfer(address,uint256)", Signature("transfer", ("address", "uint256"))),
        ("balanceOf(address)(uint256)", Signature("balanceOf", ("address",), ("uint256",))),
        ("f(uint, int)", Signature("f", ("uint256", "int256"))),
        (
            "g((uint256,address)[],bytes32,uint248)",
            Signature("g", ("(uint256,address)[]", "bytes32", "uint248")),
        ),
        ("h()", Signature("h", ())),
    ],
)
def test_signatures(text: str, signature: Signature) -> None:
    assert parse_signature(text) == signature


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("transfer", r"expected '\('"),
        ("transfer(address to, uint256 amount)", "parameter names are not allowed"),
        ("t(uint257)", "expected a Solidity type"),
        ("t(bytes33)", "expected a Solidity type"),
        ("f(address)(uint256)x", "unexpected text"),
        ("(address)", "expected a function name"),
    ],
)
def test_bad_signatures(text: str, problem: str) -> None:
    with pytest.raises(SignatureError, match=problem):
        parse_signature(text)


def test_abi_index_and_artifacts(tmp_path: Path) -> None:
    entries = [
        {"type": "event", "name": "Transfer", "inputs": [{"name": "from", "type": "address"}]},
        {
            "type": "function",
            "name": "f",
            "inputs": [{"type": "tuple", "components": [{"type": "uint"}]}],
        },
        {"type": "function", "name": "f", "inputs": []},
    ]
    abi = Abi.from_entries(entries)
    assert abi.events == {"Transfer": ("from",)}
    assert abi.functions == {"f": (("(uint256)",), ())}
    artifact = tmp_path / "Token.json"
    artifact.write_text(json.dumps({"abi": entries, "bytecode": "0x"}))
    assert read_abi_file(artifact) == abi
    artifact.write_text("{}")
    with pytest.raises(ValueError, match="expected a JSON list of ABI entries"):
        read_abi_file(artifact)
