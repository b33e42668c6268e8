"""The chain follower: contract events of one network turned into trigger firings.

A :class:`ChainFollower` reads new block headers (woken by a websocket ``newHeads``
subscription, or by polling while that fails), feeds them to a
:class:`~rflow.ingress.blocks.BlockTracker`, and for each block that reaches a
trigger's confirmations asks ``eth_getLogs`` for that block by hash, decodes and
filters the logs, and produces one :class:`~rflow.codecs.TriggerRecord` per matching
log and workflow, keyed ``event:<chain id>:<block hash>:<log index>``.

Order of effects for each batch of headers, so that a crash anywhere repeats work
rather than losing it (repeats carry the same trigger keys and are dropped downstream):

1. retract what replaced blocks emitted (:class:`~rflow.codecs.TriggerRetracted`);
2. note the firings about to be produced in Postgres (so they can be retracted even
   if the process dies right after producing them);
3. produce the firings;
4. store the new blocks and cursors in one transaction.

Any failure (node, Kafka or Postgres unavailable; the chain moving under a read)
drops the in-memory state, waits with backoff and resumes from the stored state:
a block is never skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from rflow.codecs import RunEvent, TriggerRecord, TriggerRetracted
from rflow.engine import WaitResolved
from rflow.ingress.blocks import DEFAULT_WINDOW, BlockRef, BlockTracker, UnlinkedSegment
from rflow.ingress.chain_state import ChainState, ChainStore, Emission, StoredBlock
from rflow.ingress.firings import WaitMatch, collect
from rflow.ingress.listeners import abi_dirs, listeners_for
from rflow.ingress.pool import RpcPool, network_endpoints
from rflow.ingress.rpc import ChainMoved, HeadWatcher, RpcError, RpcUnavailable
from rflow.lang import Project
from rflow.settings import Settings
from rflow.storage import StorageError
from rflow.streams.producer import ProduceError

log = logging.getLogger(__name__)

_BACKOFF = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
_WRONG_CHAIN_RETRY = 30.0


class TriggerSink(Protocol):
    """Where firings and retractions go (:class:`~rflow.streams.producer.Producer`)."""

    async def trigger(self, record: TriggerRecord | TriggerRetracted) -> tuple[int, int]:
        """Produce ``record``; return once the broker has acknowledged it."""
        ...

    async def send(self, topic: str, key: str, record: RunEvent) -> tuple[int, int]:
        """Produce a run event (a wait's answer) to ``topic``, acknowledged."""
        ...


class WrongChain(Exception):
    """The node serves another chain than the network declares."""


def utc_now() -> datetime:
    """The wall clock in UTC: the default clock of a follower (``received_at``)."""
    return datetime.now(UTC)


class ChainFollower:
    """Follows ``network`` for the event triggers of ``project``; :meth:`run` until cancelled.

    ``start_block`` applies only when nothing is stored for the network: the first
    block whose events fire. By default a first start begins at the chain's head (events
    still short of their confirmations then fire when they reach them).
    """

    def __init__(
        self,
        settings: Settings,
        project: Project,
        producer: TriggerSink,
        store: ChainStore,
        network: str,
        *,
        env: Mapping[str, str] | None = None,
        start_block: int | None = None,
        ws_url: str | None = None,
        poll_interval: float = 0.25,
        idle: float = 1.0,
        batch_size: int = 100,
        window: int = DEFAULT_WINDOW,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.network = network
        self.producer = producer
        self.store = store
        self.start_block = start_block
        self.urls = network_endpoints(settings, project, network, env)
        self.ws_url = ws_url
        self.poll_interval = poll_interval
        self.idle = idle
        self.batch_size = batch_size
        self.window = window
        self.clock = clock
        self.listeners, problems = listeners_for(
            project, network, abi_dirs=abi_dirs(settings.project_path)
        )
        for problem in problems:
            log.error("not following %s", problem)
        self.levels = sorted({listener.confirmations for listener in self.listeners})
        declared = project.networks.get(network)
        self.chain_id = declared.chain_id if declared is not None else 0
        self.max_lag = declared.max_lag_blocks if declared is not None else 5
        self.tracker: BlockTracker | None = None
        """The in-memory state; ``None`` until resumed (and again after a failure)."""
        self._heads: HeadWatcher | None = None
        self._origin: tuple[int, str] = (self.chain_id, "")
        self._behind = False

    @property
    def mode(self) -> str:
        """How new heads are noticed: ``websocket`` or ``polling`` (``starting`` before)."""
        return self._heads.mode if self._heads is not None else "starting"

    def cursor(self, level: int) -> int | None:
        """The highest block emitted at ``level`` confirmations, once resumed."""
        return None if self.tracker is None else self.tracker.cursors.get(level)

    async def run(self) -> None:
        """Follow the chain until cancelled; every failure is retried, none is raised.

        Each run resumes from the stored state (another process may have moved it).
        """
        self.tracker = None
        if not self.listeners:
            log.info("no event triggers on %s: nothing to follow", self.network)
            return
        async with (
            RpcPool(self.network, self.urls, max_lag=self.max_lag) as rpc,
            HeadWatcher(rpc, self.ws_url or rpc.ws, poll_interval=self.poll_interval) as heads,
        ):
            self._heads = heads
            failures = 0
            while True:
                try:
                    if self.tracker is None:
                        self.tracker = await self._resume(rpc)
                    await self._sync(rpc, self.tracker)
                except WrongChain as exc:
                    self.tracker = None
                    log.error("%s; retrying in %.0fs", exc, _WRONG_CHAIN_RETRY)
                    await asyncio.sleep(_WRONG_CHAIN_RETRY)
                    continue
                except Exception as exc:
                    # Nothing may stop ingress for good: resume from the stored state.
                    self.tracker = None
                    delay = _BACKOFF[min(failures, len(_BACKOFF) - 1)]
                    failures += 1
                    expected = (
                        RpcUnavailable,
                        RpcError,
                        ProduceError,
                        StorageError,
                        ChainMoved,
                        UnlinkedSegment,
                    )
                    log.log(
                        logging.WARNING if isinstance(exc, expected) else logging.ERROR,
                        "following %s failed, resuming in %.2fs: %s",
                        self.network,
                        delay,
                        exc,
                        exc_info=not isinstance(exc, expected),
                    )
                    await asyncio.sleep(delay)
                    continue
                failures = 0
                await heads.wait(self.idle)

    # --- resuming -----------------------------------------------------------------

    async def _resume(self, rpc: RpcPool) -> BlockTracker:
        chain_id = await rpc.chain_id()
        if chain_id != self.chain_id:
            raise WrongChain(
                f"network {self.network} declares chain id {self.chain_id} but "
                f"its node {rpc.label} serves chain {chain_id}"
            )
        genesis = await rpc.header(0)
        if genesis is None:
            raise ChainMoved("the node has no genesis block")
        self._origin = (chain_id, genesis.hash)
        state = await self.store.load(self.network)
        if state.origins and state.origins != {self._origin}:
            # Another chain, or the same one started over (a dev node restarted without
            # its state): what is stored describes blocks this chain never had.
            log.warning(
                "stored cursor of %s belongs to another chain (id, genesis) %s, not %s: "
                "starting afresh",
                self.network,
                sorted(state.origins),
                self._origin,
            )
            state = ChainState()
            await self.store.reset(self.network)
        if state.blocks:
            blocks = [BlockRef(b.number, b.hash, b.parent_hash, b.timestamp) for b in state.blocks]
            tracker = BlockTracker(self.levels, blocks, state.cursors, window=self.window)
            log.info("resuming %s after block %d", self.network, tracker.tip.number)
            return tracker
        if self.start_block is None:
            head = await rpc.block_number()
            anchor = await rpc.header(max(head - max(self.levels), 0))
            if anchor is None:
                raise ChainMoved(f"block {head - max(self.levels)} vanished")
            tracker = BlockTracker.starting_at(anchor, self.levels, head=head, window=self.window)
        else:
            anchor = await rpc.header(max(self.start_block - 1, 0))
            if anchor is None:
                raise ChainMoved(f"start block {self.start_block} is not on the chain yet")
            tracker = BlockTracker.starting_at(anchor, self.levels, window=self.window)
        await self._save(tracker, [anchor])
        log.info("following %s from block %d", self.network, anchor.number + 1)
        return tracker

    # --- reading the chain --------------------------------------------------------

    async def _sync(self, rpc: RpcPool, tracker: BlockTracker) -> None:
        """Process headers until the recorded tip is the node's head."""
        while True:
            head = await rpc.header("latest")
            if head is None:
                raise ChainMoved("the node has no latest block")
            tip = tracker.tip
            if head.hash == tip.hash:
                return
            if head.number < tracker.base.number:
                # Below everything recorded: a node far behind, or a chain started over.
                # Only the latter may move the cursor back; wait out the former.
                await self._same_origin(rpc)
                if not self._behind:
                    log.warning(
                        "%s: the node's head %d is below the recorded blocks %d..%d; waiting",
                        self.network,
                        head.number,
                        tracker.base.number,
                        tip.number,
                    )
                self._behind = True
                return
            self._behind = False
            if head.number <= tip.number:
                recorded = tracker.block(head.number)
                if recorded is not None and recorded.hash == head.hash:
                    # A head below ours that we agree with: a lagging node, or a rollback
                    # not yet built on. The next new block shows which.
                    return
                segment = [head]
            else:
                last = min(tip.number + self.batch_size, head.number)
                segment = _linked_prefix(await rpc.headers(range(tip.number + 1, last + 1)))
                if not segment:
                    raise ChainMoved(f"block {tip.number + 1} vanished while reading")
            segment, force = await self._attach(rpc, tracker, segment)
            await self._process(rpc, tracker, segment, force=force)

    async def _attach(
        self, rpc: RpcPool, tracker: BlockTracker, segment: list[BlockRef]
    ) -> tuple[list[BlockRef], bool]:
        """Prepend parents until ``segment`` links to the recorded chain (a reorg)."""
        while True:
            attachment = tracker.attachment(segment[0])
            if attachment == "linked":
                return segment, False
            if attachment == "unknown":
                await self._same_origin(rpc)
                log.error(
                    "reorg on %s reaches below the %d recorded blocks: firings from blocks "
                    "before %d can no longer be retracted",
                    self.network,
                    len(tracker.blocks),
                    tracker.base.number,
                )
                return segment, True
            if attachment == "gap":
                raise ChainMoved(f"block {segment[0].number} does not follow the recorded tip")
            parent = await rpc.header_by_hash(segment[0].parent_hash)
            if parent is None or parent.number != segment[0].number - 1:
                raise ChainMoved(f"the parent of block {segment[0].number} vanished")
            segment.insert(0, parent)

    async def _same_origin(self, rpc: RpcPool) -> None:
        """Raise :class:`ChainMoved` if the node's chain is not the one recorded (its
        genesis changed), so that resuming starts that chain afresh."""
        genesis = await rpc.header(0)
        if genesis is None or genesis.hash != self._origin[1]:
            raise ChainMoved(f"the {self.network} chain was started over (its genesis changed)")

    async def _process(
        self, rpc: RpcPool, tracker: BlockTracker, segment: list[BlockRef], *, force: bool
    ) -> None:
        update = tracker.apply(segment, force=force)
        now = self.clock()
        if update.replaced:
            log.warning(
                "reorg on %s: blocks %d..%d replaced",
                self.network,
                update.replaced[0].number,
                update.replaced[-1].number,
            )
            await self._retract(update.replaced, now)
        matches: list[WaitMatch] = []
        found = await collect(
            rpc, self.listeners, update.firings, now, network=self.network, matches=matches
        )
        if found:
            emissions = [
                Emission(r.workflow, r.trigger_key, r.group, b.number, b.hash) for b, r in found
            ]
            await self.store.record_emissions(self.network, emissions)
            for _, record in found:
                await self.producer.trigger(record)
        if matches:
            await self._answer_waits(matches, now)
        await self._save(tracker, segment, retracted=[b.hash for b in update.replaced])
        if found:
            log.info("%s: %d firings up to block %d", self.network, len(found), segment[-1].number)

    async def _answer_waits(self, matches: Sequence[WaitMatch], now: datetime) -> None:
        """Resume the runs parked for these confirmed logs (first answer wins per wait).

        Each wait checks its own filter, rendered when its run parked; a repeat after a
        crash finds the wait answered already and produces nothing.
        """
        for match in matches:
            for wait in await self.store.event_waits(match.workflow, match.step):
                wanted = (wait["spec"].get("event") or {}).get("filter") or {}
                if not all(_same(match.args.get(name), value) for name, value in wanted.items()):
                    continue
                if await self.store.resolve_wait(wait["wait_id"], match.payload, now) is None:
                    continue
                event = WaitResolved(
                    run_id=wait["run_id"],
                    path=wait["path"],
                    wait_id=wait["wait_id"],
                    payload=match.payload,
                )
                await self.producer.send("rflow.runs", wait["partition_key"], RunEvent(event=event))
                log.info(
                    "%s: block %d answers %s's wait at %s",
                    self.network,
                    match.block.number,
                    wait["run_id"],
                    wait["path"],
                )

    async def _retract(self, replaced: Sequence[BlockRef], now: datetime) -> None:
        emitted = await self.store.emitted_from(self.network, [b.hash for b in replaced])
        for emission in emitted:
            log.warning(
                "retracting %s of %s: block %d (%s) was replaced",
                emission.trigger_key,
                emission.workflow,
                emission.block_number,
                emission.block_hash,
            )
            await self.producer.trigger(
                TriggerRetracted(
                    workflow=emission.workflow,
                    trigger_key=emission.trigger_key,
                    group=emission.group,
                    reason=(
                        f"chain reorg on {self.network}: block {emission.block_number} "
                        f"({emission.block_hash}) was replaced"
                    ),
                    retracted_at=now,
                )
            )

    async def _save(
        self, tracker: BlockTracker, blocks: Sequence[BlockRef], retracted: Sequence[str] = ()
    ) -> None:
        await self.store.save(
            self.network,
            self._origin,
            blocks=[
                StoredBlock(b.number, b.hash, b.parent_hash, b.timestamp)
                for b in blocks
                if b.number >= tracker.base.number
            ],
            tip=tracker.tip.number,
            floor=tracker.base.number,
            cursors=tracker.cursors,
            retracted=retracted,
        )


def _linked_prefix(headers: Sequence[BlockRef | None]) -> list[BlockRef]:
    """The leading headers that exist and each link to the one before."""
    segment: list[BlockRef] = []
    for header in headers:
        if header is None or (segment and header.parent_hash != segment[-1].hash):
            break
        segment.append(header)
    return segment


def _same(found: object, wanted: object) -> bool:
    """An event argument against a wait's filter value (addresses and hex compare caseless)."""
    if isinstance(found, str) and isinstance(wanted, str):
        return found.lower() == wanted.lower()
    if isinstance(found, int) and isinstance(wanted, str):
        try:
            return found == int(wanted, 0)
        except ValueError:
            return False
    return found == wanted
