"""The relayer's pure parts: building a send, permissions, fees and bumps, revert reasons."""

from __future__ import annotations

import pytest
from eth_abi import encode
from eth_account import Account
from eth_utils import function_signature_to_4byte_selector

from rflow.failures import FailureKind, RflowError
from rflow.lang import load_project
from rflow.relayer import build, fees
from rflow.relayer.controls import refusal
from rflow.relayer.signing import open_signer
from rflow.storage.sends import Attempt, SendRow, filler_key, send_id

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


async def test_a_missing_or_bad_key_is_named_but_never_shown(project):
    with pytest.raises(RflowError, match="PAYOUT_KEY") as err:
        await open_signer(project, "payout", {})
    assert err.value.kind is FailureKind.PERMISSION_DENIED
    with pytest.raises(RflowError) as err:
        await open_signer(project, "payout", {"PAYOUT_KEY": "not-a-key-secret"})
    assert "not-a-key-secret" not in err.value.message
    account = Account.create()
    key = await open_signer(project, "payout", {"PAYOUT_KEY": account.key.hex()})
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


GWEI = 10**9
CURRENT = fees.Fees(10 * GWEI, 2 * GWEI)


def test_a_speedup_by_default_bumps_both_fees_or_meets_the_market():
    bumped = fees.speedup(CURRENT, cap=40 * GWEI)
    assert bumped == fees.Fees(fees.raised(10 * GWEI), fees.raised(2 * GWEI))
    market = fees.Fees(30 * GWEI, 3 * GWEI)
    assert fees.speedup(CURRENT, cap=40 * GWEI, market=market) == market
    # The cap stops the max fee, as the relayer's own bumps; the tip follows it down.
    assert fees.speedup(CURRENT, cap=11 * GWEI, market=market) == fees.Fees(11 * GWEI, 3 * GWEI)


def test_a_speedup_takes_explicit_fees_a_node_would_take_as_a_replacement():
    assert fees.speedup(CURRENT, cap=40 * GWEI, max_fee=20 * GWEI, tip=5 * GWEI) == fees.Fees(
        20 * GWEI, 5 * GWEI
    )
    # Exactly 10 % more is what a node needs; a tip alone raises the max fee to hold it.
    least = fees.speedup(CURRENT, cap=40 * GWEI, max_fee=11 * GWEI, tip=2_200_000_000)
    assert least == fees.Fees(11 * GWEI, 2_200_000_000)
    assert fees.speedup(CURRENT, cap=40 * GWEI, tip=15 * GWEI).max_fee_per_gas == 15 * GWEI


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"max_fee": 10 * GWEI},
            "a max fee of 10 gwei is below 11 gwei: the current attempt pays 10 gwei, and a "
            "node replaces it only for at least 10 % more",
        ),
        (
            {"max_fee": 5 * GWEI},
            "a max fee of 5 gwei is below 11 gwei",
        ),
        (
            {"tip": 2_100_000_000},
            "a tip of 2.1 gwei is below 2.2 gwei: the current attempt pays 2 gwei",
        ),
        (
            {"max_fee": 12 * GWEI, "tip": 13 * GWEI},
            "a tip of 13 gwei is above the max fee of 12 gwei",
        ),
        (
            {"max_fee": 50 * GWEI},
            "a max fee of 50 gwei is above the send's fee cap of 40 gwei (its step's "
            "max_fee_per_gas, else four times its first fee): allow going above the cap to "
            "pay it (--above-cap, or above_cap: true in the API)",
        ),
    ],
)
def test_a_speedup_refuses_fees_that_would_not_replace_or_pass_the_cap(options, message):
    with pytest.raises(RflowError) as err:
        fees.speedup(CURRENT, cap=40 * GWEI, **options)
    assert err.value.kind is FailureKind.INVALID_INPUT
    assert message in err.value.message


def test_a_speedup_goes_above_the_cap_only_when_asked():
    with pytest.raises(RflowError) as err:
        fees.speedup(CURRENT, cap=10 * GWEI)
    assert err.value.message == (
        "the send's fee cap of 10 gwei leaves no room for a replacement, which needs a max fee "
        "of 11 gwei or more: give one and allow going above the cap (--above-cap, or "
        "above_cap: true in the API)"
    )
    assert fees.speedup(CURRENT, cap=10 * GWEI, above_cap=True).max_fee_per_gas == fees.raised(
        10 * GWEI
    )
    assert fees.speedup(CURRENT, cap=10 * GWEI, max_fee=50 * GWEI, above_cap=True) == fees.Fees(
        50 * GWEI, fees.raised(2 * GWEI)
    )


def test_a_cancel_outbids_the_send_or_meets_the_market_without_a_cap():
    assert fees.cancelling(CURRENT, fees.Fees(GWEI, GWEI)) == fees.Fees(
        fees.raised(10 * GWEI), fees.raised(2 * GWEI)
    )
    assert fees.cancelling(CURRENT, fees.Fees(90 * GWEI, 4 * GWEI)) == fees.Fees(
        90 * GWEI, 4 * GWEI
    )
    assert fees.gwei(2_500_000_000) == "2.5 gwei" and fees.gwei(1) == "0.000000001 gwei"


def test_revert_reasons_are_decoded():
    error = "0x08c379a0" + encode(["string"], ["TestToken: insufficient balance"]).hex()
    assert build.revert_reason(error) == "TestToken: insufficient balance"
    panic = "0x4e487b71" + encode(["uint256"], [0x11]).hex()
    assert build.revert_reason(panic) == "panic 0x11"
    assert build.revert_reason("0xdeadbeef") == "custom error 0xdeadbeef"
    assert build.revert_reason(None) is None


def stored_send(**changes) -> SendRow:
    attempt = Attempt("0x" + "ab" * 32, 7, 10 * GWEI, 2 * GWEI, b"raw")
    fields = {
        "send_key": "pay:manual:1:pay",
        "purpose": "step",
        "run_id": "r1",
        "workflow": "pay",
        "reply": None,
        "network": "local",
        "relayer": "payout",
        "address": "0x" + "cd" * 20,
        "nonce": 7,
        "to_address": TO,
        "value": 0,
        "data": b"",
        "gas_limit": 21_000,
        "fee_cap": 40 * GWEI,
        "status": "pending",
        "tx_hash": attempt.tx_hash,
        "block_number": None,
        "block_hash": None,
        "gas_used": None,
        "effective_gas_price": None,
        "error": None,
        "attempts": (attempt,),
    }
    return SendRow(**{**fields, **changes})


def test_an_operator_may_speed_up_or_cancel_only_a_send_still_in_play():
    assert refusal(stored_send(), "speedup") is None
    assert refusal(stored_send(), "cancel") is None
    assert refusal(None, "cancel") == "no such send"
    assert refusal(stored_send(status="reverted"), "speedup") == (
        "the send has settled (reverted): there is nothing to speed up"
    )
    filler = stored_send(purpose="fill", send_key="fill:local:0xcd:7")
    assert refusal(filler, "speedup") is None
    assert "the self-transfer that takes another send's nonce" in refusal(filler, "cancel")
    replaced = stored_send(error={"kind": "timeout", "message": "the step's timeout ran out"})
    replacement = send_id(filler_key("local", "0x" + "cd" * 20, 7))
    for action in ("speedup", "cancel"):
        assert refusal(replaced, action) == (
            "the send is being replaced already (timeout: the step's timeout ran out); "
            f"speed up its replacement {replacement} instead"
        )
    mined = stored_send(nonce_used=True, waiting_for="its transaction 0xab took nonce 7")
    assert refusal(mined, "speedup") == (
        "its nonce 7 is used on chain (its transaction 0xab took nonce 7): there is nothing "
        "to speed up"
    )
    assert refusal(mined, "cancel").endswith("there is nothing to cancel")


def test_a_send_id_is_short_stable_and_of_the_key():
    assert send_id("pay:manual:1:pay") == send_id("pay:manual:1:pay")
    assert send_id("pay:manual:1:pay") != send_id("pay:manual:2:pay")
    assert len(send_id("k")) == 13 and send_id("k").startswith("s")
