"""The soak: a mixed load on two workers while a seeded fault driver breaks things.

Load: webhook firings (with repeated deliveries) in concurrency groups, a cron schedule
whose firings run a matrix, contract events on a private anvil, and foreach payouts of
ERC20 transfers through the relayer against a budget that cannot pay them all. Faults,
drawn from ``RFLOW_CHAOS_SEED`` (printed, so any failure can be replayed): SIGKILL and
restart of one of the two workers, a restart of Kafka (every broker), SIGKILL of one Kafka
broker and its start a few seconds later, a restart of Postgres, an RPC proxy in front of
anvil injecting timeouts, 429s, 5xx, dropped connections and slow answers, ``anvil_reorg``
of recent blocks, and anvil's mining paused.

On the three-broker cluster (``scripts/stack up --brokers 3``; CI runs the soak there too)
rflow's topics have three copies and ``min.insync.replicas=2``: a killed broker costs
leadership moves, never an acknowledged record, and the fault waits until the restarted
broker is back in every partition's in-sync replicas before the next one.

Afterwards the invariants are checked against the ground truth (the chain, the
answers the webhook gave, the schedule), not against rflow's records alone, and a
report prints faults by type, runs, sends, duplicates, losses and order: the accepted
deliveries of one concurrency group ran one at a time in the order they were accepted.

``RFLOW_CHAOS_SECONDS`` sets how long faults are injected (90 by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from eth_utils import keccak

from rflow import storage
from rflow.engine.keys import run_id
from rflow.lang import load_project
from rflow.settings import Settings
from rflow.streams import kafka
from rflow.streams.producer import Producer
from rflow.triggering import trigger_record
from tests.chaos.rpc_proxy import FaultyRpc
from tests.integration import chain
from tests.integration.harness import WorkerProcess, consumer_lag, trace, wait_until

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

ROOT = Path(__file__).resolve().parents[2]
SECONDS = float(os.environ.get("RFLOW_CHAOS_SECONDS", "90"))
AMOUNT = 1000
CONFIRMATIONS = 3
REORG_DEPTH = 2  # below the confirmations: nothing settled is ever reorged away
FAULT_KINDS = (
    "kill_worker",
    "restart_kafka",
    "kill_broker",
    "restart_postgres",
    "rpc",
    "reorg",
    "pause_mining",
)

PROJECT = """
networks:
  local: {{ chain_id: 31337, confirmations: {confirmations} }}
contracts:
  Token:
    address: {{ local: "{token}" }}
    abi: {token_abi}
  Emitter:
    address: {{ local: "{emitter}" }}
    abi: {emitter_abi}
relayers:
  payout: {{ key_env: PAYOUT_KEY, networks: [local] }}
budgets:
  payouts:
    window: 24h
    max_token_value: {{ Token: "{cap}" }}
    scope: {{ relayers: [payout], networks: [local] }}
workflows:
  hook:
    concurrency: {{ group: "${{{{ trigger.body.account }}}}" }}
    trigger:
      webhook: {{ path: /hooks/chaos, idempotency_header: X-Request-Id, idempotency_ttl: 1h }}
    steps:
      - id: note
        command: {{ name: log, args: {{ message: "${{{{ trigger.body.n }}}}" }} }}
  tick:
    trigger: {{ schedule: {{ cron: "* * * * *" }} }}
    strategy: {{ matrix: {{ region: [eu, us, ap] }}, max_parallel: 2 }}
    steps:
      - id: note
        command: {{ name: log, args: {{ message: "tick ${{{{ matrix.region }}}}" }} }}
  swap:
    concurrency: {{ group: "${{{{ trigger.args.sender }}}}" }}
    trigger:
      event: {{ contract: Emitter, name: Swap, network: local }}
    steps:
      - id: note
        command: {{ name: log, args: {{ message: swapped }} }}
  payout:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout] }}
    budgets: [payouts]
    on_failure: dead_letter
    steps:
      - id: pay
        foreach: "${{{{ trigger.recipients }}}}"
        max_parallel: 3
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "transfer(address,uint256)"
          args: ["${{{{ item }}}}", {amount}]
"""


@dataclass
class Ledger:
    """What the load generators know for certain: the ground truth on our side."""

    hooks: dict[str, str] = field(default_factory=dict)
    """Accepted webhook deliveries (a 202): request id -> trigger key."""
    hooks_at: dict[str, str] = field(default_factory=dict)
    """When and by which worker each delivery was accepted."""
    duplicate_deliveries: int = 0
    payouts: dict[str, list[str]] = field(default_factory=dict)
    """Payout firings the broker acknowledged: trigger key -> recipients."""
    swaps_sent: int = 0
    refused: Counter = field(default_factory=Counter)


@dataclass
class Chaos:
    settings: Settings
    project: Path
    w3: Any
    anvil_url: str
    proxy: FaultyRpc
    start_worker: Any
    workers: list[WorkerProcess]
    rng: random.Random
    log: Path
    brokers: int = 1
    ledger: Ledger = field(default_factory=Ledger)
    faults: Counter = field(default_factory=Counter)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    mining_paused: bool = False

    def note(self, message: str) -> None:
        line = f"{datetime.now(UTC).isoformat(timespec='milliseconds')} {message}"
        with self.log.open("a") as out:
            out.write(line + "\n")

    # --- load -------------------------------------------------------------------------

    async def webhooks(self) -> None:
        n = 0
        while not self.stopping.is_set():
            n += 1
            request_id = f"req-{n}"
            if n % 10 == 0 and self.ledger.hooks:  # a delivery repeated, as senders do
                request_id = self.rng.choice(sorted(self.ledger.hooks))
            body = {"account": f"acct-{n % 5}", "n": n}
            answer = await self.post_hook(request_id, body)
            if answer is not None:
                status, reply, where = answer
                if status in (200, 202) and request_id in self.ledger.hooks:
                    self.ledger.duplicate_deliveries += 1
                elif status == 202:
                    self.ledger.hooks[request_id] = reply["trigger_key"]
                    self.ledger.hooks_at[request_id] = f"{datetime.now(UTC):%H:%M:%S.%f} {where}"
                else:
                    self.ledger.refused[f"webhook {status}"] += 1
            await asyncio.sleep(0.25)

    async def post_hook(self, request_id: str, body: dict) -> tuple[int, dict, str] | None:
        for worker in self.rng.sample(self.workers, len(self.workers)):
            if worker.proc is None or worker.proc.poll() is not None:
                continue

            def send(url: str = worker.url) -> tuple[int, dict] | None:
                request = urllib.request.Request(
                    url + "/hooks/chaos",
                    data=json.dumps(body).encode(),
                    method="POST",
                    headers={"Content-Type": "application/json", "X-Request-Id": request_id},
                )
                try:
                    with urllib.request.urlopen(request, timeout=15) as resp:
                        return resp.status, json.loads(resp.read())
                except urllib.error.HTTPError as exc:
                    return exc.code, {}
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    return None

            answer = await asyncio.to_thread(send)
            if answer is not None:
                return (*answer, f"pid {worker.proc.pid}")
        return None

    async def swaps(self, emitter: str, sender: str) -> None:
        data = chain.calldata(self.w3, "Emitter", emitter, "swap", 1, 1)
        while not self.stopping.is_set():
            with contextlib.suppress(Exception):  # anvil busy with a reorg: next one
                await chain.rpc(
                    self.w3,
                    "eth_sendTransaction",
                    {"from": sender, "to": emitter, "data": data, "gas": hex(100_000)},
                )
                self.ledger.swaps_sent += 1
            await asyncio.sleep(0.7)

    async def payouts(self) -> None:
        workflow = load_project(self.project, {}).workflows["payout"]
        n = 0
        while not self.stopping.is_set():
            n += 1
            recipients = [chain.Account.create().address for _ in range(3)]
            record = trigger_record(
                "payout",
                workflow,
                source="manual",
                trigger_key=f"manual:payout:{n}",
                payload={"recipients": recipients},
                received_at=datetime.now(UTC),
            )
            try:
                async with asyncio.timeout(20):
                    async with Producer(self.settings) as producer:
                        await producer.trigger(record)
                self.ledger.payouts[record.trigger_key] = recipients
            except Exception as exc:  # the broker away: not accepted, fired again later
                self.ledger.refused["payout produce"] += 1
                self.note(f"payout {n} not produced: {exc!r}")
            await asyncio.sleep(2.0)

    async def blocks(self) -> None:
        """A block a second while mining runs, so confirmations come without traffic."""
        while not self.stopping.is_set():
            if not self.mining_paused:
                with contextlib.suppress(Exception):
                    await chain.mine(self.w3)
            await asyncio.sleep(1.0)

    # --- faults -----------------------------------------------------------------------

    async def drive(self, seconds: float) -> None:
        """Faults at random until ``seconds`` have passed; every kind at least once if
        there is time, and on a cluster a broker's SIGKILL first (even a short run has it)."""
        deadline = time.monotonic() + seconds
        kinds = list(FAULT_KINDS)
        self.rng.shuffle(kinds)
        if self.brokers > 1:  # popped first
            kinds.remove("kill_broker")
            kinds.append("kill_broker")
        while time.monotonic() < deadline:
            kind = kinds.pop() if kinds else self.rng.choice(FAULT_KINDS)
            self.note(f"fault {kind}: start")
            started = time.monotonic()
            await getattr(self, kind)()
            self.faults[kind] += 1
            self.note(f"fault {kind}: done in {time.monotonic() - started:.1f}s")
            await asyncio.sleep(self.rng.uniform(2.0, 6.0))

    async def kill_worker(self) -> None:
        index = self.rng.randrange(len(self.workers))
        victim = self.workers[index]
        self.note(f"SIGKILL worker {index} (pid {victim.proc.pid if victim.proc else None})")
        victim.kill()
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        fresh = self.start_worker(index)
        self.workers[index] = fresh
        await fresh.wait_ready(timeout=120)

    async def restart_kafka(self) -> None:
        await self.stack("restart", "kafka")

    async def kill_broker(self) -> None:
        """SIGKILL one Kafka broker (a crash: no controlled shutdown), start it again a few
        seconds later, and wait until it has caught up as an in-sync replica."""
        node = f"kafka-{self.rng.randint(1, self.brokers)}"
        await self.stack("kill", node)
        await asyncio.sleep(self.rng.uniform(1.0, 5.0))
        await self.stack("restart", node)
        if self.brokers > 1:
            lagging: list[str] = []

            async def in_sync() -> bool:
                lagging[:] = await under_replicated(self.settings)
                return not lagging

            started = time.monotonic()
            await wait_until(in_sync, timeout=120, what=f"{node} back in every ISR: {lagging}")
            self.note(f"{node} in sync again after {time.monotonic() - started:.1f}s")

    async def restart_postgres(self) -> None:
        await self.stack("restart", "postgres")

    async def stack(self, *args: str) -> None:
        result = await asyncio.to_thread(
            subprocess.run,
            [str(ROOT / "scripts" / "stack"), *args],
            capture_output=True,
            text=True,
            timeout=180,
        )
        self.note(f"scripts/stack {' '.join(args)}: {result.returncode} {result.stderr[-300:]}")
        assert result.returncode == 0, result.stderr

    async def rpc(self) -> None:
        self.proxy.rate = self.rng.uniform(0.2, 0.5)
        await asyncio.sleep(self.rng.uniform(3.0, 8.0))
        self.proxy.rate = 0.0

    async def reorg(self) -> None:
        depth = self.rng.randint(1, REORG_DEPTH)
        await chain.reorg(self.w3, depth)
        self.note(f"reorg of depth {depth}")

    async def pause_mining(self) -> None:
        self.mining_paused = True
        await chain.rpc(self.w3, "evm_setAutomine", False)
        await asyncio.sleep(self.rng.uniform(2.0, 6.0))
        await chain.rpc(self.w3, "evm_setAutomine", True)
        await chain.evm_mine(self.w3)
        self.mining_paused = False


async def brokers_up(settings: Settings) -> int:
    admin = kafka.admin(settings)
    await admin.start()
    try:
        return len((await admin.describe_cluster())["brokers"])
    finally:
        await admin.close()


async def under_replicated(settings: Settings) -> list[str]:
    """The partitions (``topic/partition``) whose in-sync replicas lack one of their
    replicas; an unreachable cluster counts as all of them."""
    admin = kafka.admin(settings, request_timeout_ms=5000)
    try:
        await admin.start()
        described = await admin.describe_topics(await admin.list_topics())
    except Exception as exc:  # a broker still electing: not in sync yet
        return [f"cluster unreachable: {exc!r}"]
    finally:
        await admin.close()
    return [
        f"{topic['topic']}/{part['partition']}"
        for topic in described
        for part in topic["partitions"]
        if set(part["isr"]) != set(part["replicas"])
    ]


# --- invariants ---------------------------------------------------------------------------


async def query(settings: Settings, sql: str, *params: Any) -> list[tuple]:
    conn = await storage.connect(settings)
    async with conn:
        cur = await conn.execute(sql, params)
        return list(await cur.fetchall())


async def transfers(w3, token: str, sender: str) -> list[dict[str, Any]]:
    topic = "0x" + sender.lower().removeprefix("0x").rjust(64, "0")
    transfer = "0x" + keccak(text="Transfer(address,address,uint256)").hex()
    return await chain.rpc(
        w3,
        "eth_getLogs",
        {"address": token, "fromBlock": "0x0", "toBlock": "latest", "topics": [transfer, topic]},
    )


async def swap_keys(w3, emitter: str, to_block: int | None = None) -> set[str]:
    """The trigger keys of the Swap logs on the canonical chain (up to ``to_block``)."""
    swap = "0x" + keccak(text="Swap(address,uint256,uint256)").hex()
    last = "latest" if to_block is None else hex(to_block)
    logs = await chain.rpc(
        w3,
        "eth_getLogs",
        {"address": emitter, "fromBlock": "0x0", "toBlock": last, "topics": [swap]},
    )
    return {f"event:31337:{log['blockHash']}:{int(log['logIndex'], 16)}" for log in logs}


async def where_stuck(
    settings: Settings, stuck: list[tuple], workers: list[WorkerProcess]
) -> list[str]:
    """For the report of runs that never settled: where each run id and trigger key
    appears on the topics and in the read model, its sends, and the lines of the
    workers' logs that name it."""
    keys = {str(key) for row in stuck for key in (row[0], row[3])}
    found: list[str] = []
    try:  # the report, never a failure of its own in place of the one it explains
        found += await trace(settings, keys)
        for workflow, trigger_key in {(row[1], row[3]) for row in stuck}:
            sends = await query(
                settings,
                "SELECT send_key, status, tx_hash, error FROM sends WHERE send_key LIKE %s",
                f"{workflow}:{trigger_key}:%",
            )
            found += [f"send: {row}" for row in sends]
    except Exception as exc:
        found.append(f"(tracing them failed: {exc!r})")
    for worker in workers:
        lines = worker.log_path.read_text(errors="replace").splitlines()
        named = [line for line in lines if any(key in line for key in keys)]
        found += [f"{worker.log_path.name}: {line}" for line in named[-60:]]
    return found


@pytest.mark.timeout(810 + SECONDS)
async def test_soak_under_faults_loses_nothing_and_repeats_nothing(
    settings, worker_factory, tmp_path, capsys
):
    seed = int(os.environ.get("RFLOW_CHAOS_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    with capsys.disabled():
        print(
            f"\n[chaos] seed {seed} (replay with RFLOW_CHAOS_SEED={seed}), {SECONDS:.0f}s of faults"
        )
    soak_began = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        anvil_url = await stack.enter_async_context(chain.private_anvil())
        w3 = chain.connect(anvil_url)
        stack.push_async_callback(w3.provider.disconnect)
        relayer = await chain.funded_account(w3)
        token, _ = await chain.deploy(w3, "TestToken", "Chaos", "CHS", account=relayer)
        await chain.transact(
            w3, "TestToken", token, "mint", relayer.address, 10**24, account=relayer
        )
        emitter, _ = await chain.deploy(w3, "Emitter", account=relayer)
        sender = (await chain.rpc(w3, "eth_accounts"))[0]
        await chain.mine(w3, 10)  # setup well below any reorg
        payouts_expected = int(SECONDS / 2.0) * 3
        cap = AMOUNT * max(3, payouts_expected * 7 // 10)  # a budget that cannot pay them all
        proxy = await FaultyRpc(upstream=anvil_url, seed=seed).start()
        stack.push_async_callback(proxy.stop)
        project = tmp_path / "chaos.yaml"
        project.write_text(
            PROJECT.format(
                confirmations=CONFIRMATIONS,
                token=token,
                token_abi=chain.artifact_path("TestToken"),
                emitter=emitter,
                emitter_abi=chain.artifact_path("Emitter"),
                cap=cap,
                amount=AMOUNT,
            )
        )

        def start_worker(index: int) -> WorkerProcess:
            return worker_factory(
                project_path=project,
                data_dir=tmp_path / f"data-{index}-{time.monotonic_ns()}",
                rpc_urls={"local": proxy.url},
                env={"PAYOUT_KEY": relayer.key.hex()},
            )

        workers = [start_worker(0), start_worker(1)]
        for worker in workers:
            await worker.wait_ready(timeout=120)
        chaos = Chaos(
            settings,
            project,
            w3,
            anvil_url,
            proxy,
            start_worker,
            workers,
            rng,
            tmp_path / "faults.log",
            brokers=await brokers_up(settings),
        )
        began = datetime.now(UTC)
        load = [
            asyncio.create_task(chaos.webhooks()),
            asyncio.create_task(chaos.swaps(emitter, sender)),
            asyncio.create_task(chaos.payouts()),
            asyncio.create_task(chaos.blocks()),
        ]
        try:
            await chaos.drive(SECONDS)
        finally:
            chaos.stopping.set()
            proxy.rate = 0.0
            await asyncio.gather(*load, return_exceptions=True)
            with contextlib.suppress(Exception):
                await chain.rpc(w3, "evm_setAutomine", True)
        ended = datetime.now(UTC)
        await chain.mine(w3, CONFIRMATIONS + 1)
        ledger = chaos.ledger

        # --- every run settles (none stuck), the group catches up -----------------------
        waiting: list[str] = []

        async def quiet() -> bool:
            """Every run and send settled, every confirmed Swap log fired, lag 0."""
            await chain.mine(w3)
            head = int(await chain.rpc(w3, "eth_blockNumber"), 16)
            confirmed = await swap_keys(w3, emitter, head - CONFIRMATIONS + 1)
            fired = {k for (k,) in await query(settings, "SELECT trigger_key FROM runs")}
            [(unsettled,)] = await query(
                settings, "SELECT count(*) FROM runs WHERE settled_at IS NULL"
            )
            [(open_sends,)] = await query(
                settings, "SELECT count(*) FROM sends WHERE settled_at IS NULL"
            )
            lag = await consumer_lag(settings)
            waiting[:] = [
                f"{unsettled} runs unsettled",
                f"{open_sends} sends open",
                f"Swap logs not fired: {sorted(confirmed - fired)}",
                f"lag {lag}",
            ]
            return not unsettled and not open_sends and confirmed <= fired and lag == 0

        try:
            await wait_until(quiet, timeout=300, what="every run and send to settle, lag 0")
        except AssertionError:
            stuck = await query(
                settings,
                "SELECT run_id, workflow, status, trigger_key FROM runs WHERE settled_at IS NULL",
            )
            raise AssertionError(
                f"seed {seed}: not quiet ({'; '.join(waiting)}); unsettled runs {stuck[:10]}\n"
                f"{chaos.log.read_text()}\n"
                + "\n".join(await where_stuck(settings, stuck[:5], workers))
                + "\n"
                + "\n".join(w.tail(40) for w in workers)
            ) from None

        runs = await query(
            settings, "SELECT workflow, trigger_key, matrix->>'region', status FROM runs"
        )
        by_key: dict[tuple[str, str], list[str]] = defaultdict(list)
        regions: dict[str, list[str]] = defaultdict(list)
        for workflow, key, region, status in runs:
            if region is None:
                by_key[(workflow, key)].append(status)
            else:  # a matrix run: one per combination of its firing
                regions[key].append(region)
        duplicates = {k: v for k, v in by_key.items() if len(v) > 1}
        losses: list[str] = []

        # Webhooks: every accepted delivery is exactly one run; repeats added none.
        for request_id, key in ledger.hooks.items():
            if ("hook", key) not in by_key:
                losses.append(
                    f"webhook {request_id} ({key}, accepted {ledger.hooks_at[request_id]})"
                )
        # Order: the accepted deliveries of one group (request n was sent only after n-1
        # was accepted, so the broker has them in n's order) ran one at a time, in that
        # order: each run's step started after the run before it in its group settled.
        steps = {
            rid: (started, settled)
            for rid, started, settled in await query(
                settings,
                "SELECT r.run_id, s.started_at, r.settled_at FROM runs r"
                " JOIN step_logs s ON s.run_id = r.run_id AND s.path = 'note' AND s.visit = 1"
                " WHERE r.workflow = 'hook'",
            )
        }
        groups: dict[int, list[tuple[int, str]]] = defaultdict(list)
        for request_id, key in ledger.hooks.items():
            n = int(request_id.removeprefix("req-"))
            groups[n % 5].append((n, run_id("hook", key)))
        out_of_order: list[str] = []
        ordered_pairs = 0
        for group, accepted in sorted(groups.items()):
            accepted.sort()
            for (n1, first), (n2, then) in itertools.pairwise(accepted):
                if first not in steps or then not in steps:
                    continue  # a loss, reported as one
                ordered_pairs += 1
                if not (steps[first][1] <= steps[then][0]):
                    out_of_order.append(
                        f"acct-{group}: req-{n2} started {steps[then][0]} before req-{n1}"
                        f" (started {steps[first][0]}) settled {steps[first][1]}"
                    )

        # A delivery answered 503 may still have reached the broker (its acknowledgement
        # was what got lost): a run without a 202 is allowed, never two for one key.
        unacknowledged = {k for w, k in by_key if w == "hook"} - set(ledger.hooks.values())

        # Contract events: every log on the canonical chain is exactly one run, and a
        # log reorged away (before its confirmations) started none.
        canonical = await swap_keys(w3, emitter)
        for key in canonical:
            if ("swap", key) not in by_key:
                losses.append(f"swap {key}")
        stray = [k for k in by_key if k[0] == "swap" and k[1] not in canonical]
        assert not stray, (seed, "runs of logs not on the chain", stray)

        # The schedule: every minute boundary while the workers ran fired once, and each
        # firing ran once per combination of its matrix.
        minute = (began + timedelta(minutes=1)).replace(second=0, microsecond=0)
        while minute <= ended - timedelta(seconds=5):
            key = "schedule:" + minute.strftime("%Y-%m-%dT%H:%M:%SZ")
            missing = {"eu", "us", "ap"} - set(regions.get(key, []))
            losses += [f"tick {key} region {region}" for region in sorted(missing)]
            minute += timedelta(minutes=1)
        for key, seen in regions.items():
            if len(seen) != len(set(seen)):
                duplicates[("tick", key)] = seen

        # Payouts: every acknowledged firing is one run; every send is on chain exactly
        # once or failed with a recorded kind; no recipient was paid twice.
        for key in ledger.payouts:
            if ("payout", key) not in by_key:
                losses.append(f"payout {key}")
        sends = await query(
            settings,
            "SELECT send_key, status, tx_hash, error->>'kind' FROM sends WHERE purpose = 'step'",
        )
        on_chain = await transfers(w3, token, relayer.address)
        paid = Counter("0x" + log["topics"][2][-40:] for log in on_chain)
        paid_twice = {address: n for address, n in paid.items() if n > 1}
        succeeded = {tx for _, status, tx, _ in sends if status == "succeeded"}
        mined = {log["transactionHash"] for log in on_chain}
        assert mined == succeeded, (seed, "transfers on chain and succeeded sends differ")
        unexplained = [
            (k, s) for k, s, _, kind in sends if s != "succeeded" and not (kind or s == "reverted")
        ]
        assert not unexplained, (seed, "failed sends without a kind", unexplained)

        # The budget: never over its cap, on chain or in the ledger.
        paid_total = sum(int(log["data"], 16) for log in on_chain)
        assert paid_total <= cap, (seed, paid_total, cap)
        [(consumed,)] = await query(
            settings,
            "SELECT coalesce(sum(amount), 0) FROM budget_reservations WHERE status <> 'released'",
        )
        assert int(consumed) <= cap, (seed, consumed, cap)
        assert int(consumed) == paid_total, (seed, "the ledger and the chain disagree")

        # Dead-lettered runs keep their journal.
        dead = await query(settings, "SELECT run_id, journal IS NOT NULL FROM dead_runs")
        assert all(has for _, has in dead), (seed, "dead-lettered runs without a journal")

        statuses = Counter(status for *_, status in runs)
        report = [
            f"seed {seed}, {SECONDS:.0f}s of faults",
            "faults: " + ", ".join(f"{k} {v}" for k, v in sorted(chaos.faults.items())),
            "rpc proxy: "
            + ", ".join(f"{k} {v}" for k, v in sorted(proxy.injected.items()))
            + f", forwarded {proxy.forwarded}",
            "runs: "
            + ", ".join(f"{w} {n}" for w, n in sorted(Counter(w for w, *_ in runs).items()))
            + " | "
            + ", ".join(f"{s} {n}" for s, n in sorted(statuses.items())),
            f"webhook deliveries accepted {len(ledger.hooks)}, repeated {ledger.duplicate_deliveries},"
            f" run without a 202 {len(unacknowledged)},"
            f" refused {dict(ledger.refused)}",
            "sends: "
            + ", ".join(f"{s} {n}" for s, n in sorted(Counter(s for _, s, _, _ in sends).items()))
            + f"; transfers on chain {len(on_chain)}, paid {paid_total} of cap {cap}",
            f"dead-lettered runs {len(dead)}",
            f"duplicates {len(duplicates) + len(paid_twice)}, losses {len(losses)},"
            f" out of order {len(out_of_order)} of {ordered_pairs} consecutive pairs",
            f"kafka brokers {chaos.brokers}, took {time.monotonic() - soak_began:.0f}s",
        ]
        (tmp_path / "report.txt").write_text("\n".join(report) + "\n")
        with capsys.disabled():
            print("\n[chaos] " + "\n[chaos] ".join(report))
        assert not duplicates and not paid_twice, (seed, duplicates, paid_twice)
        assert not out_of_order, (seed, "runs of a group out of order", out_of_order[:10])
        if losses:
            lost = {key for key in ledger.hooks.values() if ("hook", key) not in by_key}
            lost |= {run_id("hook", key) for key in set(lost)}
            where = await trace(settings, lost) if lost else []
            raise AssertionError(f"seed {seed}: losses {losses}\n" + "\n".join(where))
