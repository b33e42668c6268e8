"""Who owns what: each worker's name and Kafka client id, the partitions it owns and the
standby copies it keeps, and which worker owns a run.

A worker is named ``<host>:<web port>`` (``rflow deployments``, ``rflow workers``) and
its Kafka clients say the same, ``rflow-<host>-<web port>``, so that Kafka's own tools
(``kafka-consumer-groups --describe --members``) name the same worker. Every worker
reports, with what it runs, the partitions Faust's assignor gave it: the *actives* it
owns (it consumes the topic's records, or serves the table's keys, there) and the
*standbys* (copies of other workers' table partitions, kept warm from the changelogs to
take over quickly). A run belongs to the worker that owns its partition of
``rflow.runs``: its key's (the concurrency group, or the trigger key) murmur2 hash,
as every rflow producer partitions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from aiokafka.partitioner import DefaultPartitioner

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def client_id(host: str, web_port: int) -> str:
    """The Kafka client id of the worker on ``host`` serving ``web_port``: it names both,
    in the characters Kafka allows in a client id."""
    return f"rflow-{_UNSAFE.sub('_', host)}-{web_port}"


def worker_name(host: str, web_port: int) -> str:
    """How rflow names the worker: ``<host>:<web port>``."""
    return f"{host}:{web_port}"


def by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """``(topic, partition)`` pairs as ``{topic: [partition, ...]}``, sorted."""
    found: dict[str, set[int]] = {}
    for topic, partition in partitions:
        found.setdefault(topic, set()).add(partition)
    return {topic: sorted(found[topic]) for topic in sorted(found)}


def assignment(
    actives: Iterable[tuple[str, int]], standbys: Iterable[tuple[str, int]], prefix: str
) -> dict[str, dict[str, list[int]]]:
    """What a worker reports: the partitions of rflow's topics (those under ``prefix``;
    Faust's own assignor topic is left out) it owns, and the standby copies of tables it
    keeps. Faust's assignor pairs a standby with every topic joined by key, but a worker
    reads only the tables' changelogs (``rflow.state.*``) for its standbys: only those
    are copies it keeps."""
    mine, tables = f"{prefix}rflow.", f"{prefix}rflow.state."
    return {
        "actives": by_topic(tp for tp in actives if tp[0].startswith(mine)),
        "standbys": by_topic(tp for tp in standbys if tp[0].startswith(tables)),
    }


def spans(partitions: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5``; nothing as ``-``."""
    if not partitions:
        return "-"
    parts, start, last = [], partitions[0], partitions[0]
    for partition in [*partitions[1:], None]:
        if partition is not None and partition == last + 1:
            last = partition
            continue
        parts.append(str(start) if start == last else f"{start}-{last}")
        if partition is not None:
            start = last = partition
    return ",".join(parts)


def partition_of(key: str, count: int) -> int:
    """The partition (of ``count``) a record keyed ``key`` goes to: murmur2, as rflow's
    producers and Kafka's Java client hash keys."""
    partitions = list(range(count))
    return DefaultPartitioner()(key.encode(), partitions, partitions)


def run_key(run: Mapping[str, Any]) -> str:
    """The Kafka key of a run's records (a read-model row): its concurrency group, or
    its trigger key without one."""
    group = run.get("group_key")
    return group if group is not None else run["trigger_key"]


class Reported(Protocol):
    """A worker's report, as ``storage.deployments.WorkerRow`` has it."""

    worker: str
    app_id: str
    seen_ago: float
    assignment: dict[str, Any]


STALE_AFTER = 30.0
"""Seconds after which a worker that has not reported is taken to be gone."""


def owner(workers: Iterable[Reported], app_id: str, topic: str, partition: int) -> Reported | None:
    """The worker of group ``app_id`` that reported owning ``partition`` of ``topic`` (its
    full name) most recently, among those seen within :data:`STALE_AFTER` seconds."""
    found = [
        row
        for row in workers
        if row.app_id == app_id
        and row.seen_ago <= STALE_AFTER
        and partition in (row.assignment or {}).get("actives", {}).get(topic, [])
    ]
    return min(found, key=lambda row: row.seen_ago, default=None)
