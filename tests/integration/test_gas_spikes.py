"""Gas spikes defer, never jam: a base fee above a send's cap in the middle of a payout.

A send whose fees would pass its step's ``max_fee_per_gas`` is not signed: it waits with
no nonce taken, and is signed once the base fee allows. A transaction already out that
reaches its cap keeps its nonce and says why it waits. When the base fee falls again,
everything lands exactly once, in nonce order, and nothing stays stuck.
"""

from __future__ import annotations

import contextlib

import pytest

from rflow import storage
from tests.integration import chain
from tests.integration.harness import wait_until
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

GWEI = 10**9
VALUE = 10**12
CAP = 5 * GWEI


def write_project(folder) -> object:
    path = folder / "project.yaml"
    path.write_text(
        """
networks:
  local: { chain_id: 31337, confirmations: 1 }
relayers:
  payout: { key_env: PAYOUT_KEY, networks: [local] }
workflows:
  payout:
    trigger: { manual: {} }
    permissions: { relayers: [payout], max_value_per_tx: 1 ether }
    steps:
      - id: pay
        foreach: "${{ trigger.recipients }}"
        max_parallel: 1
        send_transaction:
          network: local
          relayer: payout
          to: "${{ item }}"
          value: "${{ trigger.value }}"
          max_fee_per_gas: 5 gwei
"""
    )
    return path


async def set_base_fee(w3, wei: int) -> None:
    """The next block's base fee is ``wei``: mine that block (empty: every transaction
    waiting pays less), so the node asks about that much for the block after it."""
    await chain.rpc(w3, "anvil_setNextBlockBaseFeePerGas", hex(wei))
    await chain.evm_mine(w3)


async def test_a_gas_spike_defers_new_sends_holds_the_one_out_and_nothing_stays_stuck(
    settings, worker_factory, tmp_path
):
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(chain.private_anvil())
        w3 = chain.connect(url)
        stack.push_async_callback(w3.provider.disconnect)
        relayer = await chain.funded_account(w3)
        await chain.rpc(w3, "evm_setAutomine", False)
        project = write_project(tmp_path)
        worker = worker_factory(
            project_path=project,
            env={"PAYOUT_KEY": relayer.key.hex()},
            rpc_urls={"local": url},
            send_bump_after=1.0,
        )
        await worker.wait_ready()

        async def sends_api():
            _, body = await worker.get("/api/sends")
            return body or {"sends": [], "deferred": []}

        async def out(nonce: int):
            found = [s for s in (await sends_api())["sends"] if s["nonce"] == nonce]
            return found[0] if found else None

        recipients = [chain.Account.create().address for _ in range(4)]
        first = await fire(
            settings,
            project,
            "payout",
            "manual:payout:1",
            {"recipients": recipients, "value": VALUE},
        )
        await wait_until(lambda: out(0), what="the first transfer to be out")
        await chain.evm_mine(w3)  # pays recipient 0; the run goes on to the next
        held = await wait_until(lambda: out(1), what="the second transfer to be out")

        # The spike: the base fee jumps to 40 gwei, eight times the cap.
        await set_base_fee(w3, 40 * GWEI)

        async def at_cap():
            found = [s for s in (await sends_api())["sends"] if s["state"] == "waiting"]
            return found[0] if found else None

        waiting = await wait_until(at_cap, timeout=60, what="the transfer at its cap to say so")
        assert waiting["id"] == held["id"] and not waiting["nonce_used"]
        assert "unmined at its fee cap of 5 gwei" in waiting["waiting_for"], waiting
        assert "--above-cap" in waiting["waiting_for"]

        # A new payout meanwhile is not signed: it waits, with no nonce taken.
        late = chain.Account.create().address
        second = await fire(
            settings, project, "payout", "manual:payout:2", {"recipients": [late], "value": VALUE}
        )

        async def deferred():
            found = (await sends_api())["deferred"]
            return found[0] if found else None

        waits = await wait_until(deferred, timeout=60, what="the new send to be deferred")
        assert waits["run_id"] == second and waits["step"] == "pay[0]"
        assert "not signed yet, no nonce taken" in waits["waiting_for"], waits

        async def shown_on_the_run():
            _, run = await worker.get(f"/api/runs/{second}")
            return (run or {}).get("deferred_sends")

        shown = await wait_until(shown_on_the_run, what="the run to show its deferred send")
        assert [d["id"] for d in shown] == [waits["id"]]
        conn = await storage.connect(settings)
        async with conn:
            cur = await conn.execute("SELECT send_key, nonce FROM sends ORDER BY nonce")
            stored = await cur.fetchall()
        assert [nonce for _, nonce in stored] == [0, 1], "the deferred send took no nonce"

        # The base fee falls: everything goes out, is mined once, in nonce order.
        await chain.rpc(w3, "evm_setAutomine", True)
        await set_base_fee(w3, GWEI // 2)

        async def all_mined():
            return await nonce_count(w3, relayer.address, "latest") >= 5

        await wait_until(all_mined, timeout=90, what="every transfer to be mined")
        for rid in (first, second):
            run = await settled_run(settings, rid, timeout=90)
            assert run["status"] == "succeeded", (run, worker.tail(80))
        for to in [*recipients, late]:
            balance = int(await chain.rpc(w3, "eth_getBalance", to, "latest"), 16)
            assert balance == VALUE, f"{to} got {balance}"
        assert await nonce_count(w3, relayer.address, "latest") == 5
        assert (await sends_api()) == {"sends": [], "deferred": []}
        conn = await storage.connect(settings)
        async with conn:
            cur = await conn.execute("SELECT count(*) FROM send_deferrals")
            assert (await cur.fetchone())[0] == 0
            cur = await conn.execute("SELECT nonce, status FROM sends ORDER BY nonce")
            assert await cur.fetchall() == [(n, "succeeded") for n in range(5)]


async def nonce_count(w3, address: str, tag: str) -> int:
    return int(await chain.rpc(w3, "eth_getTransactionCount", address, tag), 16)
