"""Reading a backtest's history: the firings of the window from the triggers topic (and,
for those its retention has dropped, from the read model), what their runs did, and the
spend around them. Reads only: the consumer has no group and commits nothing, the
database is only queried.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from rflow.backtest.history import (
    Firing,
    GasEntry,
    History,
    RecordedCharge,
    RecordedRun,
    RecordedSend,
    RecordedStep,
    Retraction,
    SpendEntry,
    Window,
)
from rflow.codecs import DecodeError, decode
from rflow.codecs.records import RetryRecord, TriggerRecord, TriggerRetracted
from rflow.engine.keys import run_key
from rflow.settings import Settings
from rflow.storage import backtests
from rflow.streams import kafka, topics

SLACK = timedelta(hours=1)
"""How much earlier than the window's start the topic is read: a record is produced after
its firing was received, so nothing of the window was produced before its start; the
slack covers clocks that disagree."""
READ_TIMEOUT_MS = 2000
STALLED = 15
"""Waits of :data:`READ_TIMEOUT_MS` without a record after which reading stops, failed."""


class LoadError(Exception):
    """The history cannot be read (Kafka unreachable, no triggers topic)."""


async def topic_firings(
    settings: Settings, window: Window, workflows: frozenset[str] | None
) -> tuple[list[Firing], list[str]]:
    """The firings of ``window`` on the triggers topic, each as first accepted (a repeat of
    its key changes nothing), with their retractions; and notes on what was left out."""
    catalog = topics.Catalog.from_settings(settings)
    name = catalog.full_name("rflow.triggers")
    consumer = kafka.consumer(
        settings,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        request_timeout_ms=15000,
    )
    try:
        await kafka.start(consumer, settings)
    except kafka.KafkaUnavailable as exc:
        raise LoadError(str(exc)) from None
    try:
        if name not in await consumer.topics():
            raise LoadError(
                f"topic {name} does not exist (RFLOW_TOPIC_PREFIX={settings.topic_prefix!r}): "
                "run the backtest with the workers' settings"
            )
        # topics.yaml is the contract: a topic with another count is refused at start-up.
        count = catalog.spec("rflow.triggers").partitions
        tps = [TopicPartition(name, p) for p in range(count)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        firsts = await consumer.beginning_offsets(tps)
        since = int((window.start - SLACK).timestamp() * 1000)
        found = await consumer.offsets_for_times({tp: since for tp in tps})
        for tp in tps:
            at = found.get(tp)
            consumer.seek(tp, at.offset if at is not None else ends[tp])
        records = await _read(consumer, tps, ends)
    except KafkaError as exc:
        raise LoadError(f"reading {name}: {exc}") from None
    finally:
        await consumer.stop()
    notes = []
    if any(firsts[tp] > 0 for tp in tps):
        notes.append(
            f"{name} no longer holds its oldest records (retention): a firing it dropped is "
            "rebuilt from the read model's row of its run, marked reconstructed"
        )
    return _firings(records, window, workflows, notes), notes


async def _read(consumer: Any, tps: list[TopicPartition], ends: dict[Any, int]) -> list[Any]:
    """Every record of ``tps`` from where the consumer stands to ``ends``; a topic that
    stops giving records before its end for :data:`STALLED` waits in a row is an error
    (a backtest never replays part of a window without saying so)."""
    pending = {tp for tp in tps if await consumer.position(tp) < ends[tp]}
    taken: list[Any] = []
    idle = 0
    while pending:
        batch = await consumer.getmany(*pending, timeout_ms=READ_TIMEOUT_MS)
        for messages in batch.values():
            taken += messages
        before = len(pending)
        for tp in list(pending):
            if await consumer.position(tp) >= ends[tp]:
                pending.discard(tp)
        idle = 0 if batch or len(pending) < before else idle + 1
        if idle >= STALLED:
            where = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(pending))
            raise LoadError(
                f"{where} gave no records before its end for {STALLED * READ_TIMEOUT_MS // 1000}s"
            )
    return taken


def _firings(
    messages: list[Any], window: Window, workflows: frozenset[str] | None, notes: list[str]
) -> list[Firing]:
    firsts: dict[str, tuple[TriggerRecord, tuple[int, int]]] = {}
    retracted: dict[str, Retraction] = {}
    undecodable = retries = 0
    for message in messages:
        try:
            record = decode(message.value)
        except DecodeError:
            undecodable += 1
            continue
        if isinstance(record, TriggerRecord):
            gate = run_key(record.workflow, record.trigger_key)
            firsts.setdefault(gate, (record, (message.partition, message.offset)))
        elif isinstance(record, TriggerRetracted):
            gate = run_key(record.workflow, record.trigger_key)
            retracted.setdefault(gate, Retraction(record.retracted_at, record.reason))
        elif isinstance(record, RetryRecord):
            retries += 1
    if undecodable:
        notes.append(f"{undecodable} record(s) of the triggers topic do not decode: left out")
    if retries:
        notes.append(
            f"{retries} operator retr{'y' if retries == 1 else 'ies'} (rflow runs retry) are "
            "not replayed: what they spent counts as it was"
        )
    found = []
    for gate, (record, offset) in firsts.items():
        if record.received_at not in window:
            continue
        if workflows is not None and record.workflow not in workflows:
            continue
        found.append(Firing(record, "topic", retracted.get(gate), offset))
    return found


async def load(
    settings: Settings,
    conn: Any,
    window: Window,
    *,
    workflows: frozenset[str] | None,
    limit: int | None,
    lookback: timedelta,
) -> History:
    """Everything the backtest of ``window`` replays: its firings (the ``limit`` most
    recent, when given), their recorded runs, and the spend of every other run since
    ``lookback`` before the window (what the budgets' windows can reach)."""
    firings, notes = await topic_firings(settings, window, workflows)
    on_topic = {firing.gate for firing in firings}
    names = sorted(workflows) if workflows is not None else None
    rows = await backtests.runs_in_window(conn, window.start, window.end, names)
    rebuilt: dict[str, Firing] = {}
    for row in rows:
        gate = run_key(row["workflow"], row["trigger_key"])
        if gate in on_topic or gate in rebuilt:
            continue
        record = TriggerRecord(
            workflow=row["workflow"],
            trigger_key=row["trigger_key"],
            group=row["group_key"],
            source=row["source"] if row["source"] in _SOURCES else "manual",
            payload=row["trigger"] if isinstance(row["trigger"], dict) else {},
            received_at=row["created_at"],
        )
        rebuilt[gate] = Firing(record, "read_model")
    chosen = sorted(
        [*firings, *rebuilt.values()], key=lambda f: (f.at, f.offset or (-1, -1), f.gate)
    )
    if limit is not None and len(chosen) > limit:
        notes.append(
            f"{len(chosen)} firings in the window: the {limit} most recent are replayed "
            "(--limit); what the others spent counts as it was"
        )
        chosen = chosen[-limit:]
    runs = await recorded_runs(conn, chosen)
    replayed = [run.run_id for found in runs.values() for run in found]
    charges, gas = await backtests.other_spend(conn, window.start - lookback, replayed)
    return History(
        window=window,
        firings=tuple(chosen),
        runs=runs,
        spend=tuple(SpendEntry(*row) for row in charges),
        gas=tuple(GasEntry(*row) for row in gas),
        notes=tuple(notes),
    )


_SOURCES = frozenset({"event", "webhook", "schedule", "manual"})


async def recorded_runs(conn: Any, firings: Sequence[Firing]) -> dict[str, tuple[RecordedRun, ...]]:
    """What the runs of ``firings`` did, by gate: their rows, step logs, sends, charges."""
    pairs = [(f.record.workflow, f.record.trigger_key) for f in firings]
    rows = await backtests.runs_of_firings(conn, pairs)
    ids = [row["run_id"] for row in rows]
    steps: dict[str, list[RecordedStep]] = defaultdict(list)
    for row in await backtests.steps_of(conn, ids):
        steps[row["run_id"]].append(
            RecordedStep(
                path=row["path"],
                visit=row["visit"],
                kind=row["kind"],
                status=row["status"],
                attempt=row["attempt"],
                input=row["input"],
                output=row["output"],
                error_kind=row["error_kind"],
                error_message=row["error_message"],
                started_at=row["started_at"],
                settled_at=row["settled_at"],
            )
        )
    sends: dict[str, list[RecordedSend]] = defaultdict(list)
    for row in await backtests.sends_of(conn, ids):
        sends[row["run_id"]].append(
            RecordedSend(
                send_key=row["send_key"],
                path=row["path"],
                network=row["network"],
                relayer=row["relayer"],
                address=row["address"],
                to=row["to_address"],
                value=row["value"],
                status=row["status"],
                block_number=row["block_number"],
                gas_used=row["gas_used"],
                effective_gas_price=row["effective_gas_price"],
                tx_hash=row["tx_hash"],
            )
        )
    charges: dict[str, list[RecordedCharge]] = defaultdict(list)
    for row in await backtests.charges_of(conn, ids):
        charges[row["run_id"]].append(
            RecordedCharge(
                row["budget"], row["asset"], row["amount"], row["status"], row["send_key"]
            )
        )
    found: dict[str, list[RecordedRun]] = defaultdict(list)
    for row in rows:
        rid = row["run_id"]
        found[run_key(row["workflow"], row["trigger_key"])].append(
            RecordedRun(
                run_id=rid,
                workflow=row["workflow"],
                version=row["version"],
                status=row["status"],
                trigger_key=row["trigger_key"],
                matrix=row["matrix"],
                error_kind=row["error_kind"],
                error_message=row["error_message"],
                created_at=row["created_at"],
                started_at=row["started_at"],
                settled_at=row["settled_at"],
                steps=tuple(steps.get(rid, ())),
                sends=tuple(sends.get(rid, ())),
                charges=tuple(charges.get(rid, ())),
            )
        )
    return {gate: tuple(runs) for gate, runs in found.items()}
