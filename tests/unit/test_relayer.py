"""The relayer's pure parts: building a send, permissions, fees and bumps, revert reasons."""

from __future__ import annotations

import pytest
from eth_abi import encode
from eth_account import Account
from eth_utils import function_signature_to_4byte_selector

from rflow.failures import FailureKind, RflowError
from rflow.lang import load_project
from rflow.relayer import build, fees
from rflow.relayer.signing import signer

TOKEN = "0x" + "11" * 20
TO = "0x" + "22" * 20


@pytest.fixture
def project(tmp_path):
    path = tmp_path / "project.yaml"
    path.write_text(
        f"""
networks:
  local: {{ chain_id: 31337 }}
contracts:
  USDC: {{ address: {{ local: "{TOKEN}" }} }}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
  other: {{ key_env: OTHER_KEY, networks: [local] }}
workflows:
  pay:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout], max_value_per_tx: 1 ether }}
    steps:
      - id: pay
        send_transaction: {{ network: local, relayer: payout, to: "{TO}", value: 1 wei }}
"""
    )
    return load_project(path, {})


def test_a_contract_call_is_encoded_against_the_registry_address(project):
    send = build.intent(
        project,
        {
            "network": "local",
            "relayer": "payout",
            "contract": "USDC",
            "function": "transfer(address,uint256)",
            "args": [TO, "1000"],
        },
    )
    selector = function_signature_to_4byte_selector("transfer(address,uint256)")
    assert send.to.lower() == TOKEN
    assert send.data == selector + encode(["address", "uint256"], [TO, 1000])
    assert send.value == 0 and send.shape.contract == "USDC"


def test_a_multicall_targets_multicall3_with_the_summed_value(project):
    send = build.intent(
        project,
        {
            "network": "local",
            "relayer": "payout",
            "calls": [
                {"to": TO, "value": 5},
                {"contract": "USDC", "function": "approve(address,uint256)", "args": [TO, 1]},
            ],
        },
    )
    assert send.to == build.MULTICALL3 and send.value == 5 and send.shape.multicall


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ({"to": "0x1234"}, "send_transaction.to: not an address"),
        ({"contract": "DAI", "function": "f()"}, "no contract named 'DAI'"),
        ({"to": TO, "function": "f(uint256)", "args": []}, "takes 1 arguments, got 0"),
        ({"to": TO, "function": "f(uint8)", "args": [300]}, "cannot encode for f(uint8)"),
        ({"to": TO, "value": -1}, "must not be negative"),
    ],
)
def test_bad_sends_say_which_field_and_why(project, action, message):
    with pytest.raises(RflowError) as err:
        build.intent(project, {"network": "local", "relayer": "payout", **action})
    assert err.value.kind is FailureKind.INVALID_INPUT
    assert message in err.value.message


def test_permissions_cap_the_relayer_and_the_value(project):
    send = build.intent(
        project, {"network": "local", "relayer": "payout", "to": TO, "value": 10**18}
    )
    build.check_permissions(project, "pay", send)
    over = build.intent(
        project, {"network": "local", "relayer": "payout", "to": TO, "value": 10**18 + 1}
    )
    with pytest.raises(RflowError, match="max_value_per_tx") as err:
        build.check_permissions(project, "pay", over)
    assert err.value.kind is FailureKind.PERMISSION_DENIED
    other = build.intent(project, {"network": "local", "relayer": "other", "to": TO})
    with pytest.raises(RflowError, match="may not use relayer other"):
        build.check_permissions(project, "pay", other)


def test_amounts_filled_in_from_the_environment_read_with_their_units(project):
    # value: "${AMOUNT}" with AMOUNT="1 ether" is text once the relayer fills it in.
    action = {"network": "local", "relayer": "payout", "to": TO, "max_fee_per_gas": "2 gwei"}
    send = build.intent(project, {**action, "value": "1 ether"})
    assert (send.value, send.max_fee_per_gas) == (10**18, 2 * 10**9)
    build.check_permissions(project, "pay", send)
    over = build.intent(project, {**action, "value": "1.5 ether"})
    with pytest.raises(RflowError, match="max_value_per_tx"):
        build.check_permissions(project, "pay", over)
    with pytest.raises(RflowError, match="value: expected an integer, got 'lots'"):
        build.intent(project, {**action, "value": "lots"})


def test_a_missing_or_bad_key_is_named_but_never_shown(project):
    with pytest.raises(RflowError, match="PAYOUT_KEY") as err:
        signer(project, "payout", {})
    assert err.value.kind is FailureKind.PERMISSION_DENIED
    with pytest.raises(RflowError) as err:
        signer(project, "payout", {"PAYOUT_KEY": "not-a-key-secret"})
    assert "not-a-key-secret" not in err.value.message
    account = Account.create()
    key = signer(project, "payout", {"PAYOUT_KEY": account.key.hex()})
    assert key.address == account.address and account.key.hex() not in repr(key)


def test_fees_follow_the_base_fee_and_respect_the_cap():
    history = {"baseFeePerGas": ["0x64", hex(10**9)], "reward": [["0x0"], [hex(2 * 10**9)]]}
    suggested, base = fees.suggest(history)
    assert base == 10**9
    assert suggested == fees.Fees(2 * 10**9 + 2 * 10**9, 2 * 10**9)
    capped, _ = fees.suggest(history, cap=3 * 10**9 + 1)
    assert capped.max_fee_per_gas == 3 * 10**9 + 1
    with pytest.raises(RflowError) as err:
        fees.suggest(history, cap=2 * 10**9)
    assert err.value.kind is FailureKind.GAS_CAP_EXCEEDED


def test_a_bump_pays_at_least_ten_percent_more_until_the_cap():
    first = fees.Fees(100_000, 10_000)
    bumped = fees.bump(first, cap=1_000_000)
    assert bumped.max_fee_per_gas * 10 >= first.max_fee_per_gas * 11
    assert bumped.max_priority_fee_per_gas * 10 >= first.max_priority_fee_per_gas * 11
    assert fees.bump(first, cap=105_000) is None  # no room for an accepted replacement


def test_revert_reasons_are_decoded():
    error = "0x08c379a0" + encode(["string"], ["TestToken: insufficient balance"]).hex()
    assert build.revert_reason(error) == "TestToken: insufficient balance"
    panic = "0x4e487b71" + encode(["uint256"], [0x11]).hex()
    assert build.revert_reason(panic) == "panic 0x11"
    assert build.revert_reason("0xdeadbeef") == "custom error 0xdeadbeef"
    assert build.revert_reason(None) is None
