"""From confirmed blocks to trigger records: fetch the logs, match, build the records.

:func:`collect` asks ``eth_getLogs`` once per distinct filter for the blocks that just
reached a confirmation level, and :func:`fire` turns each matching log into the
:class:`~rflow.codecs.TriggerRecord` of one workflow. A log that does not decode, or
whose concurrency group does not evaluate, is logged and passed over: bad input never
stops the follower.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rflow.codecs import TriggerRecord
from rflow.failures import RflowError
from rflow.ingress.blocks import BlockRef, Firing
from rflow.ingress.listeners import Listener
from rflow.ingress.logs import LogDecodeError
from rflow.ingress.rpc import Calls, ChainMoved, RpcError
from rflow.triggering import trigger_record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WaitMatch:
    """A confirmed log that may answer runs parked in a ``wait_for: { event }`` step."""

    workflow: str
    step: str
    args: dict[str, Any]
    payload: dict[str, Any]
    block: BlockRef


async def collect(
    rpc: Calls,
    listeners: Sequence[Listener],
    firings: Sequence[Firing],
    now: datetime,
    *,
    network: str,
    matches: list[WaitMatch] | None = None,
) -> list[tuple[BlockRef, TriggerRecord]]:
    """The trigger records of ``firings``, in chain order (block, log index, workflow).

    Logs that match a wait listener are appended to ``matches`` (when given), in order.
    """
    found: list[tuple[tuple[int, int, str], BlockRef, TriggerRecord]] = []
    for level in sorted({f.level for f in firings}):
        blocks = [f.block for f in firings if f.level == level]
        waiting = [x for x in listeners if x.confirmations == level]
        for query, group in distinct_queries(waiting):
            for entry, block in await fetch_logs(rpc, query, blocks, network=network):
                for listener in group:
                    if listener.wait_step is not None:
                        match = wait_match(listener, entry, block)
                        if match is not None and matches is not None:
                            matches.append(match)
                        continue
                    record = fire(listener, entry, block, now)
                    if record is not None:
                        order = (block.number, record.payload["log_index"], record.workflow)
                        found.append((order, block, record))
    found.sort(key=lambda item: item[0])
    return [(block, record) for _, block, record in found]


def fire(
    listener: Listener, entry: Mapping[str, Any], block: BlockRef, now: datetime
) -> TriggerRecord | None:
    """The firing of ``listener`` for log ``entry`` of ``block``; ``None`` if it does not
    match, or cannot fire (the reason is logged)."""
    where = (
        f"{listener.network} log {entry.get('logIndex')} of tx {entry.get('transactionHash')} "
        f"in block {block.number}, for {listener.workflow_name}"
    )
    try:
        args = listener.match(entry)
        if args is None:
            return None
        key, payload = listener.firing(entry, args, block)
    except LogDecodeError as exc:
        log.warning("skipping %s: %s", where, exc)
        return None
    try:
        return trigger_record(
            listener.workflow_name,
            listener.workflow,
            source="event",
            trigger_key=key,
            payload=payload,
            received_at=now,
        )
    except RflowError as exc:
        # The firing cannot be ordered (its concurrency group does not evaluate); no
        # retry changes that, so it is passed over loudly.
        log.error("dropping %s: %s", where, exc)
        return None


def wait_match(listener: Listener, entry: Mapping[str, Any], block: BlockRef) -> WaitMatch | None:
    """The wait match of ``listener`` for log ``entry``, or ``None`` (reason logged)."""
    try:
        args = listener.match(entry)
        if args is None:
            return None
        _, payload = listener.firing(entry, args, block)
    except LogDecodeError as exc:
        log.warning(
            "skipping log %s for waits of %s: %s",
            entry.get("logIndex"),
            listener.workflow_name,
            exc,
        )
        return None
    assert listener.wait_step is not None
    return WaitMatch(listener.workflow_name, listener.wait_step, args, payload, block)


async def fetch_logs(
    rpc: Calls, query: dict[str, Any], blocks: Sequence[BlockRef], *, network: str = ""
) -> list[tuple[dict[str, Any], BlockRef]]:
    """The logs matching ``query`` in ``blocks`` (consecutive), each with its block.

    One block is asked for by hash, which pins the answer to that block; a range
    (catching up) is asked for by number, and every log's block hash is checked against
    the recorded chain (:class:`~rflow.ingress.rpc.ChainMoved` if one differs).
    """
    if not blocks:
        return []
    if len(blocks) == 1:
        try:
            (entries,) = await rpc.logs([{**query, "blockHash": blocks[0].hash}])
        except RpcError as exc:
            # Nodes refuse a hash they no longer have ("unknown block"): it was reorged out.
            raise ChainMoved(f"block {blocks[0].number} ({blocks[0].hash}): {exc}") from None
        return [(e, blocks[0]) for e in entries if not e.get("removed")]
    try:
        (entries,) = await rpc.logs(
            [{**query, "fromBlock": hex(blocks[0].number), "toBlock": hex(blocks[-1].number)}]
        )
    except RpcError as exc:
        # Most often a provider's cap on results: halve the range until it fits.
        log.info("%s: splitting a log query over %d blocks: %s", network, len(blocks), exc)
        middle = len(blocks) // 2
        return await fetch_logs(rpc, query, blocks[:middle], network=network) + await fetch_logs(
            rpc, query, blocks[middle:], network=network
        )
    by_number = {b.number: b for b in blocks}
    found = []
    for entry in entries:
        if entry.get("removed"):
            continue
        try:
            block = by_number[int(entry["blockNumber"], 16)]
        except (KeyError, TypeError, ValueError):
            raise ChainMoved(f"a log outside the blocks asked for: {entry}") from None
        if str(entry.get("blockHash", "")).lower() != block.hash:
            raise ChainMoved(f"block {block.number} changed while its logs were read")
        found.append((entry, block))
    return found


def distinct_queries(
    listeners: Sequence[Listener],
) -> list[tuple[dict[str, Any], list[Listener]]]:
    """Listeners grouped by identical ``eth_getLogs`` filters (each asked once)."""
    groups: dict[str, tuple[dict[str, Any], list[Listener]]] = {}
    for listener in listeners:
        query = listener.query
        key = json.dumps(query, sort_keys=True)
        groups.setdefault(key, (query, []))[1].append(listener)
    return list(groups.values())
