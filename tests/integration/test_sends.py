"""Sends end to end: workflows whose steps send transactions through the embedded relayer,
on the real anvil, Postgres and Kafka."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from eth_utils import keccak

from rflow import storage
from rflow.lang import load_project
from rflow.relayer.build import MULTICALL3
from rflow.storage import budgets, sends
from rflow.storage.sends import Attempt
from tests.integration import chain
from tests.integration.harness import wait_until
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

TRANSFER_TOPIC = "0x" + keccak(text="Transfer(address,address,uint256)").hex()


def chain_resources(token: str, confirmations: int = 0) -> str:
    """The YAML of the shared anvil as network ``local``, TestToken at ``token`` as
    ``Token``, and relayer ``payout`` (its key in ``PAYOUT_KEY``)."""
    return f"""
networks:
  local: {{ chain_id: 31337, confirmations: {confirmations} }}
contracts:
  Token:
    address: {{ local: "{token}" }}
    abi: {chain.artifact_path("TestToken")}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
"""


def write_project(
    folder: Path,
    token: str,
    steps: str,
    *,
    budgets: str = "",
    attach: str = "",
    max_value: str = "",
    confirmations: int = 0,
) -> Path:
    """A project on the shared anvil: TestToken as ``Token``, relayer ``payout``."""
    path = folder / "project.yaml"
    path.write_text(
        chain_resources(token, confirmations)
        + f"""{budgets}
workflows:
  pay:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout]{max_value} }}
{attach}
    steps:
{steps}
"""
    )
    return path


async def token_for(w3, relayer, amount: int = 10**24) -> str:
    """A fresh TestToken, with ``amount`` minted to ``relayer``."""
    token, _ = await chain.deploy(w3, "TestToken", "Test", "TST", account=relayer)
    await chain.transact(w3, "TestToken", token, "mint", relayer.address, amount, account=relayer)
    return token


async def transfers_from(w3, token: str, sender: str) -> list[dict[str, Any]]:
    """Every Transfer log of ``token`` from ``sender``."""
    topic = "0x" + sender.lower().removeprefix("0x").rjust(64, "0")
    return await chain.rpc(
        w3,
        "eth_getLogs",
        {
            "address": token,
            "fromBlock": "0x0",
            "toBlock": "latest",
            "topics": [TRANSFER_TOPIC, topic],
        },
    )


def error_of(run: dict[str, Any], path: str) -> dict[str, Any]:
    """The error of step ``path`` of a settled run: its kind and message."""
    step = next(s for s in run["steps"] if s["path"] == path)
    return {"kind": step["error_kind"], "message": step["error_message"]}


async def reservations(settings, run_id: str) -> list[dict[str, Any]]:
    conn = await storage.connect(settings)
    async with conn:
        return await budgets.run_charges(conn, run_id)


async def sends_of(settings, run_id: str) -> list[dict[str, Any]]:
    conn = await storage.connect(settings)
    async with conn:
        return await sends.of_run(conn, run_id)


PAYOUT = """
      - id: payout
        foreach: "${{ trigger.recipients }}"
        max_parallel: 4
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "transfer(address,uint256)"
          args: ["${{ item.address }}", "${{ item.amount }}"]
      - id: report
        command: { name: log, args: { message: "paid ${{ steps.payout.output[0].tx.hash }}" } }
"""

BUDGET = """
budgets:
  daily:
    window: 24h
    max_native_value: 1 ether
    max_token_value: { Token: "1000000" }
    scope: { relayers: [payout], networks: [local] }
"""


async def test_a_foreach_payout_of_erc20_transfers_with_max_parallel_4(
    settings, worker_factory, tmp_path, w3
):
    relayer = await chain.funded_account(w3)
    token = await token_for(w3, relayer)
    project = write_project(tmp_path, token, PAYOUT, budgets=BUDGET, attach="    budgets: [daily]")
    worker = worker_factory(project_path=project, env={"PAYOUT_KEY": relayer.key.hex()})
    await worker.wait_ready()
    recipients = [
        {"address": chain.Account.create().address, "amount": 1000 + i} for i in range(12)
    ]
    rid = await fire(settings, project, "pay", "manual:pay:1", {"recipients": recipients})
    run = await settled_run(settings, rid, timeout=90)
    assert run["status"] == "succeeded", (run, worker.tail())

    logs = await transfers_from(w3, token, relayer.address)
    assert len(logs) == 12
    paid = {("0x" + log["topics"][2][-40:]).lower(): int(log["data"], 16) for log in logs}
    assert paid == {r["address"].lower(): r["amount"] for r in recipients}

    parent = next(s for s in run["steps"] if s["path"] == "payout")
    hashes = [o["tx"]["hash"] for o in parent["output"]]
    assert len(set(hashes)) == 12 and all(o["tx"]["status"] == "success" for o in parent["output"])
    assert sorted(s["nonce"] for s in await sends_of(settings, rid)) == list(range(2, 14))

    charges = await reservations(settings, rid)
    token_charges = [c for c in charges if c["asset"] == "Token"]
    assert len(token_charges) == 12 and {c["status"] for c in token_charges} == {"spent"}
    assert sum(c["amount"] for c in token_charges) == sum(r["amount"] for r in recipients)
    native = [c for c in charges if c["asset"] == "native"]
    assert len(native) == 12 and sum(c["amount"] for c in native) == 0


async def test_sends_over_one_of_two_caps_are_refused_alone(settings, worker_factory, tmp_path, w3):
    """Each payout charges native value (zero) and the token: once the token cap is
    reached the other transfers are refused, and nothing of theirs is reserved."""
    relayer = await chain.funded_account(w3)
    token = await token_for(w3, relayer)
    tight = BUDGET.replace(
        'max_token_value: { Token: "1000000" }', 'max_token_value: { Token: "4000" }'
    )
    project = write_project(tmp_path, token, PAYOUT, budgets=tight, attach="    budgets: [daily]")
    worker = worker_factory(project_path=project, env={"PAYOUT_KEY": relayer.key.hex()})
    await worker.wait_ready()
    recipients = [{"address": chain.Account.create().address, "amount": 1000} for _ in range(7)]
    rid = await fire(settings, project, "pay", "manual:pay:tight", {"recipients": recipients})
    run = await settled_run(settings, rid, timeout=90)
    assert run["status"] == "failed", (run, worker.tail())

    iterations = [s for s in run["steps"] if s["path"].startswith("payout[")]
    kinds = [s["error_kind"] or "ok" for s in iterations]
    assert kinds.count("ok") == 4 and set(kinds) - {"ok"} <= {"budget_exceeded"}, kinds
    assert len(await transfers_from(w3, token, relayer.address)) == 4
    charges = await reservations(settings, rid)
    token_charges = [c for c in charges if c["asset"] == "Token"]
    assert sum(c["amount"] for c in token_charges) == 4000
    # A refused send reserved nothing, not even its zero native charge.
    assert {c["send_key"] for c in charges} == {c["send_key"] for c in token_charges}
    assert len(await sends_of(settings, rid)) == 4


async def private_node(stack):
    """A private anvil (automine on) with its URL and a web3 on it; close with ``stack``."""
    url = await stack.enter_async_context(chain.private_anvil())
    w3 = chain.connect(url)
    stack.push_async_callback(w3.provider.disconnect)
    return url, w3


async def paused_chain(stack, tmp_path, worker_factory, *, amount: int = 10**24, **options):
    """A private anvil with mining paused, a relayer holding ``amount`` of a fresh token,
    and a ready worker running ``write_project(..., **project)`` against that node."""
    project_options = options.pop("project", {})
    url, w3 = await private_node(stack)
    relayer = await chain.funded_account(w3)
    token = await token_for(w3, relayer, amount=amount)
    await chain.rpc(w3, "evm_setAutomine", False)
    project = write_project(tmp_path, token, ONE_TRANSFER, **project_options)
    worker = worker_factory(
        project_path=project,
        env={"PAYOUT_KEY": relayer.key.hex()},
        rpc_urls={"local": url},
        **options,
    )
    await worker.wait_ready()
    return SimpleNamespace(w3=w3, relayer=relayer, token=token, project=project, worker=worker)


async def pending_sends(settings, count: int) -> list[Any] | None:
    """The open sends by nonce, once there are at least ``count``."""
    rows = await open_sends(settings)
    return sorted(rows, key=lambda r: r.nonce) if len(rows) >= count else None


async def open_sends(settings) -> list[Any]:
    return await stored_sends(settings, open_only=True)


async def stored_sends(settings, *, open_only: bool = False) -> list[Any]:
    """Every stored send (or every unsettled one), with its attempts."""
    query = "SELECT send_key FROM sends" + (" WHERE settled_at IS NULL" if open_only else "")
    conn = await storage.connect(settings)
    async with conn:
        cur = await conn.execute(query)
        return [await sends.find(conn, key) for (key,) in await cur.fetchall()]


ONE_TRANSFER = """
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "transfer(address,uint256)"
          args: ["${{ trigger.to }}", "${{ trigger.amount }}"]
"""


async def test_a_revert_on_chain_releases_its_reservation(settings, worker_factory, tmp_path):
    async with contextlib.AsyncExitStack() as stack:
        node = await paused_chain(
            stack,
            tmp_path,
            worker_factory,
            amount=100,
            project={"budgets": BUDGET, "attach": "    budgets: [daily]"},
        )
        w3, relayer, token, project, worker = (
            node.w3,
            node.relayer,
            node.token,
            node.project,
            node.worker,
        )
        to = chain.Account.create().address
        # Both simulate against a balance of 100; mined together, the second reverts.
        first = await fire(settings, project, "pay", "manual:pay:a", {"to": to, "amount": 100})

        await wait_until(lambda: pending_sends(settings, 1), what="the first send to be out")
        second = await fire(settings, project, "pay", "manual:pay:b", {"to": to, "amount": 100})
        await wait_until(lambda: pending_sends(settings, 2), what="both sends to be out")
        await chain.evm_mine(w3)
        ok, reverted = await settled_run(settings, first), await settled_run(settings, second)
        assert ok["status"] == "succeeded", worker.tail()
        assert reverted["status"] == "failed"
        assert error_of(reverted, "pay")["kind"] == "reverted", reverted
        assert {c["status"] for c in await reservations(settings, first)} == {"spent"}
        assert {c["status"] for c in await reservations(settings, second)} == {"released"}
        usage = await budget_usage(settings, project)
        assert usage[("daily", "Token")].consumed == 100
        assert len(await transfers_from(w3, token, relayer.address)) == 1


async def budget_usage(settings, project: Path) -> dict[tuple[str, str], Any]:
    declared = load_project(project, {}).budgets
    conn = await storage.connect(settings)
    async with conn:
        rows = await budgets.usage(conn, declared)
    return {(r.budget, r.asset): r for r in rows}


async def test_max_gas_spend_stops_sends_once_the_ledger_reaches_it(
    settings, worker_factory, tmp_path, w3
):
    relayer = await chain.funded_account(w3)
    token = await token_for(w3, relayer)
    gas_budget = """
budgets:
  gas:
    window: 1h
    max_gas_spend: 1 wei
    scope: { relayers: [payout] }
"""
    project = write_project(
        tmp_path, token, ONE_TRANSFER, budgets=gas_budget, attach="    budgets: [gas]"
    )
    worker = worker_factory(project_path=project, env={"PAYOUT_KEY": relayer.key.hex()})
    await worker.wait_ready()
    to = chain.Account.create().address
    first = await fire(settings, project, "pay", "manual:pay:1", {"to": to, "amount": 5})
    assert (await settled_run(settings, first))["status"] == "succeeded", worker.tail()
    second = await fire(settings, project, "pay", "manual:pay:2", {"to": to, "amount": 5})
    run = await settled_run(settings, second)
    assert run["status"] == "failed"
    assert error_of(run, "pay")["kind"] == "budget_exceeded", run
    assert len(await transfers_from(w3, token, relayer.address)) == 1
    usage = await budget_usage(settings, project)
    assert usage[("gas", "gas")].consumed > 0


async def test_a_stuck_transaction_is_bumped_and_mined_once(settings, worker_factory, tmp_path):
    async with contextlib.AsyncExitStack() as stack:
        node = await paused_chain(stack, tmp_path, worker_factory, send_bump_after=1.0)
        w3, relayer, token, project, worker = (
            node.w3,
            node.relayer,
            node.token,
            node.project,
            node.worker,
        )
        to = chain.Account.create().address
        rid = await fire(settings, project, "pay", "manual:pay:1", {"to": to, "amount": 7})

        async def bumped():
            rows = await open_sends(settings)
            return rows and len(rows[0].attempts) >= 2 and rows[0]

        row = await wait_until(bumped, timeout=30, what="the stuck send to be bumped")
        first, second = row.attempts[0], row.attempts[1]
        assert second.nonce == first.nonce
        assert second.max_fee_per_gas * 10 >= first.max_fee_per_gas * 11
        await chain.evm_mine(w3)
        run = await settled_run(settings, rid)
        assert run["status"] == "succeeded", worker.tail()
        mined = run["steps"][0]["output"]["tx"]["hash"]
        assert mined in {a.tx_hash for a in (await sends_of_key(settings, row.send_key)).attempts}
        assert mined != first.tx_hash
        logs = await transfers_from(w3, token, relayer.address)
        assert len(logs) == 1 and logs[0]["transactionHash"] == mined


async def test_a_send_reorged_away_before_its_confirmations_goes_out_again(
    settings, worker_factory, tmp_path
):
    async with contextlib.AsyncExitStack() as stack:
        url, w3 = await private_node(stack)
        relayer = await chain.funded_account(w3)
        token = await token_for(w3, relayer)
        project = write_project(tmp_path, token, ONE_TRANSFER, confirmations=3)
        worker = worker_factory(
            project_path=project, env={"PAYOUT_KEY": relayer.key.hex()}, rpc_urls={"local": url}
        )
        await worker.wait_ready()
        to = chain.Account.create().address
        rid = await fire(settings, project, "pay", "manual:pay:reorg", {"to": to, "amount": 9})

        async def seen_mined():
            return "waiting for 3 confirmations" in worker.tail(200)

        await wait_until(seen_mined, timeout=30, what="the relayer to see its send mined")
        [row] = await open_sends(settings)
        # The worker rebroadcasts as soon as it sees the transfer gone: with automine on,
        # the node could mine it again before the check below. Blocks are mined by hand.
        await chain.rpc(w3, "evm_setAutomine", False)
        await chain.reorg(w3, 1)  # its block replaced by an empty one: the transfer is gone
        assert await chain.rpc(w3, "eth_getTransactionReceipt", row.tx_hash) is None

        async def back_on_chain():
            await chain.mine(w3)
            return await transfers_from(w3, token, relayer.address)

        [log] = await wait_until(back_on_chain, timeout=30, what="the transfer to be mined again")
        await chain.mine(w3, 3)
        run = await settled_run(settings, rid)
        assert run["status"] == "succeeded", worker.tail()
        # The same signed transaction, at the same nonce: nothing signed anew, no filler.
        assert log["transactionHash"] == row.tx_hash == run["steps"][0]["output"]["tx"]["hash"]
        assert [r.purpose for r in await stored_sends(settings)] == ["step"]


async def sends_of_key(settings, key: str):
    conn = await storage.connect(settings)
    async with conn:
        return await sends.find(conn, key)


async def test_a_dropped_transactions_nonce_gap_is_filled(settings, worker_factory, tmp_path):
    async with contextlib.AsyncExitStack() as stack:
        node = await paused_chain(stack, tmp_path, worker_factory)
        w3, relayer, token, project, worker = (
            node.w3,
            node.relayer,
            node.token,
            node.project,
            node.worker,
        )
        to = chain.Account.create().address
        dropped = await fire(settings, project, "pay", "manual:pay:a", {"to": to, "amount": 1})

        (a,) = await wait_until(lambda: pending_sends(settings, 1), what="the first send to be out")
        await chain.rpc(w3, "anvil_dropTransaction", a.tx_hash)

        async def filled():
            rows = await open_sends(settings)
            return next((r for r in rows if r.purpose == "fill"), None)

        filler = await wait_until(filled, timeout=30, what="the nonce gap to be filled")
        assert filler.nonce == a.nonce and filler.to_address.lower() == relayer.address.lower()
        # The next send takes the next nonce: without the filler it could never be mined.
        later = await fire(settings, project, "pay", "manual:pay:b", {"to": to, "amount": 2})

        async def out():
            rows = await open_sends(settings)
            return next((r for r in rows if r.nonce == a.nonce + 1), None)

        await wait_until(out, what="the next send to be out")
        await chain.evm_mine(w3)
        failed, ok = await settled_run(settings, dropped), await settled_run(settings, later)
        assert failed["status"] == "failed" and error_of(failed, "pay")["kind"] == "dropped", failed
        assert ok["status"] == "succeeded", worker.tail()
        logs = await transfers_from(w3, token, relayer.address)
        assert [int(log["data"], 16) for log in logs] == [2]
        assert await chain.rpc(w3, "eth_getTransactionCount", relayer.address, "latest") == hex(
            a.nonce + 2
        )
        assert {c["status"] for c in await reservations(settings, dropped)} <= {"released"}


async def test_200_racing_sends_never_exceed_their_budget(settings, worker_factory, tmp_path, w3):
    relayers = [await chain.funded_account(w3) for _ in range(4)]
    recipient = chain.Account.create().address
    declared = "\n".join(f"  r{i}: {{ key_env: KEY_{i}, networks: [local] }}" for i in range(4))
    flows = "\n".join(
        f"""  w{i}:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [r{i}] }}
    budgets: [cap]
    steps:
      - id: pay
        send_transaction: {{ network: local, relayer: r{i}, to: "{recipient}", value: 1000 wei }}"""
        for i in range(4)
    )
    project = tmp_path / "project.yaml"
    project.write_text(
        f"""
networks:
  local: {{ chain_id: 31337, confirmations: 0 }}
relayers:
{declared}
budgets:
  cap: {{ window: 1h, max_native_value: 150000 wei }}
workflows:
{flows}
"""
    )
    env = {f"KEY_{i}": account.key.hex() for i, account in enumerate(relayers)}
    # One worker: the sends race through four relayers into one cap. Reservations racing
    # on separate connections are tested in test_budgets.py.
    workers = [worker_factory(project_path=project, env=env)]
    await workers[0].wait_ready()
    rids = [await fire(settings, project, f"w{n % 4}", f"manual:race:{n}", {}) for n in range(200)]
    runs = [await settled_run(settings, rid, timeout=120) for rid in rids]
    statuses = [r["status"] for r in runs]
    assert statuses.count("succeeded") == 150, [w.tail() for w in workers]
    failed = [error_of(r, "pay")["kind"] for r in runs if r["status"] == "failed"]
    assert failed == ["budget_exceeded"] * 50
    balance = await chain.rpc(w3, "eth_getBalance", recipient, "latest")
    assert int(balance, 16) == 150 * 1000
    usage = await budget_usage(settings, project)
    assert usage[("cap", "native")].consumed == 150_000
    assert usage[("cap", "native")].reserved == 0


async def test_sigkill_during_100_sends_leaves_exactly_100_transfers(
    settings, worker_factory, tmp_path, w3
):
    relayer = await chain.funded_account(w3)
    token = await token_for(w3, relayer)
    project = write_project(
        tmp_path, token, ONE_TRANSFER, budgets=BUDGET, attach="    budgets: [daily]"
    )
    env = {"PAYOUT_KEY": relayer.key.hex()}
    worker = worker_factory(project_path=project, env=env)
    await worker.wait_ready()
    to = chain.Account.create().address
    amounts = [random.randint(1, 1000) for _ in range(100)]
    rids = [
        await fire(settings, project, "pay", f"manual:pay:{n}", {"to": to, "amount": amount})
        for n, amount in enumerate(amounts)
    ]

    async def stored() -> int:
        conn = await storage.connect(settings)
        async with conn:
            cur = await conn.execute("SELECT count(*) FROM sends")
            return (await cur.fetchone())[0]

    for point in sorted(random.sample(range(5, 95), 3)):
        await wait_until(
            lambda point=point: _at_least(stored, point), timeout=120, what=f"{point} sends"
        )
        worker.kill()
        worker = worker_factory(project_path=project, env=env)
        await worker.wait_ready()
    runs = [await settled_run(settings, rid, timeout=180) for rid in rids]
    assert [r["status"] for r in runs] == ["succeeded"] * 100, worker.tail()
    logs = await transfers_from(w3, token, relayer.address)
    assert len(logs) == 100
    assert sorted(int(log["data"], 16) for log in logs) == sorted(amounts)
    usage = await budget_usage(settings, project)
    assert usage[("daily", "Token")].consumed == sum(amounts)
    assert usage[("daily", "Token")].reserved == 0


async def _at_least(count, point: int) -> bool:
    return await count() >= point


MULTICALL = """
      - id: batch
        send_transaction:
          network: local
          relayer: payout
          calls:
            - { to: "${{ trigger.a }}", value: 1000 }
            - { to: "${{ trigger.b }}", value: 2000 }
            - contract: Token
              function: "mint(address,uint256)"
              args: ["${{ trigger.a }}", 5]
"""


async def test_a_multicall_batch_runs_every_call_in_one_transaction_and_charges_native_only(
    settings, worker_factory, tmp_path
):
    async with contextlib.AsyncExitStack() as stack:
        url, w3 = await private_node(stack)
        relayer = await chain.funded_account(w3)
        token = await token_for(w3, relayer)
        # Multicall3 at its canonical address, as on the chains that have it.
        deployed, _ = await chain.deploy(w3, "Multicall3", account=relayer)
        code = await chain.rpc(w3, "eth_getCode", deployed, "latest")
        await chain.rpc(w3, "anvil_setCode", MULTICALL3, code)
        project = write_project(
            tmp_path, token, MULTICALL, budgets=BUDGET, attach="    budgets: [daily]"
        )
        worker = worker_factory(
            project_path=project, env={"PAYOUT_KEY": relayer.key.hex()}, rpc_urls={"local": url}
        )
        await worker.wait_ready()
        a, b = chain.Account.create().address, chain.Account.create().address
        rid = await fire(settings, project, "pay", "manual:pay:batch", {"a": a, "b": b})
        run = await settled_run(settings, rid, timeout=90)
        assert run["status"] == "succeeded", (run, worker.tail())
        [step] = [s for s in run["steps"] if s["path"] == "batch"]
        receipt = await w3.eth.get_transaction_receipt(step["output"]["tx"]["hash"])
        assert receipt["to"].lower() == MULTICALL3.lower() and receipt["status"] == 1
        assert await w3.eth.get_balance(a) == 1000
        assert await w3.eth.get_balance(b) == 2000
        contract = w3.eth.contract(address=token, abi=chain.artifact("TestToken")["abi"])
        assert await contract.functions.balanceOf(a).call() == 5
        # A batch charges its native value only, even with a call to the budget's token.
        charges = await reservations(settings, rid)
        assert [(c["asset"], c["amount"], c["status"]) for c in charges] == [
            ("native", 3000, "spent")
        ]


async def test_a_batch_takes_a_block_of_nonces_and_is_stored_in_one_go(settings):
    conn = await storage.connect(settings)
    async with conn:
        async with conn.transaction():
            # First use: the chain has used 7 nonces; three sends take 7, 8 and 9.
            assert await sends.next_nonce(conn, "local", ADDRESS, 7, 3) == 7
            assert await sends.next_nonce(conn, "local", ADDRESS, None) == 10
            # A resync never goes back over what was signed, nor below the chain.
            assert await sends.next_nonce(conn, "local", ADDRESS, 5, 2) == 11
            assert await sends.next_nonce(conn, "local", ADDRESS, 20, 1) == 20
        new = [_new_send(f"k{i}", nonce) for i, nonce in enumerate((7, 8, 9))]
        async with conn.transaction():
            assert await sends.insert_many(conn, new) == {"k0", "k1", "k2"}
        # Stored again (a second delivery): nothing is stored, the first rows stand.
        again = [_new_send("k1", 30), _new_send("k3", 31)]
        async with conn.transaction():
            assert await sends.insert_many(conn, again) == {"k3"}
        found = await sends.find_many(conn, ["k0", "k1", "k3", "missing"])
    assert sorted(found) == ["k0", "k1", "k3"]
    assert found["k1"].nonce == 8
    assert [a.nonce for a in found["k1"].attempts] == [8]
    assert found["k3"].latest.raw == b"raw-31"


ADDRESS = "0x" + "ab" * 20


def _new_send(key: str, nonce: int) -> sends.NewSend:
    attempt = Attempt(f"0x{nonce:064x}", nonce, 2 * 10**9, 10**8, f"raw-{nonce}".encode())
    return sends.NewSend(
        send_key=key,
        purpose="step",
        run_id=None,
        workflow=None,
        reply=None,
        network="local",
        relayer="payout",
        address=ADDRESS,
        nonce=nonce,
        to_address="0x" + "cd" * 20,
        value=0,
        data=b"",
        gas_limit=21_000,
        fee_cap=4 * 10**9,
        attempt=attempt,
    )
