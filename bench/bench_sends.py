"""Sends per second end to end, beside a plain web3.py loop on the same node.

rflow: N runs of a one-step workflow whose step is an ERC20 ``transfer`` through the
embedded relayer (permissions, simulation, fee history, a budget reservation, nonce and
signed transaction committed to Postgres, broadcast, receipt), from the first trigger
produced to the last run settled in the read model.

Both run against a fresh anvil of the benchmark's own (``--shared-node`` for the stack's).
Baseline, measured in the same run against the same anvil: one process signing the same
transfers and sending them one after another with ``eth_sendRawTransaction``, polling
each receipt every 2 ms.

    python bench/bench_sends.py [--count 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import emit, verdict
from _stack import Worker, check_stack, cleanup, fresh_settings, prepare, query_one

from rflow.lang import load_project
from rflow.streams.producer import Producer
from rflow.triggering import trigger_record
from tests.integration import chain

PROJECT = """
networks:
  local: {{ chain_id: 31337, confirmations: 0 }}
contracts:
  Token:
    address: {{ local: "{token}" }}
    abi: {abi}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
budgets:
  daily: {{ window: 24h, max_token_value: {{ Token: "1000000000000" }} }}
workflows:
  pay:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout] }}
    budgets: [daily]
    steps:
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "transfer(address,uint256)"
          args: ["${{{{ trigger.to }}}}", 1]
"""


async def baseline(w3, token: str, sender, recipient: str, count: int) -> float:
    """Transfers per second of a sequential web3.py sender."""
    data = chain.calldata(w3, "TestToken", token, "transfer", recipient, 1)
    nonce = await w3.eth.get_transaction_count(sender.address, "pending")
    chain_id = await w3.eth.chain_id
    fees = await chain.rpc(w3, "eth_feeHistory", hex(5), "latest", [50])
    base = int(fees["baseFeePerGas"][-1], 16)
    start = time.perf_counter()
    for i in range(count):
        signed = sender.sign_transaction(
            {
                "type": 2,
                "chainId": chain_id,
                "nonce": nonce + i,
                "to": token,
                "value": 0,
                "data": data,
                "gas": 80_000,
                "maxFeePerGas": 2 * base + 10**8,
                "maxPriorityFeePerGas": 10**8,
            }
        )
        tx_hash = await chain.rpc(
            w3, "eth_sendRawTransaction", "0x" + bytes(signed.raw_transaction).hex()
        )
        await chain.wait_receipt(w3, tx_hash, interval=0.002)
    return count / (time.perf_counter() - start)


async def rflow_rate(settings, project: Path, recipient: str, count: int, tag: str) -> float:
    """Sends per second through a worker, from the first trigger to the last run settled."""
    before = await query_one(settings, "SELECT count(*) FROM runs")
    workflow = load_project(project, {}).workflows["pay"]
    records = [
        trigger_record(
            "pay",
            workflow,
            source="manual",
            trigger_key=f"manual:pay:{tag}:{i}",
            payload={"to": recipient},
            received_at=datetime.now(UTC),
        )
        for i in range(count)
    ]
    start = time.perf_counter()
    async with Producer(settings) as producer:
        for record in records:
            await producer.send("rflow.triggers", record.partition_key, record)
    while True:
        settled = await query_one(
            settings, "SELECT count(*) FROM runs WHERE settled_at IS NOT NULL"
        )
        if settled >= before + count:
            break
        await asyncio.sleep(0.02)
    elapsed = time.perf_counter() - start
    failed = await query_one(settings, "SELECT count(*) FROM runs WHERE status <> 'succeeded'")
    if failed:
        raise SystemExit(f"{failed} runs did not succeed: see the worker log")
    return count / elapsed


async def run(count: int, workdir: Path, shared_node: bool) -> None:
    async with contextlib.AsyncExitStack() as stack:
        settings = fresh_settings("sends", workdir)
        if not shared_node:
            # A node of its own: the stack's anvil slows down as its chain grows, and a
            # slower node would flatter the ratio (the baseline waits on it, rflow less).
            url = await stack.enter_async_context(chain.private_anvil())
            settings = settings.model_copy(update={"rpc_urls": {"local": url}})
        await measure(settings, count, workdir)


async def measure(settings, count: int, workdir: Path) -> None:
    await check_stack(settings)
    await prepare(settings)
    w3 = chain.connect(settings.rpc_url("local"))
    worker = None
    try:
        relayer = await chain.funded_account(w3, 1000)
        plain = await chain.funded_account(w3, 1000)
        token, _ = await chain.deploy(w3, "TestToken", "Bench", "BNC", account=relayer)
        for holder in (relayer, plain):
            await chain.transact(
                w3, "TestToken", token, "mint", holder.address, 10**24, account=relayer
            )
        recipient = chain.Account.create().address
        project = workdir / "project.yaml"
        project.write_text(PROJECT.format(token=token, abi=chain.artifact_path("TestToken")))
        worker = Worker(
            settings.model_copy(update={"project_path": project}),
            workdir / "worker.log",
            extra_env={"PAYOUT_KEY": relayer.key.hex()},
        ).start()
        await worker.wait_ready()
        await rflow_rate(settings, project, recipient, 20, "warm")  # connections, caches
        base = await baseline(w3, token, plain, recipient, count)
        ours = await rflow_rate(settings, project, recipient, count, "measured")
        emit(
            "sends",
            [
                (
                    "sends/s end to end (reserve, sign, broadcast, receipt)",
                    f"{ours:.1f} sends/s",
                    f"{base:.1f} sends/s (web3.py loop)",
                    f"{ours / base:.2f}",
                    ">= 0.7 of baseline",
                    verdict(ours / base >= 0.7),
                )
            ],
        )
    finally:
        if worker is not None:
            worker.stop()
        await w3.provider.disconnect()
        await cleanup(settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300, help="transfers per side")
    parser.add_argument(
        "--shared-node", action="store_true", help="use the stack's anvil, not a fresh one"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rflow-bench-sends-") as workdir:
        asyncio.run(run(args.count, Path(workdir), args.shared_node))


if __name__ == "__main__":
    main()
