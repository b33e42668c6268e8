"""A run parked in ``wait_for: { event }`` resumes on a matching, confirmed chain log."""

from __future__ import annotations

import pytest

from rflow import storage
from rflow.storage import waits
from tests.integration import chain
from tests.integration.harness import wait_until
from tests.integration.test_chain_events import deployed, swap
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")


def project(tmp_path, emitter: str):
    path = tmp_path / "project.yaml"
    path.write_text(
        f"""
networks:
  local: {{ chain_id: 31337, confirmations: 0 }}
contracts:
  Emitter:
    address: {{ local: "{emitter}" }}
    abi: {chain.artifact_path("Emitter")}
channels:
  ops: {{ type: log }}
workflows:
  await-swap:
    trigger: {{ manual: {{ inputs: [sender] }} }}
    steps:
      - id: swapped
        wait_for:
          event:
            contract: Emitter
            name: Swap
            network: local
            filter: {{ sender: "${{{{ inputs.sender }}}}" }}
          timeout: 1h
      - id: report
        notify: {{ channel: ops, message: "swap of ${{{{ steps.swapped.output.args.amountIn }}}}" }}
"""
    )
    return path


async def test_a_matching_log_answers_the_wait_and_others_do_not(
    settings, worker_factory, tmp_path, w3
):
    account, emitter, _ = await deployed(w3)
    stranger, _, _ = await deployed(w3)
    path = project(tmp_path, emitter)
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    rid = await fire(
        settings, path, "await-swap", "manual:await-swap:1", {"sender": account.address}
    )

    async def parked():
        conn = await storage.connect(settings)
        async with conn:
            return await waits.open_waits(conn, rid)

    [wait] = await wait_until(parked, timeout=30, what="the run to park")
    assert wait["spec"]["event"]["filter"] == {"sender": account.address}
    # Someone else's swap on the same contract does not match this run's filter...
    await chain.transact(w3, "Emitter", emitter, "swap", 5, 1, account=stranger)
    # ... its own does.
    receipt = await swap(w3, emitter, account, 42)
    run = await settled_run(settings, rid, timeout=60)
    assert run["status"] == "succeeded", (run["error_kind"], run["error_message"])
    output = {s["path"]: s["output"] for s in run["steps"]}["swapped"]
    assert output["args"]["amountIn"] == 42
    assert output["tx"]["hash"] == receipt["transactionHash"].lower()
