"""From a rendered ``send_transaction`` to the transaction it sends: target, call data,
value, limits, and the checks that come before any chain call (permissions, keys).

Pure: no I/O. Failures are :class:`~rflow.failures.RflowError` with a kind and a
message that names the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_abi.exceptions import EncodingError
from eth_utils import function_signature_to_4byte_selector, is_address
from eth_utils import to_checksum_address as _to_checksum_address

from rflow.budgets import CallShape, SendShape
from rflow.failures import FailureKind, RflowError
from rflow.lang.abi import SignatureError, parse_signature
from rflow.lang.model import Project
from rflow.lang.units import UnitError, parse_amount

MULTICALL3 = "0xcA11bde05977b3631167028862bE2a173976CA11"
"""Multicall3, at the same address on every chain that has it."""
_AGGREGATE3_VALUE = function_signature_to_4byte_selector(
    "aggregate3Value((address,bool,uint256,bytes)[])"
)
_ERROR_STRING = bytes.fromhex("08c379a0")
_PANIC = bytes.fromhex("4e487b71")


@dataclass(frozen=True, slots=True)
class Intent:
    """What one send does, before fees and a nonce make it a transaction."""

    network: str
    relayer: str
    to: str
    data: bytes
    value: int
    gas_limit: int | None
    max_fee_per_gas: int | None
    max_priority_fee_per_gas: int | None
    shape: SendShape


# A relayer sends to the same few contracts and recipients again and again, and each of
# these is a keccak of the text.
to_checksum_address = lru_cache(maxsize=4096)(_to_checksum_address)
_selector = lru_cache(maxsize=1024)(function_signature_to_4byte_selector)


def _invalid(message: str) -> RflowError:
    return RflowError(FailureKind.INVALID_INPUT, message)


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool):
        raise _invalid(f"{field}: expected an integer, got a boolean")
    try:
        number = int(value, 0) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise _invalid(f"{field}: expected an integer, got {value!r}") from None
    if number < 0:
        raise _invalid(f"{field}: must not be negative, got {number}")
    return number


def _amount(value: Any, field: str) -> int:
    """Wei from an integer, or from text such as ``1 ether`` or ``10 gwei`` (what a
    ``${VAR}`` filled in when the send runs may hold, as the file would)."""
    if isinstance(value, str) and not value.strip().lstrip("+").isdigit():
        try:
            return parse_amount(value)
        except UnitError:
            pass  # reported as an integer was expected, below
    return _int(value, field)


def _optional_int(action: Mapping[str, Any], field: str) -> int | None:
    value = action.get(field)
    return None if value is None else _int(value, field)


def _optional_amount(action: Mapping[str, Any], field: str) -> int | None:
    value = action.get(field)
    return None if value is None else _amount(value, field)


def _abi_arg(kind: str, value: Any) -> Any:
    if kind.endswith("]") and isinstance(value, list):
        inner = kind[: kind.rindex("[")]
        return [_abi_arg(inner, v) for v in value]
    if kind.startswith(("uint", "int")) and isinstance(value, str):
        return int(value, 0)
    if kind == "address" and isinstance(value, str) and is_address(value):
        return to_checksum_address(value)
    if kind.startswith("bytes") and isinstance(value, str):
        return bytes.fromhex(value.removeprefix("0x"))
    return value


def calldata(function: str, args: Any, where: str) -> bytes:
    """The call data of ``function`` (a signature) with ``args``."""
    try:
        signature = parse_signature(function)
    except SignatureError as exc:
        raise _invalid(f"{where}: {exc}") from None
    if not isinstance(args, list):
        raise _invalid(f"{where}.args: expected a list, got {type(args).__name__}")
    if len(args) != len(signature.inputs):
        raise _invalid(
            f"{where}.args: {function} takes {len(signature.inputs)} arguments, got {len(args)}"
        )
    try:
        values = [_abi_arg(kind, value) for kind, value in zip(signature.inputs, args, strict=True)]
        encoded = abi_encode(list(signature.inputs), values)
    except (EncodingError, ValueError, TypeError) as exc:
        raise _invalid(f"{where}.args: cannot encode for {function}: {exc}") from None
    selector = _selector(f"{signature.name}({','.join(signature.inputs)})")
    return selector + encoded


def _target(project: Project, network: str, call: Mapping[str, Any], where: str) -> str:
    if call.get("to"):
        address = call["to"]
        if not isinstance(address, str) or not is_address(address):
            raise _invalid(f"{where}.to: not an address: {address!r}")
        return to_checksum_address(address)
    name = call.get("contract")
    contract = project.contracts.get(name) if name else None
    if contract is None:
        raise _invalid(f"{where}.contract: no contract named {name!r}")
    address = contract.address.get(network)
    if address is None:
        raise _invalid(f"{where}.contract: {name} has no address on network {network}")
    return to_checksum_address(address)


def intent(project: Project, action: Mapping[str, Any]) -> Intent:
    """The send a rendered ``send_transaction`` action describes."""
    network, relayer = action["network"], action["relayer"]
    if network not in project.networks:
        raise _invalid(f"send_transaction.network: no network named {network!r}")
    calls = action.get("calls")
    if calls:
        targets, values, datas = [], [], []
        for i, call in enumerate(calls):
            where = f"send_transaction.calls[{i}]"
            targets.append(_target(project, network, call, where))
            values.append(_amount(call.get("value", 0), f"{where}.value"))
            datas.append(
                calldata(call["function"], call.get("args") or [], where)
                if call.get("function")
                else b""
            )
        encoded = abi_encode(
            ["(address,bool,uint256,bytes)[]"],
            [[(t, False, v, d) for t, v, d in zip(targets, values, datas, strict=True)]],
        )
        to, data, value = MULTICALL3, _AGGREGATE3_VALUE + encoded, sum(values)
        made = tuple(
            CallShape(target, call.get("contract"), call.get("function"))
            for target, call in zip(targets, calls, strict=True)
        )
        shape = SendShape(network, relayer, value, multicall=True, to=to, calls=made)
    else:
        to = _target(project, network, action, "send_transaction")
        function = action.get("function")
        args = action.get("args") or []
        data = calldata(function, args, "send_transaction") if function else b""
        value = _amount(action.get("value", 0), "send_transaction.value")
        shape = SendShape(network, relayer, value, action.get("contract"), function, args, to=to)
    return Intent(
        network=network,
        relayer=relayer,
        to=to,
        data=data,
        value=value,
        gas_limit=_optional_int(action, "gas_limit"),
        max_fee_per_gas=_optional_amount(action, "max_fee_per_gas"),
        max_priority_fee_per_gas=_optional_amount(action, "max_priority_fee_per_gas"),
        shape=shape,
    )


def check_permissions(project: Project, workflow: str, send: Intent) -> None:
    """``permission_denied`` unless ``workflow`` may send this from this relayer."""
    declared = project.relayers.get(send.relayer)
    if declared is None:
        raise RflowError(FailureKind.PERMISSION_DENIED, f"no relayer named {send.relayer!r}")
    if send.network not in declared.networks:
        raise RflowError(
            FailureKind.PERMISSION_DENIED,
            f"relayer {send.relayer} may not send on {send.network} "
            f"(its networks: {', '.join(declared.networks)})",
        )
    permissions = project.workflows[workflow].permissions
    if send.relayer not in permissions.relayers:
        raise RflowError(
            FailureKind.PERMISSION_DENIED,
            f"workflow {workflow} may not use relayer {send.relayer}: "
            "add it to permissions.relayers",
        )
    cap = permissions.max_value_per_tx
    if cap is not None and send.value > cap:
        raise RflowError(
            FailureKind.PERMISSION_DENIED,
            f"value {send.value} wei exceeds permissions.max_value_per_tx ({cap} wei)",
        )


def revert_reason(data: Any) -> str | None:
    """The reason in revert ``data`` (``Error(string)`` or ``Panic(uint256)``), if any."""
    if not isinstance(data, str) or not data.startswith("0x"):
        return None
    try:
        raw = bytes.fromhex(data[2:])
    except ValueError:
        return None
    try:
        if raw[:4] == _ERROR_STRING:
            return str(abi_decode(["string"], raw[4:])[0])
        if raw[:4] == _PANIC:
            return f"panic 0x{abi_decode(['uint256'], raw[4:])[0]:02x}"
    except Exception:  # malformed revert data: report the raw bytes instead
        return None
    return f"custom error {data[:10]}" if len(raw) >= 4 else None
