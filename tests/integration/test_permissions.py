"""Permissions hold against the values a run renders: a relayer, a value or a URL that
comes from the trigger, or is filled in from the environment when the step runs, cannot
take a send or a call past what the workflow may do."""

from __future__ import annotations

import pytest

from rflow.engine.keys import run_id
from tests.integration import chain
from tests.integration.test_api import call
from tests.integration.test_runs import fire, settled_run
from tests.integration.test_sends import error_of

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
networks:
  local: {{ chain_id: 31337, confirmations: 0 }}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
  treasury: {{ key_env: TREASURY_KEY, networks: [local] }}
workflows:
  pay:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout], max_value_per_tx: 1000 wei }}
    steps:
      - id: pay
        send_transaction:
          network: local
          relayer: "${{{{ trigger.relayer }}}}"
          to: "${{{{ trigger.to }}}}"
          value: "${{{{ trigger.value }}}}"
  call:
    trigger: {{ manual: {{}} }}
    permissions: {{ http_hosts: ["127.0.0.1:{port}"] }}
    steps:
      - id: call
        http_call: {{ url: "${{{{ trigger.url }}}}", method: POST, body: {{ n: 1 }} }}
"""


async def test_rendered_relayers_values_and_urls_cannot_pass_the_permissions(
    settings, worker_factory, tmp_path, sink, w3
):
    payout, treasury = await chain.funded_account(w3), await chain.funded_account(w3)
    project = tmp_path / "project.yaml"
    project.write_text(PROJECT.format(port=sink.port))
    worker = worker_factory(
        project_path=project,
        env={"PAYOUT_KEY": payout.key.hex(), "TREASURY_KEY": treasury.key.hex()},
    )
    await worker.wait_ready()
    to = chain.Account.create().address
    nonces = {a.address: await w3.eth.get_transaction_count(a.address) for a in (payout, treasury)}

    cases = {
        "other-relayer": ({"relayer": "treasury", "to": to, "value": 1}, "may not use relayer"),
        "over-cap": ({"relayer": "payout", "to": to, "value": 1001}, "max_value_per_tx"),
    }
    for name, (payload, _) in cases.items():
        rid = await fire(settings, project, "pay", f"manual:pay:{name}", payload)
        run = await settled_run(settings, rid, timeout=60)
        assert run["status"] == "failed", (run, worker.tail())
        error = error_of(run, "pay")
        assert error["kind"] == "permission_denied" and cases[name][1] in error["message"], error
    allowed = await fire(
        settings, project, "pay", "manual:pay:ok", {"relayer": "payout", "to": to, "value": 1000}
    )
    assert (await settled_run(settings, allowed, timeout=60))["status"] == "succeeded"
    # Only the allowed send reached the chain, from the allowed relayer.
    assert await w3.eth.get_transaction_count(treasury.address) == nonces[treasury.address]
    assert await w3.eth.get_transaction_count(payout.address) == nonces[payout.address] + 1
    assert await w3.eth.get_balance(to) == 1000

    elsewhere = f"http://localhost:{sink.port}/stolen"  # the same server, another name
    rid = await fire(settings, project, "call", "manual:call:out", {"url": elsewhere})
    run = await settled_run(settings, rid, timeout=60)
    assert run["status"] == "failed"
    error = error_of(run, "call")
    assert error["kind"] == "permission_denied" and "permissions.http_hosts" in error["message"]
    rid = await fire(settings, project, "call", "manual:call:in", {"url": f"{sink.url}/fine"})
    assert (await settled_run(settings, rid, timeout=60))["status"] == "succeeded"
    assert not sink.keys("/stolen") and len(sink.keys("/fine")) == 1


FILLED_IN = """
networks:
  local: {{ chain_id: 31337, confirmations: 0 }}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
workflows:
  sweep:
    env: [COLD_WALLET]
    trigger: {{ manual: {{ inputs: [amount] }} }}
    permissions: {{ relayers: [payout], max_value_per_tx: 1000 wei }}
    steps:
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          to: "${{{{ env.COLD_WALLET }}}}"
          value: "${{{{ inputs.amount }}}}"
  over:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout], max_value_per_tx: 1000 wei }}
    steps:
      - id: pay
        send_transaction: {{ network: local, relayer: payout, to: "${{COLD_WALLET}}", value: "${{LARGE}}" }}
  call:
    env: [API_BASE]
    trigger: {{ manual: {{}} }}
    permissions: {{ http_hosts: ["127.0.0.1:{port}"] }}
    steps:
      - id: call
        http_call: {{ url: "${{{{ env.API_BASE }}}}/stolen", method: POST, body: {{ n: 1 }} }}
"""


async def test_values_filled_in_from_the_environment_are_checked_as_sent(
    settings, worker_factory, tmp_path, sink, w3, monkeypatch
):
    payout = await chain.funded_account(w3)
    cold = chain.Account.create().address
    env = {"COLD_WALLET": cold, "LARGE": "1001 wei", "API_BASE": f"http://localhost:{sink.port}"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    project = tmp_path / "project.yaml"
    project.write_text(FILLED_IN.format(port=sink.port))
    worker = worker_factory(project_path=project, env={"PAYOUT_KEY": payout.key.hex()})
    await worker.wait_ready()

    async def start(workflow: str, payload: dict) -> dict:
        status, started = await call(worker, "POST", f"/api/workflows/{workflow}/runs", payload)
        assert status == 202, started
        return await settled_run(settings, run_id(workflow, started["trigger_key"]), timeout=60)

    paid = await start("sweep", {"amount": 1000})
    assert paid["status"] == "succeeded", (paid, worker.tail())
    assert await w3.eth.get_balance(cold) == 1000
    # The chain has the recipient; the run's record of the send has its placeholder.
    [step] = [s for s in paid["steps"] if s["path"] == "pay"]
    assert step["input"]["to"] == "${COLD_WALLET}"
    assert step["output"]["tx"]["to"] == "${COLD_WALLET}"
    assert cold.lower() not in str(step).lower()

    over = await start("over", {})
    assert over["status"] == "failed"
    error = error_of(over, "pay")
    assert error["kind"] == "permission_denied" and "max_value_per_tx" in error["message"], error
    assert await w3.eth.get_balance(cold) == 1000

    elsewhere = await start("call", {})
    assert elsewhere["status"] == "failed"
    error = error_of(elsewhere, "call")
    assert error["kind"] == "permission_denied" and "permissions.http_hosts" in error["message"]
    assert not sink.keys("/stolen")
