"""The relayer's first check: a send it takes after its step's deadline is never signed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from eth_account import Account

from rflow.agents.relayer import Relayer
from rflow.codecs import SendRequest
from rflow.engine import Execute
from rflow.failures import FailureKind, RflowError
from rflow.lang import validate_text
from rflow.settings import Settings

PROJECT = """
networks:
  local: { chain_id: 31337 }
relayers:
  payout: { key_env: PAYOUT_KEY, networks: [local] }
workflows:
  pay:
    trigger: { manual: {} }
    permissions: { relayers: [payout] }
    steps:
      - id: pay
        timeout: 1m
        send_transaction: { network: local, relayer: payout, to: "0x000000000000000000000000000000000000dEaD", value: 1 wei }
"""


def relayer() -> Relayer:
    env = {"PAYOUT_KEY": Account.create().key.hex()}
    project = validate_text(PROJECT, env).project
    runtime = SimpleNamespace(
        settings=Settings(), project=project, env=env, checks_behind=lambda: None
    )
    return Relayer(SimpleNamespace(rflow=runtime))


def request(deadline: datetime | None) -> SendRequest:
    action = {
        "network": "local",
        "relayer": "payout",
        "to": "0x000000000000000000000000000000000000dEaD",
        "value": 1,
    }
    execute = Execute(
        run_id="r1",
        workflow="pay",
        path="pay",
        visit=1,
        attempt=1,
        key="pay:manual:1:pay",
        kind="send_transaction",
        action=action,
        timeout=60.0,
        deadline=deadline,
    )
    return SendRequest(execute=execute, reply_key="manual:1")


async def test_a_send_past_its_deadline_is_refused_before_anything_is_planned():
    [outcome] = await relayer().check_many([request(datetime.now(UTC) - timedelta(seconds=1))])
    assert isinstance(outcome, RflowError)
    assert outcome.kind is FailureKind.TIMEOUT
    assert outcome.message.endswith("before the relayer took the send: nothing was signed")


async def test_a_send_before_its_deadline_is_planned_as_any_other():
    the_relayer = relayer()
    fresh = request(datetime.now(UTC) + timedelta(minutes=1))
    intent, signer = await the_relayer._plan(fresh)
    assert (intent.relayer, intent.value, signer.relayer) == ("payout", 1, "payout")
