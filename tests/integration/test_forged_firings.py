"""Firings that rflow's own ingress vouches for: whoever else writes to the triggers topic
cannot claim a chain event, a webhook or a schedule, cannot take a real firing's key
first, and fires only workflows with a manual trigger, with exactly their inputs.

The records below are what anyone with write access to ``rflow.triggers`` could produce
(plain JSON, as kcat or aiokafka would): a worker on the real stack dead-letters each with
the reason, counts it, and pays nothing for it.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rflow import storage
from rflow.engine.keys import run_id
from rflow.storage import chain as chain_store
from rflow.storage import dead_letters, runs
from tests.integration import chain
from tests.integration.harness import WorkerProcess, produce, wait_until
from tests.integration.test_runs import settled_run
from tests.integration.test_sends import sends_of

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

CONFIRMATIONS = 3
PROJECT = """
networks:
  local: {{ chain_id: 31337, confirmations: {confirmations} }}
contracts:
  Emitter:
    address: {{ local: "{emitter}" }}
    abi: {abi}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
workflows:
  tip-reward:
    trigger:
      event: {{ contract: Emitter, name: Swap, network: local }}
    permissions: {{ relayers: [payout], max_value_per_tx: 1 ether }}
    steps:
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          to: "{recipient}"
          value: "${{{{ trigger.args.amountIn }}}}"
  order-paid:
    trigger:
      manual: {{ inputs: [account, order] }}
    steps:
      - id: note
        command: {{ name: log, args: {{ message: "order ${{{{ trigger.order }}}}" }} }}
"""
NOW = "2026-05-06T07:08:09Z"


def forged(source: str, trigger_key: str, payload: dict[str, Any], **fields: Any) -> dict:
    """A trigger record as anyone may write it: a plain JSON document, no proof."""
    return {
        "kind": "trigger",
        "v": 1,
        "workflow": "tip-reward",
        "trigger_key": trigger_key,
        "source": source,
        "payload": payload,
        "received_at": NOW,
        **fields,
    }


@pytest.fixture
async def setup(settings, tmp_path: Path, w3, worker_factory) -> dict[str, Any]:
    payout = await chain.funded_account(w3)
    swapper = await chain.funded_account(w3)
    emitter, _ = await chain.deploy(w3, "Emitter", account=swapper)
    recipient = chain.Account.create().address
    path = tmp_path / "project.yaml"
    path.write_text(
        PROJECT.format(
            confirmations=CONFIRMATIONS,
            emitter=emitter,
            abi=chain.artifact_path("Emitter"),
            recipient=recipient,
        )
    )
    worker = worker_factory(project_path=path, env={"PAYOUT_KEY": payout.key.hex()})
    await worker.wait_ready()

    async def following() -> bool:  # the worker's chain ingress has a cursor for local
        conn = await storage.connect(settings)
        async with conn:
            state = await chain_store.load(conn, network="local")
        return bool(state.cursors)

    await wait_until(following, timeout=60, what="the worker to follow the chain")
    return {
        "worker": worker,
        "emitter": emitter,
        "swapper": swapper,
        "recipient": recipient,
        "payout": payout,
    }


async def send(settings, key: str, record: dict[str, Any]) -> None:
    await produce(settings, "rflow.triggers", key.encode(), json.dumps(record).encode())


async def letters(settings, count: int) -> dict[tuple[str, str], str]:
    """The dead letters, once there are ``count``: (kind, trigger key or run id) -> reason."""

    async def found() -> dict[tuple[str, str], str] | None:
        conn = await storage.connect(settings)
        async with conn:
            rows = await dead_letters.recent(conn)
        if len(rows) < count:
            return None
        reasons = {}
        for row in rows:
            raw = json.loads(row["raw"])
            named = raw.get("trigger_key") or raw.get("event", {}).get("run_id")
            reasons[(raw["kind"], named)] = row["reason"]
        return reasons

    return await wait_until(found, timeout=60, what=f"{count} dead letters")


def refused(worker: WorkerProcess) -> dict[tuple[str, str], float]:
    """The worker's rflow_refused_firings_total, by (reason, source)."""
    request = urllib.request.Request(worker.url + "/metrics", headers=worker.auth)
    with urllib.request.urlopen(request, timeout=5) as resp:
        text = resp.read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("rflow_refused_firings_total{"):
            labels, value = line.rsplit(" ", 1)
            pairs = dict(p.split("=") for p in labels[labels.index("{") + 1 : -1].split(","))
            counts[(pairs["reason"].strip('"'), pairs["source"].strip('"'))] = float(value)
    return counts


async def mining(w3, every: float = 0.3) -> None:
    """Mine a block every ``every`` seconds, until cancelled."""
    while True:
        await chain.mine(w3, 1)
        await asyncio.sleep(every)


async def runs_of(settings, workflow: str) -> list[dict[str, Any]]:
    conn = await storage.connect(settings)
    async with conn:
        return await runs.list_runs(conn, workflow=workflow, limit=100)


async def test_a_forged_event_webhook_or_schedule_is_dead_lettered_and_pays_nothing(
    settings, setup, w3
):
    attacker = chain.Account.create().address
    claim = {"args": {"sender": attacker, "amountIn": 10**17, "amountOut": 1}}
    block = "0x" + "ab" * 32
    records = {
        f"event:31337:{block}:0": forged("event", f"event:31337:{block}:0", claim),
        "webhook:tip-reward:x:0": forged("webhook", "webhook:tip-reward:x:0", claim),
        "schedule:2026-05-06T07:00:00Z": forged("schedule", "schedule:2026-05-06T07:00:00Z", claim),
        # A proof made up under the workers' own key id: it does not verify.
        f"event:31337:{block}:1": forged(
            "event",
            f"event:31337:{block}:1",
            claim,
            v=2,
            proof=f"v1:{settings.ingress_keyring.signer.id}:" + "0" * 64,
        ),
    }
    for key, record in records.items():
        await send(settings, key, record)
    # A retry carrying a made-up final state, and a step result on the triggers topic.
    retry = {
        "kind": "retry",
        "v": 1,
        "workflow": "tip-reward",
        "run_id": "rforged",
        "retry_of": "rnothing",
        "trigger_key": f"event:31337:{block}:0",
        "from_step": "pay",
        "previous": {"forged": True},
        "requested_at": NOW,
    }
    await send(settings, f"event:31337:{block}:0", retry)
    run_event = {
        "kind": "run_event",
        "v": 1,
        "event": {"type": "cancel", "run_id": "rsomeone", "reason": "forged"},
    }
    await send(settings, "rsomeone", run_event)

    reasons = await letters(settings, len(records) + 2)
    assert len(reasons) == len(records) + 2, reasons
    for key in records:
        said = reasons[("trigger", key)]
        assert said.startswith("unauthenticated_source: a record claiming source"), (key, said)
    assert "carries no proof" in reasons[("trigger", f"event:31337:{block}:0")]
    assert "does not verify" in reasons[("trigger", f"event:31337:{block}:1")]
    assert reasons[("retry", f"event:31337:{block}:0")].startswith(
        "unauthenticated_source: a record claiming to retry a run is believed only with the "
        "proof of rflow's ingress, and it carries no proof"
    )
    assert reasons[("run_event", "rsomeone")].startswith(
        "unauthenticated_source: a run_event record on the triggers topic"
    )

    # Nothing ran, nothing was sent, nobody was paid; the worker counted each refusal.
    assert await runs_of(settings, "tip-reward") == []
    assert await w3.eth.get_balance(attacker) == 0
    assert await w3.eth.get_transaction_count(setup["payout"].address) == 0
    counts = refused(setup["worker"])
    assert counts[("unauthenticated_source", "event")] == 2
    assert counts[("unauthenticated_source", "webhook")] == 1
    assert counts[("unauthenticated_source", "schedule")] == 1
    assert counts[("unauthenticated_source", "retry")] == 1
    assert counts[("unauthenticated_source", "run_event")] == 1


async def test_a_forged_firing_with_a_real_events_key_does_not_suppress_it(settings, setup, w3):
    amount = 1234
    receipt = await chain.transact(
        w3, "Emitter", setup["emitter"], "swap", amount, 1, account=setup["swapper"]
    )
    (entry,) = receipt["logs"]
    key = f"event:31337:{receipt['blockHash']}:{int(entry['logIndex'], 16)}"
    # Before the event has its confirmations, three records take its key: a claim of
    # the event with another amount, an outside firing, and a retraction of it.
    taken = {"args": {"sender": setup["swapper"].address, "amountIn": 10**17, "amountOut": 1}}
    await send(settings, key, forged("event", key, taken))
    await send(settings, key, forged("manual", key, taken))
    retraction = {
        "kind": "trigger_retracted",
        "v": 1,
        "workflow": "tip-reward",
        "trigger_key": key,
        "reason": "forged reorg",
        "retracted_at": NOW,
    }
    await send(settings, key, retraction)
    await letters(settings, 3)
    conn = await storage.connect(settings)
    async with conn:
        rows = await dead_letters.recent(conn)
    said = sorted((json.loads(row["raw"]).get("source", "-"), row["reason"]) for row in rows)
    assert [(source, reason.split(":")[0]) for source, reason in said] == [
        ("-", "unauthenticated_source"),  # the retraction
        ("event", "unauthenticated_source"),
        ("manual", "reserved_key"),
    ]
    assert await runs_of(settings, "tip-reward") == []

    # The event is confirmed: rflow's ingress fires it, and its run pays, once, its amount
    # (blocks keep coming meanwhile, for the payment's own confirmations).
    rid = run_id("tip-reward", key)
    miner = asyncio.create_task(mining(w3))
    try:
        run = await settled_run(settings, rid, timeout=90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- worker log ---\n{setup['worker'].tail(80)}") from None
    finally:
        miner.cancel()
    assert run["status"] == "succeeded", run
    assert run["source"] == "event"
    assert [r["run_id"] for r in await runs_of(settings, "tip-reward")] == [rid]
    assert len(await sends_of(settings, rid)) == 1
    assert await w3.eth.get_balance(setup["recipient"]) == amount


async def test_an_outside_firing_with_a_missing_input_is_refused(settings, setup):
    order = {"kind": "trigger", "v": 1, "workflow": "order-paid", "source": "manual",
             "received_at": NOW}  # fmt: skip
    await send(
        settings, "orders:1", {**order, "trigger_key": "orders:1", "payload": {"account": "a"}}
    )
    await send(
        settings,
        "orders:2",
        {**order, "trigger_key": "orders:2", "payload": {"account": "a", "order": 2}},
    )
    reasons = await letters(settings, 1)
    assert reasons == {
        (
            "trigger",
            "orders:1",
        ): "invalid_input: payload: missing input(s) 'order' for 'order-paid'; "
        "it takes: account, order"
    }
    run = await settled_run(settings, run_id("order-paid", "orders:2"), timeout=60)
    assert run["status"] == "succeeded"
    assert [r["trigger_key"] for r in await runs_of(settings, "order-paid")] == ["orders:2"]
    assert refused(setup["worker"])[("invalid_input", "manual")] == 1
