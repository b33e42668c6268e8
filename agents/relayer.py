"""The relayer agent: the sole owner of each signer's nonces, one send at a time.

The sends topic is keyed ``network:relayer``, so one worker owns each signer. For each
send, in this order: permissions, simulation, the gas cap, then one Postgres
transaction that checks the gas breakers, reserves the value against every attached
in-scope budget, allocates the nonce and stores the signed transaction under the
send's idempotency key. Only after that COMMIT is anything broadcast. A key that
already has a row is never signed again: an open send is rebroadcast as stored, a
settled one answers with its stored result. Receipts, bumps, drops and nonce gaps are
the tracker's (:mod:`rflow.agents.receipts`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from aiokafka.partitioner import DefaultPartitioner

from rflow.agents.dead_letters import send_dead_letter
from rflow.agents.receipts import Tracker, reply_of, result_of, sign
from rflow.budgets import charges
from rflow.codecs import DecodeError, SendRequest, decode
from rflow.engine import StepResult
from rflow.failures import FailureKind, RflowError, StepError
from rflow.ingress.rpc import JsonRpc, RpcUnavailable, endpoints
from rflow.lang.model import Project
from rflow.relayer import build
from rflow.relayer.node import Broadcast, Node
from rflow.relayer.signing import Signer, signer
from rflow.storage import budgets, sends
from rflow.storage.budgets import BudgetExceeded
from rflow.storage.sends import Attempt, SendRow

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger("rflow.relayer")
FEE_CAP_MULTIPLE = 4
"""Without a step's ``max_fee_per_gas``, bumps stop at four times the first fee."""


async def _given(value: int) -> int:
    return value


class _KeyTaken(Exception):
    """Another delivery of the same send committed first."""


class Relayer:
    """Signs, stores and broadcasts sends for the relayers this worker owns."""

    def __init__(self, app: RflowApp) -> None:
        self.app = app
        self.runtime = app.rflow
        self.settings = self.runtime.settings
        self._rpcs: dict[str, JsonRpc] = {}
        self._nodes: dict[str, Node] = {}
        self._signers: dict[str, Signer] = {}
        self._synced: set[tuple[str, str]] = set()
        self.tracker = Tracker(self)

    # --- resources ----------------------------------------------------------------------

    @property
    def project(self) -> Project:
        project = self.runtime.project
        if project is None:
            raise RflowError(FailureKind.INVALID_INPUT, "this worker runs no project")
        return project

    async def node(self, network: str) -> Node:
        if network not in self._nodes:
            project = self.project
            declared = project.networks.get(network)
            if declared is None:
                raise RflowError(FailureKind.INVALID_INPUT, f"no network named {network!r}")
            try:
                url = endpoints(self.settings, project, network, self.runtime.env).http
            except LookupError as exc:
                raise RflowError(FailureKind.INVALID_INPUT, str(exc)) from None
            rpc = JsonRpc(url, timeout=15.0)
            await rpc.__aenter__()
            self._rpcs[network] = rpc
            self._nodes[network] = Node(rpc, declared.chain_id)
        return self._nodes[network]

    def signer(self, relayer: str) -> Signer:
        if relayer not in self._signers:
            self._signers[relayer] = signer(self.project, relayer, self.runtime.env)
        return self._signers[relayer]

    def confirmations(self, network: str) -> int:
        declared = self.project.networks.get(network)
        return max(declared.confirmations if declared else 1, 1)

    async def close(self) -> None:
        await self.tracker.stop()
        for rpc in self._rpcs.values():
            await rpc.__aexit__(None, None, None)

    async def db(self, work: Any, what: str) -> Any:
        return await self.runtime.database.run(work, what=what)

    # --- one send -----------------------------------------------------------------------

    async def handle(self, request: SendRequest) -> None:
        """Take one send from the topic: answer, rebroadcast, or prepare and broadcast."""
        execute = request.execute
        reply = reply_of(request)
        existing = await self.db(lambda conn: sends.find(conn, execute.key), "find send")
        if existing is not None:
            if existing.settled:
                output, error = result_of(existing)
                await self.reply(reply, output, error)
            else:
                self.tracker.watch(existing, accepted=False)
            return
        try:
            row = await self.prepare(request, reply)
        except RflowError as exc:
            log.info("send %s refused: %s", execute.key, exc)
            await self.reply(reply, None, exc.as_data())
            return
        if row.settled:  # another delivery of this send got there first
            output, error = result_of(row)
            await self.reply(reply, output, error)
            return
        await self.hand_off(row)

    async def prepare(self, request: SendRequest, reply: dict[str, Any]) -> SendRow:
        """Check, price, reserve, allocate, sign and store one send (nothing broadcast)."""
        execute = request.execute
        project = self.project
        if execute.workflow not in project.workflows:
            raise RflowError(FailureKind.INVALID_INPUT, f"no workflow named {execute.workflow!r}")
        intent = build.intent(project, execute.action)
        build.check_permissions(project, execute.workflow, intent)
        signer = self.signer(intent.relayer)
        node = await self.node(intent.network)
        # Simulation, gas estimate and fee history ask the node independent questions: at
        # once. A refusal of any is the send's answer (simulation's first).
        asked = await asyncio.gather(
            node.simulate(signer.address, intent.to, intent.value, intent.data),
            node.gas_limit(signer.address, intent.to, intent.value, intent.data)
            if intent.gas_limit is None
            else _given(intent.gas_limit),
            node.fees(cap=intent.max_fee_per_gas, tip=intent.max_priority_fee_per_gas),
            return_exceptions=True,
        )
        for answer in asked:
            if isinstance(answer, BaseException):
                raise answer
        _, gas, fees = asked
        fee_cap = intent.max_fee_per_gas or fees.max_fee_per_gas * FEE_CAP_MULTIPLE
        reservations, breakers = charges(project, execute.workflow, intent.shape)
        synced = (intent.network, signer.address) in self._synced
        chain_nonce = None if synced else await self.chain_nonce(node, signer.address)

        async def commit(conn) -> Attempt:
            async with conn.transaction():
                await budgets.check_gas(conn, breakers)
                await budgets.reserve(
                    conn,
                    send_key=execute.key,
                    run_id=execute.run_id,
                    workflow=execute.workflow,
                    charges=reservations,
                )
                nonce = await sends.next_nonce(conn, intent.network, signer.address, chain_nonce)
                if nonce is None:  # a counter that vanished: sync it with the chain
                    nonce = await sends.next_nonce(
                        conn,
                        intent.network,
                        signer.address,
                        await self.chain_nonce(node, signer.address),
                    )
                attempt = sign(signer, node, nonce, intent.to, intent.value, intent.data, gas, fees)
                stored = await sends.insert(
                    conn,
                    send_key=execute.key,
                    purpose="step",
                    run_id=execute.run_id,
                    workflow=execute.workflow,
                    reply=reply,
                    network=intent.network,
                    relayer=intent.relayer,
                    address=signer.address,
                    nonce=nonce,
                    to_address=intent.to,
                    value=intent.value,
                    data=intent.data,
                    gas_limit=gas,
                    fee_cap=fee_cap,
                    attempt=attempt,
                )
                if not stored:
                    raise _KeyTaken
            return attempt

        try:
            await self.db(commit, f"store send {execute.key}")
        except BudgetExceeded as exc:
            raise RflowError(FailureKind.BUDGET_EXCEEDED, str(exc)) from None
        except _KeyTaken:
            pass
        self._synced.add((intent.network, signer.address))
        row = await self.db(lambda conn: sends.find(conn, execute.key), "find send")
        assert row is not None
        return row

    async def chain_nonce(self, node: Node, address: str) -> int:
        try:
            return await node.nonce(address, "pending")
        except Exception as exc:  # unreachable or refused: retryable either way
            raise RflowError(FailureKind.RPC_TIMEOUT, f"eth_getTransactionCount: {exc}") from None

    async def hand_off(self, row: SendRow) -> None:
        """Broadcast a stored send; the tracker follows it from here, whatever happened."""
        node = await self.node(row.network)
        try:
            outcome = await node.broadcast(row.latest.raw)
        except RflowError as exc:
            await self.tracker.refused(row, exc.as_data())
            return
        except RpcUnavailable as exc:
            log.warning("broadcast of %s unanswered, will rebroadcast: %s", row.send_key, exc)
            self.tracker.watch(row, accepted=False)
            return
        if outcome in (Broadcast.ACCEPTED, Broadcast.KNOWN):
            # Reserved and spent both count against the cap: the next send need not wait
            # for the move (a crash before it leaves the reservation for the recovery pass).
            self.runtime.runner.effects.spawn(
                self.db(lambda conn: budgets.settle(conn, row.send_key, "spent"), "hand-off"),
                f"hand-off of {row.send_key}",
            )
            self.tracker.watch(row, accepted=True)
        elif outcome is Broadcast.NONCE_TOO_LOW:
            self.tracker.watch(row, accepted=False, nonce_low=True)
        else:
            self.tracker.watch(row, accepted=False)

    async def reply(self, reply: dict[str, Any], output: Any, error: StepError | None) -> None:
        """The send's result, back to its run as a step result."""
        event = StepResult(
            run_id=reply["run_id"],
            path=reply["path"],
            visit=reply["visit"],
            attempt=reply["attempt"],
            output=output,
            error=error,
        )
        await self.runtime.runner.effects.send_event(reply["key"], event)

    # --- ownership ------------------------------------------------------------------------

    def owned(self, assigned: frozenset[int]) -> set[tuple[str, str]]:
        """The (network, relayer) pairs whose sends land on ``assigned`` partitions."""
        project = self.runtime.project
        if project is None:
            return set()
        count = self.runtime.catalog.spec("rflow.sends").partitions
        partitions = list(range(count))
        partitioner = DefaultPartitioner()
        return {
            (network, name)
            for name, relayer in project.relayers.items()
            for network in relayer.networks
            if partitioner(f"{network}:{name}".encode(), partitions, partitions) in assigned
        }


def attach(app: RflowApp) -> Relayer:
    """Declare the relayer agent on ``app``."""
    runtime = app.rflow
    relayer = Relayer(app)

    @app.agent(runtime.topics.sends, name="rflow.relayer", concurrency=1)
    async def relay(stream):
        """Sign, store and broadcast each send, in order per relayer."""
        async for event in stream.events():
            message = event.message
            try:
                request = decode(event.value, SendRequest)
            except DecodeError as exc:
                await send_dead_letter(app, message, exc.reason)
                continue
            try:
                await relayer.handle(request)
            except Exception as exc:
                log.exception("relayer failed on %s@%s", message.partition, message.offset)
                await send_dead_letter(
                    app, message, f"the relayer failed: {type(exc).__name__}: {exc}"
                )

    async def on_rebalance_complete(sender: Any = None, **kwargs: Any) -> None:
        topic = runtime.catalog.full_name("rflow.sends")
        assigned = frozenset(
            tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topic
        )
        await relayer.tracker.own(relayer.owned(assigned))

    app.on_rebalance_complete.connect(on_rebalance_complete)

    @app.task
    async def follow_receipts() -> None:
        await relayer.tracker.run()

    return relayer
