"""Pending sends under an operator's control, and step timeouts on sends and waits, on the
real anvil (mining paused on a private node), Postgres and Kafka: ``rflow sends ls``,
``speedup`` and ``cancel`` from the CLI and the HTTP API, with the budget checked after
each."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from rflow import storage
from rflow.storage import send_controls, sends
from tests.integration import chain
from tests.integration.harness import wait_until
from tests.integration.test_api import call
from tests.integration.test_runs import fire, settled_run
from tests.integration.test_sends import (
    BUDGET,
    ONE_TRANSFER,
    budget_usage,
    error_of,
    open_sends,
    pending_sends,
    private_node,
    reservations,
    sends_of_key,
    stored_sends,
    token_for,
    transfers_from,
    write_project,
)

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

GWEI = 10**9


async def rflow(settings, *args: str) -> subprocess.CompletedProcess[str]:
    """``rflow ARGS`` in a process of its own, as an operator runs it (not checked)."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "rflow.cli", *args],
        env={**settings.to_env(), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


async def stuck(stack, tmp_path, worker_factory, steps: str = ONE_TRANSFER, amount: int = 7):
    """A private anvil with mining paused, a worker whose relayer holds a fresh token under
    the ``daily`` budget, and one run of ``pay`` whose transfer of ``amount`` waits in the
    node's pool: the run, its open send and the recipient."""
    url, w3 = await private_node(stack)
    relayer = await chain.funded_account(w3)
    token = await token_for(w3, relayer)
    await chain.rpc(w3, "evm_setAutomine", False)
    project = write_project(tmp_path, token, steps, budgets=BUDGET, attach="    budgets: [daily]")
    worker = worker_factory(
        project_path=project,
        env={"PAYOUT_KEY": relayer.key.hex()},
        rpc_urls={"local": url},
        send_bump_after=600.0,  # no bump of its own while the test acts
    )
    await worker.wait_ready()
    to = chain.Account.create().address
    rid = await fire(worker.settings, project, "pay", "manual:pay:1", {"to": to, "amount": amount})
    [row] = await wait_until(lambda: pending_sends(worker.settings, 1), what="the send to be out")
    return SimpleNamespace(
        w3=w3, relayer=relayer, token=token, project=project, worker=worker, rid=rid, row=row, to=to
    )


async def usage(settings, project) -> tuple[int, int]:
    """The ``daily`` budget's Token cap: (consumed, reserved)."""
    row = (await budget_usage(settings, project))[("daily", "Token")]
    return row.consumed, row.reserved


async def mined_transaction(w3, tx_hash: str) -> dict[str, Any]:
    return await chain.rpc(w3, "eth_getTransactionByHash", tx_hash)


async def test_sends_ls_and_a_speedup_mine_the_new_fees_and_spend_once(
    settings, worker_factory, tmp_path
):
    async with contextlib.AsyncExitStack() as stack:
        node = await stuck(stack, tmp_path, worker_factory)
        row = node.row

        async def spent_at_hand_off() -> bool:  # moved from reserved just after the broadcast
            return await usage(settings, node.project) == (7, 0)

        await wait_until(spent_at_hand_off, what="the reservation to be spent")

        listed = await rflow(settings, "sends", "ls", "--json")
        assert listed.returncode == 0, listed.stderr
        [shown] = json.loads(listed.stdout)
        assert (shown["id"], shown["nonce"], shown["run_id"], shown["step"]) == (
            sends.send_id(row.send_key),
            row.nonce,
            node.rid,
            "pay",
        )
        assert (shown["max_fee_per_gas"], shown["attempts"], shown["state"]) == (
            row.latest.max_fee_per_gas,
            1,
            "pending",
        )
        table = await rflow(settings, "sends", "ls")
        assert table.stdout.splitlines()[0].split() == [
            "ID", "RELAYER", "NETWORK", "NONCE", "MAX", "FEE", "TIP", "AGE", "ATTEMPTS", "RUN",
            "STEP", "STATE",
        ]  # fmt: skip
        assert shown["id"] in table.stdout and "pending" in table.stdout

        max_fee = row.latest.max_fee_per_gas * 2
        tip = row.latest.max_priority_fee_per_gas * 2
        sped = await rflow(
            settings,
            "sends",
            "speedup",
            shown["id"],
            "--max-fee",
            str(max_fee),
            "--tip",
            f"{tip / GWEI:g} gwei",
        )
        assert sped.returncode == 0, (sped.stderr, node.worker.tail())
        assert f"send {shown['id']}: speed-up signed as transaction 0x" in sped.stdout
        assert "accepted by the node" in sped.stdout, sped.stdout
        again = await sends_of_key(settings, row.send_key)
        assert len(again.attempts) == 2 and again.nonce == row.nonce
        assert (again.latest.max_fee_per_gas, again.latest.max_priority_fee_per_gas) == (
            max_fee,
            tip,
        )
        assert await usage(settings, node.project) == (7, 0)

        await chain.evm_mine(node.w3)
        run = await settled_run(settings, node.rid)
        assert run["status"] == "succeeded", node.worker.tail()
        mined = run["steps"][0]["output"]["tx"]["hash"]
        assert mined == again.latest.tx_hash != row.tx_hash
        tx = await mined_transaction(node.w3, mined)
        assert (int(tx["maxFeePerGas"], 16), int(tx["maxPriorityFeePerGas"], 16)) == (max_fee, tip)
        [log] = await transfers_from(node.w3, node.token, node.relayer.address)
        assert log["transactionHash"] == mined
        assert await usage(settings, node.project) == (7, 0)
        assert [c["status"] for c in await reservations(settings, node.rid)] == ["spent"] * 2

        # Settled now: nothing left to change, and the CLI says so with a non-zero exit.
        for action in ("cancel", "speedup"):
            late = await rflow(settings, "sends", action, mined)
            assert late.returncode == 1, late
            verb = {"cancel": "cancel", "speedup": "speed up"}[action]
            assert late.stderr.strip() == (
                f"error: send {shown['id']}: the send has settled (succeeded): there is "
                f"nothing to {verb}"
            )
        assert json.loads((await rflow(settings, "sends", "ls", "--json")).stdout) == []


async def test_a_cancel_mines_a_self_transfer_releases_the_budget_and_pays_nobody(
    settings, worker_factory, tmp_path
):
    async with contextlib.AsyncExitStack() as stack:
        node = await stuck(stack, tmp_path, worker_factory)
        row = node.row
        # Cancelling the run waits for its send; it says so, and names the send to cancel.
        stop = await rflow(settings, "runs", "cancel", node.rid)
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout.splitlines() == [
            f"cancel requested: run {node.rid}",
            f"its send {row.send_id} is pending: the run stops once it settles; "
            f"`rflow sends cancel {row.send_id}` stops it sooner",
        ]
        cancelled = await rflow(settings, "sends", "cancel", row.tx_hash)
        assert cancelled.returncode == 0, (cancelled.stderr, node.worker.tail())
        assert "cancel signed as transaction 0x" in cancelled.stdout
        assert "accepted by the node" in cancelled.stdout, cancelled.stdout

        [original, filler] = sorted(await open_sends(settings), key=lambda r: r.purpose != "step")
        assert filler.purpose == "fill" and filler.nonce == row.nonce
        assert filler.to_address.lower() == node.relayer.address.lower() and filler.value == 0
        assert original.error["kind"] == "cancelled"
        # Still pending until the self-transfer is mined: listed, as being replaced.
        listed = json.loads((await rflow(settings, "sends", "ls", "--json")).stdout)
        assert [(s["purpose"], s["state"]) for s in listed] == [
            ("step", "being replaced (cancelled)"),
            ("fill", f"replacing {original.send_id}"),
        ]
        assert listed[1]["run_id"] == node.rid and listed[1]["step"] == "pay"
        again = await rflow(settings, "sends", "cancel", original.send_id)
        assert again.returncode == 1
        assert "the send is being replaced already (cancelled: cancelled by an operator" in (
            again.stderr
        )

        await chain.evm_mine(node.w3)
        run = await settled_run(settings, node.rid)
        assert run["status"] == "cancelled", (run, node.worker.tail())
        assert error_of(run, "pay")["kind"] == "cancelled"
        assert await transfers_from(node.w3, node.token, node.relayer.address) == []
        receipt = await chain.rpc(node.w3, "eth_getTransactionReceipt", filler.tx_hash)
        assert int(receipt["status"], 16) == 1
        assert (await sends_of_key(settings, row.send_key)).status == "cancelled"
        assert [c["status"] for c in await reservations(settings, node.rid)] == ["released"] * 2
        assert await usage(settings, node.project) == (0, 0)


async def test_a_cancel_that_loses_the_race_leaves_the_original_outcome(
    settings, worker_factory, tmp_path
):
    async with contextlib.AsyncExitStack() as stack:
        node = await stuck(stack, tmp_path, worker_factory)
        row = node.row
        status, answer = await call(
            node.worker, "POST", f"/api/sends/{sends.send_id(row.send_key)}/cancel"
        )
        assert status == 200, (answer, node.worker.tail())
        assert (answer["action"], answer["status"], answer["nonce"]) == (
            "cancel",
            "done",
            row.nonce,
        )
        # The self-transfer replaced the send in this node's pool; another node had the
        # original and mines it first.
        assert await mined_transaction(node.w3, row.tx_hash) is None
        assert await mined_transaction(node.w3, answer["tx_hash"]) is not None
        await chain.rpc(node.w3, "anvil_dropTransaction", answer["tx_hash"])
        with contextlib.suppress(RuntimeError):  # "already known", if rebroadcast meanwhile
            await chain.rpc(node.w3, "eth_sendRawTransaction", "0x" + row.latest.raw.hex())
        await chain.evm_mine(node.w3)
        assert await chain.rpc(node.w3, "eth_getTransactionReceipt", row.tx_hash) is not None

        run = await settled_run(settings, node.rid)
        assert run["status"] == "succeeded", (run, node.worker.tail())
        assert run["steps"][0]["output"]["tx"]["hash"] == row.tx_hash
        [log] = await transfers_from(node.w3, node.token, node.relayer.address)
        assert int(log["data"], 16) == 7
        assert await usage(settings, node.project) == (7, 0)
        assert [c["status"] for c in await reservations(settings, node.rid)] == ["spent"] * 2

        async def filler_settled():
            rows = await stored_sends(settings)
            return all(r.settled for r in rows) and rows

        rows = await wait_until(filler_settled, what="the self-transfer to settle")
        assert {(r.purpose, r.status) for r in rows} == {("step", "succeeded"), ("fill", "failed")}


async def test_a_step_timeout_cancels_a_send_that_is_not_mined_and_fails_timeout(
    settings, worker_factory, tmp_path
):
    steps = ONE_TRANSFER.replace(
        "        send_transaction:", "        timeout: 2s\n        send_transaction:"
    )
    async with contextlib.AsyncExitStack() as stack:
        node = await stuck(stack, tmp_path, worker_factory, steps)
        assert node.row.deadline is not None

        async def filled():
            rows = await open_sends(settings)
            return next((r for r in rows if r.purpose == "fill"), None)

        filler = await wait_until(filled, timeout=30, what="the send to be cancelled")
        conn = await storage.connect(settings)
        async with conn:
            cur = await conn.execute(
                "SELECT created_at FROM sends WHERE send_key = %s", (filler.send_key,)
            )
            (filled_at,) = await cur.fetchone()
        assert filled_at >= node.row.deadline
        assert filled_at - node.row.deadline < timedelta(seconds=10)

        # The filler is stored before it is broadcast: mine only once the node has it,
        # or the block holds the send itself.
        async def broadcast():
            return await mined_transaction(node.w3, filler.tx_hash)

        await wait_until(broadcast, timeout=30, what="the cancel to be broadcast")
        await chain.evm_mine(node.w3)

        run = await settled_run(settings, node.rid)
        assert run["status"] == "failed", (run, node.worker.tail())
        error = error_of(run, "pay")
        assert error["kind"] == "timeout"
        assert "the step's timeout ran out at" in error["message"]
        assert await transfers_from(node.w3, node.token, node.relayer.address) == []
        assert (await sends_of_key(settings, node.row.send_key)).status == "cancelled"
        assert await usage(settings, node.project) == (0, 0)


async def test_a_speedup_below_the_current_fees_or_of_a_missing_send_is_refused(
    settings, worker_factory, tmp_path
):
    async with contextlib.AsyncExitStack() as stack:
        node = await stuck(stack, tmp_path, worker_factory)
        row = node.row
        low = await rflow(
            settings, "sends", "speedup", row.send_key, "--max-fee", str(row.latest.max_fee_per_gas)
        )
        assert low.returncode == 1
        assert "a node replaces it only for at least 10 % more" in low.stderr, low.stderr
        missing = await rflow(settings, "sends", "cancel", "s000000000000")
        assert missing.returncode == 1
        assert missing.stderr.strip() == (
            "error: no send 's000000000000': give its id (rflow sends ls), its send key or the "
            "hash of one of its transactions"
        )
        for path, body, expected in (
            ("/api/sends/s000000000000/speedup", None, 404),
            ("/api/sends/s000000000000/cancel", None, 404),
            (f"/api/sends/{row.tx_hash}/speedup", {"max_fee": "1 wei"}, 400),
            (f"/api/sends/{row.tx_hash}/speedup", {"max_fee": "fast"}, 400),
            (f"/api/sends/{row.tx_hash}/speedup", {"above_cap": "yes"}, 400),
            (f"/api/sends/{row.tx_hash}/cancel", {"reason": "x"}, 400),
        ):
            status, answer = await call(node.worker, "POST", path, body)
            assert status == expected, (path, body, answer)
            assert answer["error"]
        # Nothing of that reached the chain or the send.
        assert len((await sends_of_key(settings, row.send_key)).attempts) == 1
        status, listed = await call(node.worker, "GET", "/api/sends?relayer=payout")
        assert status == 200 and [s["send_key"] for s in listed["sends"]] == [row.send_key]

        # A speed-up by default pays 12.5 % more (the network asks no more here).
        status, answer = await call(node.worker, "POST", f"/api/sends/{row.send_key}/speedup")
        assert status == 200, answer
        assert answer["max_fee_per_gas"] >= row.latest.max_fee_per_gas * 9 // 8
        assert answer["broadcast"] == "accepted by the node"


async def test_a_request_no_relayer_takes_lapses_and_says_nothing_was_changed(settings):
    """No worker runs: the request is refused with a non-zero exit, and can never be
    carried out by a worker that reads it later."""
    from tests.integration.test_sends import _new_send

    conn = await storage.connect(settings)
    async with conn, conn.transaction():
        await sends.insert_many(conn, [_new_send("k1", 5)])
    result = await rflow(settings, "sends", "cancel", "k1", "--wait", "1")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: send {sends.send_id('k1')}: no worker owning relayer 'payout' on local took "
        "the cancel within 1s, so it will not be carried out; nothing was changed"
    )
    conn = await storage.connect(settings)
    async with conn:
        cur = await conn.execute("SELECT request_id, status FROM send_controls")
        [(request_id, status)] = await cur.fetchall()
        assert status == "lapsed"
        assert not await send_controls.claim(conn, request_id, "0x" + "00" * 32)


WAIT = """
networks:
  local: { chain_id: 31337 }
workflows:
  hold:
    trigger: { manual: {} }
    steps:
      - id: hook
        timeout: 1s
        wait_for:
          webhook: { path: "/hooks/hold/${{ run.id }}", auth: { type: none } }
          on_timeout: continue
      - id: after
        command: { name: log, args: { message: "timed out: ${{ steps.hook.output.timed_out }}" } }
"""


async def test_a_step_timeout_on_a_wait_for_fires_its_on_timeout(
    settings, worker_factory, tmp_path
):
    project = tmp_path / "project.yaml"
    project.write_text(WAIT)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    rid = await fire(settings, project, "hold", "manual:hold:1", {})
    run = await settled_run(settings, rid)
    assert run["status"] == "succeeded", worker.tail()
    hook, after = run["steps"]
    assert hook["output"] == {"timed_out": True}
    assert after["output"] == {"message": "timed out: true"}
    took = hook["settled_at"] - hook["started_at"]
    assert timedelta(seconds=1) <= took < timedelta(seconds=20)
