"""The relayer agent: the sole owner of each signer's nonces, one send at a time.

The sends topic is keyed ``network:relayer``, so one worker owns each signer. For each
send, in this order: permissions, simulation, the gas cap, then one Postgres
transaction that checks the gas breakers, reserves the value against every attached
in-scope budget, allocates the nonce and stores the signed transaction under the
send's idempotency key. Only after that COMMIT is anything broadcast. A key that
already has a row is never signed again: an open send is rebroadcast as stored, a
settled one answers with its stored result. Receipts, bumps, drops, nonce gaps and the
deadlines of step timeouts are the tracker's (:mod:`rflow.agents.receipts`); operators'
speed-ups and cancels, which travel on the same topic, are :mod:`rflow.agents.controls`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rflow.agents.controls import Controls
from rflow.agents.dead_letters import send_dead_letter
from rflow.agents.effects import partition_of
from rflow.agents.receipts import DEFER_CHECK, Tracker, reply_of, result_of, sign
from rflow.budgets import Charge, GasBreaker, charges, check_decodable
from rflow.codecs import DecodeError, SendControl, SendRequest, decode, encode
from rflow.engine import StepResult
from rflow.failures import FailureKind, RflowError, StepError
from rflow.ingress.rpc import RpcUnavailable
from rflow.lang.model import Project
from rflow.lang.model import Relayer as RelayerSpec
from rflow.relayer import build
from rflow.relayer.fees import Fees, suggest
from rflow.relayer.node import Broadcast, Node, Probe
from rflow.relayer.signing import Signer, open_signer
from rflow.secrets import Secrets
from rflow.storage import Unavailable, budgets, sends
from rflow.storage.sends import SendRow

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger("rflow.relayer")
BATCH = 100
"""Sends taken from the topic at once at most (what has arrived): checked together,
stored in one COMMIT and broadcast in one request per network."""
FEE_CAP_MULTIPLE = 4
"""Without a step's ``max_fee_per_gas``, bumps stop at four times the first fee."""


@dataclass(frozen=True, slots=True)
class _Ready:
    """A send that passed its checks, priced: what the commit stores and signs."""

    request: SendRequest
    reply: dict[str, Any]
    intent: build.Intent
    signer: Signer
    node: Node
    gas: int
    fees: Fees
    fee_cap: int
    reservations: Sequence[Charge]
    breakers: Sequence[GasBreaker]

    @property
    def key(self) -> str:
        return self.request.execute.key

    @property
    def signer_on(self) -> tuple[str, str]:
        return (self.intent.network, self.signer.address)

    async def new_send(self, nonce: int) -> sends.NewSend:
        """This send signed with ``nonce``, as stored."""
        intent, execute = self.intent, self.request.execute
        attempt = await sign(
            self.signer, self.node, nonce, intent.to, intent.value, intent.data, self.gas, self.fees
        )
        return sends.NewSend(
            send_key=execute.key,
            purpose="step",
            run_id=execute.run_id,
            workflow=execute.workflow,
            reply=self.reply,
            network=intent.network,
            relayer=intent.relayer,
            address=self.signer.address,
            nonce=nonce,
            to_address=intent.to,
            value=intent.value,
            data=intent.data,
            gas_limit=self.gas,
            fee_cap=self.fee_cap,
            attempt=attempt,
            deadline=execute.deadline,
        )


class _KeyTaken(Exception):
    """Another delivery of the same send committed first."""


class _OverCap(Exception):
    """The send's fees would pass its step's ``max_fee_per_gas``: it waits, unsigned."""

    def __init__(self, intent: build.Intent, error: RflowError) -> None:
        super().__init__(error.message)
        self.intent = intent
        self.error = error


class _OneByOne(Exception):
    """The batch cannot be stored together: roll back, store one send at a time."""


class Relayer:
    """Signs, stores and broadcasts sends for the relayers this worker owns."""

    def __init__(self, app: RflowApp) -> None:
        self.app = app
        self.runtime = app.rflow
        self.settings = self.runtime.settings
        self._nodes: dict[str, tuple[Any, Node]] = {}
        self._signers: dict[str, tuple[RelayerSpec, asyncio.Future[Signer]]] = {}
        self._synced: set[tuple[str, str]] = set()
        self.tracker = Tracker(self)
        self.assigned: frozenset[int] = frozenset()
        """The sends partitions this worker holds (since the last rebalance)."""
        self.controls = Controls(self, self.tracker)

    # --- resources ----------------------------------------------------------------------

    @property
    def project(self) -> Project:
        project = self.runtime.project
        if project is None:
            raise RflowError(FailureKind.INVALID_INPUT, "this worker runs no project")
        return project

    async def node(self, network: str) -> Node:
        """The endpoints of ``network`` as the current deployment declares them. A network
        a deploy no longer declares stays known for following the sends made on it."""
        try:
            pool = await self.runtime.rpc.get(network)
        except LookupError as exc:
            raise RflowError(FailureKind.INVALID_INPUT, str(exc)) from None
        cached = self._nodes.get(network)
        if cached is not None and cached[0] is pool:
            return cached[1]
        declared = self.project.networks.get(network)
        chain_id = declared.chain_id if declared is not None else cached[1].chain_id  # type: ignore[index]
        node = Node(pool, chain_id)
        self._nodes[network] = (pool, node)
        return node

    async def signer(self, relayer: str) -> Signer:
        """The signer of ``relayer`` as the current deployment declares it, opened once (a
        token logged in to, a KMS key's public key fetched) and shared by every caller.
        One a deploy removed stays known for its open sends (bumps, fills); new sends are
        refused by the permissions check before a signer is asked for. A signer whose HSM
        or KMS did not answer is opened again by the next caller; one refused (a wrong
        PIN, a key that signs for another address) stays refused until a deploy changes
        its declaration."""
        declared = self.project.relayers.get(relayer)
        cached = self._signers.get(relayer)
        if cached is not None and (declared is None or cached[0] == declared):
            return await asyncio.shield(cached[1])
        if declared is None:
            raise RflowError(FailureKind.PERMISSION_DENIED, f"no relayer named {relayer!r}")
        opening = asyncio.ensure_future(open_signer(self.project, relayer, self.runtime.env))
        self._signers[relayer] = (declared, opening)
        if cached is not None:
            self.runtime.runner.effects.spawn(_closed(cached[1]), f"old signer of {relayer}")
        try:
            return await asyncio.shield(opening)
        except Exception as exc:
            refused = isinstance(exc, RflowError) and exc.kind is FailureKind.PERMISSION_DENIED
            current = self._signers.get(relayer)
            if not refused and current is not None and current[1] is opening:
                del self._signers[relayer]  # not answered: the next caller tries again
            raise

    def secrets(self, reply: Mapping[str, Any] | None) -> Secrets:
        """What scrubs the results of a send (its step result, its errors, log lines about
        it): the values of the variables its step filled in, named in its ``reply``, and
        the networks' RPC URLs (which may carry an API key)."""
        project = self.runtime.project
        rpc = [
            variable
            for name, spec in (project.networks.items() if project else ())
            for _, variable in spec.rpc_env_names(name)
        ]
        return Secrets(self.runtime.env).hide(*((reply or {}).get("secrets") or ()), *rpc)

    def confirmations(self, network: str) -> int:
        declared = self.project.networks.get(network)
        return max(declared.confirmations if declared else 1, 1)

    async def close(self) -> None:
        await self.tracker.stop()
        for _, opening in self._signers.values():
            await _closed(opening)

    async def db(self, work: Any, what: str) -> Any:
        return await self.runtime.database.run(work, what=what)

    # --- sends, a batch at a time ---------------------------------------------------------

    async def handle_many(
        self, requests: Sequence[SendRequest]
    ) -> list[tuple[SendRequest, BaseException]]:
        """Take a batch of sends from the topic, in their order: answer the settled ones,
        rebroadcast the open ones, and check, price, store (one COMMIT for the batch) and
        broadcast (one request per network) the new ones. Returns the sends that failed
        unexpectedly, each with its exception; every other send has its answer or is
        followed by the tracker."""
        if not requests:  # a batch of operators' requests only, or of dead letters
            return []
        firsts: dict[str, SendRequest] = {}
        for request in requests:  # a key twice in one batch: the first delivery answers
            firsts.setdefault(request.execute.key, request)
        attempts = [(key, request.execute.attempt) for key, request in firsts.items()]

        async def find(conn: Any) -> tuple[dict[str, SendRow], dict[tuple[str, int], Any]]:
            return await sends.find_many(conn, list(firsts)), await sends.refusals(conn, attempts)

        existing, kept = await self.db(find, "find sends")
        replies: list[tuple[dict[str, Any], Any, StepError | None]] = []
        fresh: list[SendRequest] = []
        for key, request in firsts.items():
            row = existing.get(key)
            refusal = kept.get((key, request.execute.attempt))
            if row is not None and row.settled:
                replies.append((reply_of(request), *result_of(row)))
            elif row is not None:
                self.tracker.watch(row, accepted=False)
            elif refusal is not None:
                # Refused before: the same answer, never a second look (the budget may
                # have room now, the balance suffice, the run have moved on).
                replies.append((reply_of(request), None, StepError.model_validate(refusal)))
            else:
                fresh.append(request)
        failed: list[tuple[SendRequest, BaseException]] = []
        refused: list[tuple[str, dict[str, Any], RflowError]] = []
        ready: list[_Ready] = []
        deferred: list[sends.Deferral] = []
        checked = await self.check_many(fresh)
        for request, outcome in zip(fresh, checked, strict=True):
            if isinstance(outcome, _Ready):
                ready.append(outcome)
            elif isinstance(outcome, _OverCap):
                deferred.append(self._deferral(request, outcome))
            elif isinstance(outcome, RflowError):
                refused.append((request.execute.key, reply_of(request), outcome))
            else:
                failed.append((request, outcome))
        stored = await self.store(ready)
        out: list[SendRow] = []
        for item in ready:
            result = stored[item.key]
            if isinstance(result, RflowError):
                refused.append((item.key, item.reply, result))
            elif result.settled:  # another delivery of this send got there first
                replies.append((item.reply, *result_of(result)))
            else:
                out.append(result)
        replies += await self.refuse(refused)
        await self.keep_deferrals(deferred, fresh)
        await self.hand_off(out)
        await self.reply_many(replies)
        return failed

    def _deferral(self, request: SendRequest, over: _OverCap) -> sends.Deferral:
        execute = request.execute
        cap = over.intent.max_fee_per_gas or 0
        return sends.Deferral(
            send_key=execute.key,
            attempt=execute.attempt,
            run_id=execute.run_id,
            workflow=execute.workflow,
            path=execute.path,
            network=over.intent.network,
            relayer=over.intent.relayer,
            fee_cap=cap,
            reason=(
                f"not signed yet, no nonce taken: {over.error.message}; it is signed once the "
                f"base fee allows (checked every {DEFER_CHECK:.0f}s)"
            ),
            request=encode(request),
            deadline=execute.deadline,
        )

    async def keep_deferrals(
        self, deferred: Sequence[sends.Deferral], fresh: Sequence[SendRequest]
    ) -> None:
        """Keep the sends that wait for the base fee, and forget the deferrals of those
        that were stored or refused this time (the tracker knows which exist)."""
        waiting = {(d.send_key, d.attempt) for d in deferred}
        done = [
            (r.execute.key, r.execute.attempt)
            for r in fresh
            if (r.execute.key, r.execute.attempt) in self.tracker.deferred
            and (r.execute.key, r.execute.attempt) not in waiting
        ]
        if not deferred and not done:
            return

        async def work(conn: Any) -> None:
            async with conn.transaction():
                await sends.defer_many(conn, deferred)
                await sends.undefer_many(conn, done)

        await self.db(work, "send deferrals")
        for deferral in deferred:
            if (deferral.send_key, deferral.attempt) not in self.tracker.deferred:
                log.info("send %s waits: %s", deferral.send_key, deferral.reason)
        self.tracker.deferred.update(waiting)
        self.tracker.deferred.difference_update(done)

    async def refuse(
        self, refused: Sequence[tuple[str, dict[str, Any], RflowError]]
    ) -> list[tuple[dict[str, Any], Any, StepError | None]]:
        """Keep the answer of each refused send attempt (``(send key, reply, error)``),
        then return the replies: once a run has had the answer, a delivery of the same
        attempt again gets it too."""
        answers, kept = [], []
        for key, reply, error in refused:
            data = self.secrets(reply).scrub_error(error.as_data())
            log.info("send %s refused: %s", key, data.message)
            answers.append((reply, None, data))
            kept.append((key, reply["attempt"], data.model_dump(mode="json")))
        if kept:
            await self.db(lambda conn: sends.refuse_many(conn, kept), "keep refusals")
        return answers

    async def check_many(self, requests: Sequence[SendRequest]) -> list[_Ready | Exception]:
        """Permissions, simulation, gas and fees for each send (nothing stored or sent):
        its :class:`_Ready`, or the exception it fails with. The node is asked once per
        network for the whole batch (:meth:`Node.vet_many`); a send's answer is the first
        refusal of its permissions, simulation, gas estimate and fees, in that order."""
        outcomes: list[_Ready | Exception | None] = [None] * len(requests)
        by_network: dict[str, list[tuple[int, build.Intent, Signer]]] = defaultdict(list)
        project = self.runtime.project
        if any(project is None or r.execute.workflow not in project.workflows for r in requests):
            # Another worker may have taken up a deployment that declares it first.
            await self.runtime.catch_up()
        for index, request in enumerate(requests):
            try:
                intent, signer = await self._plan(request)
            except Exception as exc:
                outcomes[index] = exc
                continue
            by_network[intent.network].append((index, intent, signer))
        for network, planned in by_network.items():
            try:
                node = await self.node(network)
            except Exception as exc:
                for index, _, _ in planned:
                    outcomes[index] = exc
                continue
            probes = [
                Probe(signer.address, intent.to, intent.value, intent.data, intent.gas_limit)
                for _, intent, signer in planned
            ]
            limits, history = await node.vet_many(probes)
            for (index, intent, signer), gas in zip(planned, limits, strict=True):
                if isinstance(gas, Exception):
                    outcomes[index] = gas
                elif isinstance(history, Exception):
                    outcomes[index] = history
                else:
                    try:
                        outcomes[index] = self._ready(
                            requests[index], intent, signer, node, gas, history
                        )
                    except Exception as exc:  # e.g. fees over the step's max_fee_per_gas
                        outcomes[index] = exc
        # Every send has its outcome by now: a refusal, an exception or its _Ready.
        return [outcome for outcome in outcomes if outcome is not None]

    async def _plan(self, request: SendRequest) -> tuple[build.Intent, Signer]:
        """What ``request`` sends and who signs it, once its permissions are checked."""
        execute = request.execute
        behind = self.runtime.checks_behind()
        if behind is not None:
            raise RflowError(FailureKind.PERMISSION_DENIED, behind)
        deadline = execute.deadline
        if deadline is not None and datetime.now(UTC) >= deadline:
            raise RflowError(
                FailureKind.TIMEOUT,
                f"the step's timeout ran out at {deadline:%Y-%m-%d %H:%M:%S} UTC before the "
                "relayer took the send: nothing was signed",
            )
        project = self.project
        if execute.workflow not in project.workflows:
            # Its permissions, budgets and breakers went with it: nothing allows the send.
            raise RflowError(
                FailureKind.PERMISSION_DENIED,
                f"workflow {execute.workflow!r} is not in {self.runtime.deployment.label}, "
                "which this worker runs: its sends are refused",
            )
        # Filled in here, in memory: permissions and budgets see the values it sends.
        action = Secrets(self.runtime.env).resolve(execute.action)
        intent = build.intent(project, action)
        build.check_permissions(project, execute.workflow, intent)
        check_decodable(project, execute.workflow, intent.shape)
        return intent, await self.signer(intent.relayer)

    def _ready(
        self,
        request: SendRequest,
        intent: build.Intent,
        signer: Signer,
        node: Node,
        gas: int,
        history: dict[str, Any],
    ) -> _Ready:
        try:
            fees, _ = suggest(
                history, cap=intent.max_fee_per_gas, tip=intent.max_priority_fee_per_gas
            )
        except RflowError as exc:
            if exc.kind is FailureKind.GAS_CAP_EXCEEDED:
                raise _OverCap(intent, exc) from None
            raise
        reservations, breakers = charges(self.project, request.execute.workflow, intent.shape)
        return _Ready(
            request=request,
            reply=reply_of(request),
            intent=intent,
            signer=signer,
            node=node,
            gas=gas,
            fees=fees,
            fee_cap=intent.max_fee_per_gas or fees.max_fee_per_gas * FEE_CAP_MULTIPLE,
            reservations=reservations,
            breakers=breakers,
        )

    async def store(self, ready: Sequence[_Ready]) -> dict[str, SendRow | RflowError]:
        """One Postgres transaction for the batch: check the gas breakers, reserve against
        every attached budget (each send's check sees the reservations of the sends before
        it), allocate each signer's nonces in the batch's order, sign, and store. A refused
        send (over budget, breaker tripped) is answered with its error and takes no nonce;
        a key stored by another delivery keeps that row."""
        if not ready:
            return {}
        chain_nonces: dict[tuple[str, str], int] = {}
        for item in ready:
            pair = item.signer_on
            if pair not in self._synced and pair not in chain_nonces:
                chain_nonces[pair] = await self.chain_nonce(item.node, item.signer.address)
        refused: dict[str, RflowError] = {}

        async def together(conn) -> None:
            refused.clear()
            async with conn.transaction():
                await budgets.lock(conn, [c for item in ready for c in item.reservations])
                refused.update(await self._withdrawn(conn, ready))
                if not await self._store_together(conn, ready, chain_nonces, refused):
                    raise _OneByOne

        async def one_by_one(conn) -> None:
            refused.clear()
            async with conn.transaction():
                await budgets.lock(conn, [c for item in ready for c in item.reservations])
                refused.update(await self._withdrawn(conn, ready))
                for item in ready:
                    if item.key in refused:
                        continue
                    try:
                        async with conn.transaction():  # a savepoint per send
                            await self._store_one(conn, item, chain_nonces.get(item.signer_on))
                    except RflowError as exc:  # over budget, or a gas breaker tripped
                        refused[item.key] = exc
                    except _KeyTaken:
                        pass

        try:
            await self.db(together, f"store {len(ready)} send(s)")
        except _OneByOne:
            log.info(
                "%d send(s) stored one at a time (refused on one of several caps, or stored meanwhile)",
                len(ready),
            )
            await self.db(one_by_one, f"store {len(ready)} send(s) one by one")
        self._synced.update(chain_nonces)
        keys = [item.key for item in ready if item.key not in refused]
        rows = await self.db(lambda conn: sends.find_many(conn, keys), "find sends")
        return {**rows, **refused}

    async def _withdrawn(self, conn: Any, ready: Sequence[_Ready]) -> dict[str, RflowError]:
        """The sends of ``ready`` withdrawn by their runs (a race they lost, say) before
        this transaction, each with its answer: they are never signed. The sends' keys
        stay locked until the commit, so a withdrawal arriving now waits for it and then
        finds the send stored (it goes on)."""
        await sends.lock_keys(conn, [item.key for item in ready])
        found = await sends.refusals(
            conn, [(item.key, item.request.execute.attempt) for item in ready]
        )
        return {
            key: RflowError(FailureKind(error["kind"]), error["message"])
            for (key, _), error in found.items()
        }

    async def _store_together(
        self,
        conn: Any,
        ready: Sequence[_Ready],
        chain_nonces: dict[tuple[str, str], int],
        refused: dict[str, RflowError],
    ) -> bool:
        """The batch in a few round trips; False when it must go one send at a time (a
        send refused on one of several caps, or a key stored meanwhile by another
        delivery), and the caller rolls everything back."""
        by_breakers: dict[tuple[GasBreaker, ...], list[_Ready]] = defaultdict(list)
        for item in ready:
            by_breakers[tuple(item.breakers)].append(item)
        for breakers, items in by_breakers.items():
            try:
                await budgets.check_gas(conn, breakers)
            except RflowError as exc:
                refused.update((item.key, exc) for item in items)
        over = await budgets.reserve_many(
            conn,
            [
                budgets.Reservation(
                    item.key,
                    item.request.execute.run_id,
                    item.request.execute.workflow,
                    item.reservations,
                )
                for item in ready
                if item.key not in refused
            ],
        )
        if over is None:
            return False
        refused.update(over)
        going = [item for item in ready if item.key not in refused]
        by_signer: dict[tuple[str, str], list[_Ready]] = defaultdict(list)
        for item in going:
            by_signer[item.signer_on].append(item)
        new: list[sends.NewSend] = []
        for pair, items in by_signer.items():
            first = await self._nonces(conn, items[0], chain_nonces.get(pair), len(items))
            try:
                new += [await item.new_send(first + i) for i, item in enumerate(items)]
            except RflowError:  # a signer that did not sign: each send answers on its own
                return False
        stored = await sends.insert_many(conn, new)
        return len(stored) == len(new)

    async def _store_one(self, conn: Any, item: _Ready, chain_nonce: int | None) -> None:
        execute = item.request.execute
        await budgets.check_gas(conn, item.breakers)
        await budgets.reserve(
            conn,
            send_key=execute.key,
            run_id=execute.run_id,
            workflow=execute.workflow,
            charges=item.reservations,
        )
        nonce = await self._nonces(conn, item, chain_nonce)
        if not await sends.insert_many(conn, [await item.new_send(nonce)]):
            raise _KeyTaken

    async def _nonces(
        self, conn: Any, item: _Ready, chain_nonce: int | None, count: int = 1
    ) -> int:
        """Allocate ``count`` nonces of ``item``'s signer; the first is returned."""
        network, address = item.signer_on
        first = await sends.next_nonce(conn, network, address, chain_nonce, count)
        if first is None:  # a counter that vanished: sync it with the chain
            chain_nonce = await self.chain_nonce(item.node, address)
            first = await sends.next_nonce(conn, network, address, chain_nonce, count)
        return first

    async def chain_nonce(self, node: Node, address: str) -> int:
        try:
            return await node.nonce(address, "pending")
        except Exception as exc:  # unreachable or refused: retryable either way
            raise RflowError(FailureKind.RPC_TIMEOUT, f"eth_getTransactionCount: {exc}") from None

    async def hand_off(self, rows: Sequence[SendRow]) -> None:
        """Broadcast stored sends, one request per network in their nonce order; the
        tracker follows each from here, whatever happened to it."""
        by_network: dict[str, list[SendRow]] = defaultdict(list)
        for row in rows:
            by_network[row.network].append(row)
        spent: list[str] = []
        for network, group in by_network.items():
            node = await self.node(network)
            outcomes = await node.broadcast_many([row.latest.raw for row in group])
            for row, outcome in zip(group, outcomes, strict=True):
                if isinstance(outcome, RflowError):
                    await self.tracker.refused(row, outcome.as_data())
                elif isinstance(outcome, RpcUnavailable):
                    log.warning(
                        "broadcast of %s unanswered, will rebroadcast: %s", row.send_key, outcome
                    )
                    self.tracker.watch(row, accepted=False)
                elif outcome in (Broadcast.ACCEPTED, Broadcast.KNOWN):
                    spent.append(row.send_key)
                    self.tracker.watch(row, accepted=True)
                elif outcome is Broadcast.NONCE_TOO_LOW:
                    self.tracker.watch(row, accepted=False, nonce_low=True)
                else:
                    # Refused for now by every endpoint, none took it: not out yet.
                    self.tracker.watch(row, accepted=False, maybe_out=False, underpriced=True)
        if spent:
            # Reserved and spent both count against the cap: the next send need not wait
            # for the move (a crash before it leaves the reservation for the recovery pass).
            self.runtime.runner.effects.spawn(
                self.db(lambda conn: budgets.settle_many(conn, spent, "spent"), "hand-off"),
                f"hand-off of {len(spent)} send(s)",
            )

    async def resend(self, deferral: sends.Deferral) -> None:
        """Hand a deferred send back to the sends topic, as it first came (same key)."""
        request = decode(deferral.request, SendRequest)
        await self.runtime.runner.effects.produce_send(
            request.partition_key, deferral.request, deferral.run_id
        )

    async def reply_many(self, replies: Sequence[tuple[dict[str, Any], Any, Any]]) -> None:
        """Each send's result back to its run, produced together."""
        await asyncio.gather(*(self.reply(*reply) for reply in replies))

    async def reply(self, reply: dict[str, Any], output: Any, error: StepError | None) -> None:
        """The send's result, back to its run as a step result, with every value its step
        filled in (a recipient, say) written as its placeholder."""
        secrets = self.secrets(reply)
        event = StepResult(
            run_id=reply["run_id"],
            path=reply["path"],
            visit=reply["visit"],
            attempt=reply["attempt"],
            output=secrets.scrub(output),
            error=secrets.scrub_error(error),
        )
        await self.runtime.runner.effects.send_result(reply["key"], event)

    # --- ownership ------------------------------------------------------------------------

    def deployed(self, deployment: Any) -> None:
        """A deploy may add or remove relayers: follow the open sends of the ones this
        worker's partitions hold now."""
        self.runtime.runner.effects.spawn(
            self.tracker.own(self.owned(self.assigned)), f"relayers of {deployment.label}"
        )

    def owned(self, assigned: frozenset[int]) -> set[tuple[str, str]]:
        """The (network, relayer) pairs whose sends land on ``assigned`` partitions."""
        project = self.runtime.project
        if project is None:
            return set()
        count = self.runtime.catalog.spec("rflow.sends").partitions
        return {
            (network, name)
            for name, relayer in project.relayers.items()
            for network in relayer.networks
            if partition_of(f"{network}:{name}".encode(), count) in assigned
        }


async def _closed(opening: asyncio.Future[Signer]) -> None:
    """Close a signer once it has opened (one that failed to open has nothing to close)."""
    with contextlib.suppress(Exception):
        await (await opening).close()


def attach(app: RflowApp) -> Relayer:
    """Declare the relayer agent on ``app``."""
    runtime = app.rflow
    relayer = Relayer(app)
    consumption = runtime.consumption
    topic = runtime.topics.sends.get_topic_name()

    @app.agent(runtime.topics.sends, name="rflow.relayer", concurrency=1)
    async def relay(stream):
        """Sign, store and broadcast sends a batch at a time, in order per relayer, and
        carry out operators' speed-ups and cancels of them."""
        async for events in consumption.batches(stream, topic, BATCH):
            await consumption.handle(
                "the relayer",
                events,
                relay_batch,
                dead_letter,
                passes=(Unavailable,),
                # No text: it could quote a value a send's step filled in.
                reason=lambda exc: f"{type(exc).__name__} (see the worker's log)",
            )

    async def dead_letter(message: Any, reason: str) -> None:
        await send_dead_letter(app, message, reason)

    async def relay_batch(events: list) -> None:
        """Sign, store and broadcast a batch's sends, then carry out its controls."""
        taken = []
        controls = []
        for event in events:
            try:
                record = decode(event.value, (SendRequest, SendControl))
            except DecodeError as exc:
                await send_dead_letter(app, event.message, exc.reason)
                continue
            if isinstance(record, SendControl):
                controls.append((event.message, record))
            else:
                taken.append((event.message, record))
        try:
            failed = await relayer.handle_many([request for _, request in taken])
        except Exception as exc:
            # No traceback: its last line could quote a value a send's step filled in.
            secrets = relayer.secrets(
                {"secrets": [n for _, r in taken for n in reply_of(r).get("secrets", ())]}
            )
            log.error(
                "relayer failed on a batch of %d; taking them one by one: %s",
                len(taken),
                secrets.scrub(repr(exc)),
            )
            failed = []
            for _, request in taken:
                try:
                    failed += await relayer.handle_many([request])
                except Exception as exc:
                    failed.append((request, exc))
        messages = {id(request): message for message, request in taken}
        for request, exc in failed:
            message = messages[id(request)]
            secrets = relayer.secrets(reply_of(request))
            log.error(
                "relayer failed on %s@%s: %s",
                message.partition,
                message.offset,
                secrets.scrub(repr(exc)),
            )
            await send_dead_letter(
                app, message, secrets.scrub(f"the relayer failed: {type(exc).__name__}: {exc}")
            )
        # An operator's request acts on a send stored before it was asked for, so it
        # comes after the batch's new sends.
        for message, control in controls:
            try:
                bad = await relayer.controls.carry_out(control)
            except Exception as exc:
                log.exception("send request %s failed", control.request_id)
                bad = f"the relayer failed: {type(exc).__name__}: {exc}"
            if bad is not None:
                await send_dead_letter(app, message, bad)

    async def on_rebalance_complete(sender: Any = None, **kwargs: Any) -> None:
        topic = runtime.catalog.full_name("rflow.sends")
        relayer.assigned = frozenset(
            tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topic
        )
        await relayer.tracker.own(relayer.owned(relayer.assigned))

    app.on_rebalance_complete.connect(on_rebalance_complete)
    runtime.on_deployment.append(relayer.deployed)

    @app.task
    async def follow_receipts() -> None:
        await relayer.tracker.run()

    return relayer
