"""No second transfer, ever: sends through nodes that lag, on the real stack.

Each test puts the project's lagging proxy (:mod:`tests.integration.lagging_rpc`) in
front of a private anvil, pays a fresh recipient per run, and counts on the chain
itself: each recipient holds exactly what one transfer pays, the relayer's account has
used exactly one nonce per run, and each run reports the transaction the chain mined
(its hash and nonce), charged once to the budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from playwright.async_api import expect
from prometheus_client.parser import text_string_to_metric_families

from rflow import storage
from rflow.lang import load_project
from rflow.storage import budgets
from tests.integration import chain
from tests.integration.browser import chromium, screenshot, sign_in
from tests.integration.harness import wait_until
from tests.integration.lagging_rpc import LaggingRpc
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

VALUE = 10**12
"""Wei paid per run."""
FOREVER = 10**6
"""Seconds: hidden until the test says otherwise."""


async def cli(settings, *args: str) -> str:
    """``rflow ARGS`` in a process of its own against this test's stack; its output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rflow.cli",
        *args,
        env={**os.environ, **settings.to_env()},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    assert process.returncode == 0, out.decode()
    return out.decode()


def write_project(folder: Path, endpoints: dict[str, int], confirmations: int = 1) -> Path:
    """One workflow paying ``trigger.to`` VALUE wei from relayer ``payout`` on network
    ``local``, whose endpoints are ``endpoints`` (name -> weight; their URLs in
    ``URL_<NAME>``), charged to budget ``daily``."""
    listed = ", ".join(
        f"{{ name: {name}, url_env: URL_{name.upper()}, weight: {weight} }}"
        for name, weight in endpoints.items()
    )
    path = folder / "project.yaml"
    path.write_text(
        f"""
networks:
  local: {{ chain_id: 31337, confirmations: {confirmations}, endpoints: [{listed}] }}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
budgets:
  daily:
    window: 24h
    max_native_value: 1 ether
    scope: {{ relayers: [payout], networks: [local] }}
workflows:
  pay:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout], max_value_per_tx: 1 ether }}
    budgets: [daily]
    steps:
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          to: "${{{{ trigger.to }}}}"
          value: "${{{{ trigger.value }}}}"
"""
    )
    return path


async def lagging_chain(stack, tmp_path, worker_factory, proxies: dict[str, dict], **options):
    """A private anvil, a funded relayer, a lagging proxy per endpoint (``name`` ->
    :class:`LaggingRpc` settings) and a ready worker whose network lists them."""
    url = await stack.enter_async_context(chain.private_anvil())
    w3 = chain.connect(url)
    stack.push_async_callback(w3.provider.disconnect)
    relayer = await chain.funded_account(w3)
    weights = {name: settings.pop("weight", 1) for name, settings in proxies.items()}
    nodes = {
        name: await stack.enter_async_context(LaggingRpc(url, **settings))
        for name, settings in proxies.items()
    }
    project = write_project(tmp_path, weights, options.pop("confirmations", 1))
    env = {"PAYOUT_KEY": relayer.key.hex()}
    env |= {f"URL_{name.upper()}": node.url for name, node in nodes.items()}
    options = {"send_bump_after": 2.0, **options}
    worker = worker_factory(project_path=project, env=env, **options)
    await worker.wait_ready()
    return SimpleNamespace(
        w3=w3, url=url, relayer=relayer, nodes=nodes, project=project, worker=worker, env=env
    )


async def pay(settings, node, count: int, prefix: str) -> list[tuple[str, str]]:
    """Fire ``count`` runs, each paying a fresh recipient: (run id, recipient) each."""
    paid = []
    for i in range(count):
        to = chain.Account.create().address
        rid = await fire(
            settings, node.project, "pay", f"manual:{prefix}:{i}", {"to": to, "value": VALUE}
        )
        paid.append((rid, to))
    return paid


async def broadcast(node, count: int) -> None:
    """Wait until ``count`` transactions went out and a node hid what it was asked."""

    async def out():
        seen = sum(len(n.seen) for n in node.nodes.values())
        hidden = sum(sum(n.hidden.values()) for n in node.nodes.values())
        return seen >= count and hidden > 0

    await wait_until(out, timeout=60, what=f"{count} sends to go out and be hidden")


async def assert_paid_once(settings, node, paid: list[tuple[str, str]], nonce_before: int):
    """Every run succeeded with the transaction the chain mined; every recipient was paid
    once; the relayer used one nonce per run; the budget was charged once per run."""
    for rid, to in paid:
        run = await settled_run(settings, rid, timeout=120)
        assert run["status"] == "succeeded", (run, node.worker.tail(80))
        assert int(await chain.rpc(node.w3, "eth_getBalance", to, "latest"), 16) == VALUE, (
            f"{to} was paid a different amount than one transfer",
            node.worker.tail(80),
        )
        tx = run["steps"][0]["output"]["tx"]
        mined = await chain.rpc(node.w3, "eth_getTransactionByHash", tx["hash"])
        assert mined is not None and mined["to"].lower() == to.lower()
        assert int(mined["nonce"], 16) == tx["nonce"], (mined, tx)
        receipt = await chain.rpc(node.w3, "eth_getTransactionReceipt", tx["hash"])
        assert int(receipt["status"], 16) == 1 and int(receipt["blockNumber"], 16) == tx["block"]
    used = int(
        await chain.rpc(node.w3, "eth_getTransactionCount", node.relayer.address, "latest"), 16
    )
    assert used - nonce_before == len(paid), node.worker.tail(120)
    declared = load_project(node.project, {}).budgets
    conn = await storage.connect(settings)
    async with conn:
        usage = {(r.budget, r.asset): r for r in await budgets.usage(conn, declared)}
        cur = await conn.execute("SELECT count(*) FROM sends WHERE purpose = 'fill'")
        (fillers,) = await cur.fetchone()
    assert usage[("daily", "native")].consumed == VALUE * len(paid)
    assert fillers == 0


async def nonce_of(node) -> int:
    return int(
        await chain.rpc(node.w3, "eth_getTransactionCount", node.relayer.address, "latest"), 16
    )


@pytest.mark.parametrize(
    "faults",
    [
        pytest.param({"hide_receipts": 8.0}, id="receipts-hidden"),
        pytest.param({"hide_receipts": 8.0, "hide_transactions": 8.0}, id="receipts-and-txs"),
        pytest.param(
            {"hide_receipts": 8.0, "hide_transactions": 8.0, "as_errors": True}, id="errors"
        ),
    ],
)
async def test_a_node_hiding_what_it_mined_past_a_bump_pays_once(
    settings, worker_factory, tmp_path, faults
):
    """The node shows the nonce used but hides the receipt (and the transaction) for
    longer than the bump interval: the bump meets "nonce too low", and the relayer waits
    for the proof instead of signing again."""
    async with contextlib.AsyncExitStack() as stack:
        node = await lagging_chain(stack, tmp_path, worker_factory, {"main": faults})
        before = await nonce_of(node)
        paid = await pay(settings, node, 3, "hidden")
        await broadcast(node, 3)
        await assert_paid_once(settings, node, paid, before)
        assert "signed again" not in node.worker.tail(400)


async def test_a_node_behind_by_blocks_pays_once(settings, worker_factory, tmp_path):
    """A node 20 blocks behind shows neither the transfers nor their receipts until the
    chain is 20 blocks further: the sends wait, then settle with what was mined."""
    async with contextlib.AsyncExitStack() as stack:
        node = await lagging_chain(stack, tmp_path, worker_factory, {"main": {"lag_blocks": 20}})
        before = await nonce_of(node)
        paid = await pay(settings, node, 3, "behind")

        async def mined():
            return await nonce_of(node) - before >= 3 and node.nodes["main"].hidden["lagged"] > 5

        await wait_until(mined, timeout=60, what="the transfers mined and hidden by the lag")
        await chain.mine(node.w3, 25)
        await assert_paid_once(settings, node, paid, before)


async def test_a_worker_killed_while_its_node_hides_receipts_pays_once_and_says_why_it_waits(
    settings, worker_factory, tmp_path
):
    """The node hides receipts and transactions until the test lets it show them; the
    worker is killed after the transfers are mined and started again. Meanwhile each
    send waits, and says so on the API, in `rflow runs show` and in the console."""
    async with contextlib.AsyncExitStack() as stack:
        faults = {"hide_receipts": FOREVER, "hide_transactions": FOREVER}
        node = await lagging_chain(stack, tmp_path, worker_factory, {"main": faults})
        before = await nonce_of(node)
        paid = await pay(settings, node, 3, "restart")
        await broadcast(node, 3)

        async def all_mined():
            return await nonce_of(node) - before >= 3

        await wait_until(all_mined, timeout=60, what="the transfers to be mined")
        node.worker.kill()
        restarted = worker_factory(project_path=node.project, env=node.env, send_bump_after=2.0)
        await restarted.wait_ready()
        node.worker = restarted

        async def waiting():
            _, body = await restarted.get("/api/sends")
            found = [s for s in (body or {}).get("sends", []) if s["state"] == "waiting"]
            return found if len(found) == 3 else None

        found = await wait_until(waiting, timeout=60, what="every send to say what it waits for")
        for send in found:
            assert send["nonce_used"], send
            assert f"took nonce {send['nonce']}" in send["waiting_for"], send
            assert "waiting for an endpoint to show its receipt" in send["waiting_for"], send
        shown = await cli(settings, "runs", "show", found[0]["run_id"])
        assert f"{found[0]['id']} waits: its transaction" in shown, shown
        async with chromium(tmp_path / "profile") as browser:
            page = await browser.new_page()
            await sign_in(page, restarted.url, settings.api_token.get_secret_value())
            await page.goto(f"{restarted.url}/console/sends")
            reason = page.locator(f'[data-send="{found[0]["id"]}"] .waiting-for')
            await expect(reason).to_contain_text("waiting for an endpoint to show its receipt")
            # Its nonce is used: nothing to speed up or cancel, and the page offers neither.
            card = page.locator(f'[data-send="{found[0]["id"]}"]')
            await expect(card.locator("form")).to_have_count(0)
            await screenshot(page, "sends-waiting-for-a-receipt")
        for proxy in node.nodes.values():
            proxy.hide_receipts = proxy.hide_transactions = 0.0
        await assert_paid_once(settings, node, paid, before)


async def test_one_of_two_endpoints_hiding_receipts_pays_once_and_settles_from_the_other(
    settings, worker_factory, tmp_path
):
    """Issue 26's re-sign guard: the endpoint read from hides receipts for a minute; the
    other shows them, and the sends settle from it long before."""
    async with contextlib.AsyncExitStack() as stack:
        endpoints = {
            "hiding": {"hide_receipts": 60.0, "hide_transactions": 60.0, "weight": 1000},
            "honest": {},
        }
        node = await lagging_chain(stack, tmp_path, worker_factory, endpoints)
        before = await nonce_of(node)
        paid = await pay(settings, node, 3, "two")
        await assert_paid_once(settings, node, paid, before)


EVENT_PROJECT = """
networks:
  local:
    chain_id: 31337
    confirmations: 0
    max_lag_blocks: 5
    endpoints:
      - {{ name: good, url_env: URL_GOOD, weight: 100 }}
      - {{ name: down, url_env: URL_DOWN }}
      - {{ name: failing, url_env: URL_FAILING }}
      - {{ name: lagging, url_env: URL_LAGGING }}
contracts:
  Emitter:
    address: {{ local: "{emitter}" }}
    abi: {abi}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
workflows:
  on-swap:
    trigger:
      event: {{ contract: Emitter, name: Swap, network: local }}
    permissions: {{ relayers: [payout], max_value_per_tx: 1 ether }}
    steps:
      - id: balance
        query: {{ network: local, method: eth_getBalance, params: ["${{{{ trigger.args.sender }}}}", latest] }}
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          to: "${{{{ trigger.args.sender }}}}"
          value: "{value}"
"""


async def test_sends_reads_and_an_event_trigger_go_on_through_endpoints_that_fail(
    settings, worker_factory, tmp_path
):
    """Four endpoints: one down, one answering only errors, one 20 blocks behind, and a
    good one that goes down halfway. Events fire once each (the follower moves to the
    endpoint that lags and neither skips nor repeats a block), their reads answer and
    their payouts pay once, counted on chain."""
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(chain.private_anvil())
        w3 = chain.connect(url)
        stack.push_async_callback(w3.provider.disconnect)
        relayer = await chain.funded_account(w3)
        caller = await chain.funded_account(w3)
        emitter, _ = await chain.deploy(w3, "Emitter", account=caller)
        proxies = {
            "good": {},
            "down": {"down": True},
            "failing": {"failing": True},
            "lagging": {"lag_blocks": 20},
        }
        nodes = {
            name: await stack.enter_async_context(LaggingRpc(url, **faults))
            for name, faults in proxies.items()
        }
        project = tmp_path / "project.yaml"
        project.write_text(
            EVENT_PROJECT.format(emitter=emitter, abi=chain.artifact_path("Emitter"), value=VALUE)
        )
        env = {"PAYOUT_KEY": relayer.key.hex()}
        env |= {f"URL_{name.upper()}": node.url for name, node in nodes.items()}
        worker = worker_factory(project_path=project, env=env)
        await worker.wait_ready()

        async def mining() -> None:  # a chain with a block every 0.1 s
            while True:
                await chain.mine(w3)
                await asyncio.sleep(0.1)

        miner = asyncio.create_task(mining())
        stack.callback(miner.cancel)

        async def swap(sender) -> str:
            await chain.funded_account(w3)  # a block between events
            receipt = await chain.transact(w3, "Emitter", emitter, "swap", 1, 2, account=sender)
            return receipt["blockHash"]

        async def runs_of_swaps() -> list[dict]:
            conn = await storage.connect(settings)
            async with conn:
                cur = await conn.execute(
                    "SELECT run_id, trigger_key, status FROM runs WHERE workflow = 'on-swap'"
                )
                return [
                    {"run_id": r, "trigger_key": k, "status": s} for r, k, s in await cur.fetchall()
                ]

        async def settled(count: int):
            found = await runs_of_swaps()
            done = [r for r in found if r["status"] in ("succeeded", "failed")]
            return found if len(done) >= count else None

        first = await chain.funded_account(w3)
        await swap(first)
        await wait_until(lambda: settled(1), timeout=90, what="the first event's run to settle")
        nodes["good"].down = True
        second = await chain.funded_account(w3)
        await swap(second)
        found = await wait_until(
            lambda: settled(2), timeout=120, what="the second event's run to settle"
        )
        assert len(found) == 2 and len({r["trigger_key"] for r in found}) == 2, found
        for row in found:
            run = await settled_run(settings, row["run_id"])
            assert run["status"] == "succeeded", (run, worker.tail(80))
            balance, paid = run["steps"][0], run["steps"][1]
            assert balance["path"] == "balance" and balance["output"].startswith("0x")
            tx = paid["output"]["tx"]
            mined = await chain.rpc(w3, "eth_getTransactionByHash", tx["hash"])
            assert mined["to"].lower() in (first.address.lower(), second.address.lower())
            assert int(mined["value"], 16) == VALUE
        used = int(await chain.rpc(w3, "eth_getTransactionCount", relayer.address, "latest"), 16)
        assert used == 2, "one transfer per event, nothing signed twice"
        assert nodes["lagging"].calls["eth_getLogs"] > 0, "the follower read the lagging node"
        metrics = await asyncio.to_thread(scrape, worker)
        assert metrics[("rflow_rpc_breaker_state", "down", "closed")] == 0, metrics
        assert metrics[("rflow_rpc_breaker_state", "good", "closed")] == 0, metrics
        assert metrics[("rflow_rpc_breaker_state", "lagging", "closed")] == 1, metrics
        assert metrics[("rflow_rpc_calls_total", "failing", "error")] > 0, metrics


def scrape(worker) -> dict[tuple[str, str, str], float]:
    """The worker's per-endpoint metrics, as Prometheus reads them: (metric, endpoint,
    breaker state or outcome) -> value."""
    request = urllib.request.Request(worker.url + "/metrics", headers=worker.auth)
    with urllib.request.urlopen(request, timeout=10) as resp:
        text = resp.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("rflow_rpc_") and "endpoint" in sample.labels:
                detail = sample.labels.get("state") or sample.labels.get("outcome") or ""
                found[(sample.name, sample.labels["endpoint"], detail)] = sample.value
    return found
