"""The rules for signing a send again with a new nonce (rflow/relayer/resign.py)."""

from __future__ import annotations

import pytest

from rflow.relayer.resign import Send, Taker, Verdict, decide

OURS = "0x" + "aa" * 32
BUMP = "0x" + "ab" * 32
THEIRS = "0x" + "bb" * 32


def send(purpose: str = "step", replacing: str | None = None) -> Send:
    return Send(nonce=7, own={OURS, BUMP}, purpose=purpose, replacing=replacing)


def taker(tx_hash: str, depth: int = 3) -> Taker:
    return Taker(tx_hash, 100, "0x" + "cc" * 32, depth, "main")


@pytest.mark.parametrize(
    ("case", "found", "confirmations", "verdict", "said"),
    [
        ("no endpoint shows the taker", None, 1, Verdict.WAIT, "nothing is signed again"),
        ("its first transaction took it", taker(OURS), 1, Verdict.MINED, "waiting for an"),
        ("its bump took it", taker(BUMP.upper().replace("0X", "0x")), 1, Verdict.MINED, BUMP),
        ("its own, even unconfirmed", taker(OURS, depth=1), 12, Verdict.MINED, "block 100"),
        ("another, confirmed", taker(THEIRS), 3, Verdict.SIGN_AGAIN, THEIRS),
        ("another, not yet confirmed", taker(THEIRS, depth=2), 3, Verdict.WAIT, "3 confirmation"),
        ("another, confirmations 0", taker(THEIRS, depth=1), 0, Verdict.SIGN_AGAIN, THEIRS),
    ],
)
def test_a_step_send(case, found, confirmations, verdict, said):
    decision = decide(send(), found, confirmations)
    assert decision.verdict is verdict, case
    assert said.lower() in decision.reason.lower(), decision.reason


def test_a_send_being_replaced_settles_with_its_reason_once_another_took_the_nonce():
    decision = decide(send(replacing="cancelled by an operator"), taker(THEIRS), 1)
    assert decision.verdict is Verdict.SETTLE
    assert decision.reason.startswith("cancelled by an operator; nonce 7 was used by")
    # Its own transaction won the race with its self-transfer: it is mined, not cancelled.
    assert decide(send(replacing="cancelled"), taker(OURS), 1).verdict is Verdict.MINED


def test_a_self_transfer_whose_nonce_another_used_settles():
    assert decide(send(purpose="fill"), taker(THEIRS), 1).verdict is Verdict.SETTLE
    assert decide(send(purpose="fill"), None, 1).verdict is Verdict.WAIT
