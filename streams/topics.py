"""The topics declared in ``topics.yaml`` and their creation on a broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from rflow.settings import Settings

_TOPIC_ALREADY_EXISTS = 36


class TopicsError(Exception):
    """``topics.yaml`` is malformed, or the broker disagrees with it."""


@dataclass(frozen=True)
class TopicSpec:
    """One topic as ``topics.yaml`` declares it (``name`` without the prefix)."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)
    key: str = ""
    description: str = ""


def load(path: Path) -> list[TopicSpec]:
    """Read and check ``topics.yaml``."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TopicsError(f"{path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("topics"), list):
        raise TopicsError(f"{path}: expected a mapping with a 'topics' list")
    default_rf = doc.get("replication_factor", 1)
    specs: list[TopicSpec] = []
    for index, entry in enumerate(doc["topics"]):
        where = f"{path}: topics[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise TopicsError(f"{where}: each topic needs a 'name'")
        unknown = set(entry) - {
            "name",
            "partitions",
            "replication_factor",
            "configs",
            "key",
            "description",
        }
        if unknown:
            raise TopicsError(
                f"{where} ({entry['name']}): unknown field(s) {', '.join(sorted(unknown))}"
            )
        partitions = entry.get("partitions")
        rf = entry.get("replication_factor", default_rf)
        if not isinstance(partitions, int) or partitions < 1:
            raise TopicsError(f"{where} ({entry['name']}): 'partitions' must be a positive integer")
        if not isinstance(rf, int) or rf < 1:
            raise TopicsError(
                f"{where} ({entry['name']}): 'replication_factor' must be a positive integer"
            )
        configs = {str(k): str(v) for k, v in (entry.get("configs") or {}).items()}
        specs.append(
            TopicSpec(
                entry["name"],
                partitions,
                rf,
                configs,
                entry.get("key", ""),
                entry.get("description", ""),
            )
        )
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise TopicsError(f"{path}: a topic is declared twice")
    return specs


MIN_INSYNC = "min.insync.replicas"


def replicated(
    specs: Iterable[TopicSpec],
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
) -> list[TopicSpec]:
    """``specs`` with ``replication_factor`` (when given) and their ``min.insync.replicas``.

    A topic's ``min.insync.replicas`` is, first of all, ``min_insync_replicas`` (the
    setting); else what ``topics.yaml`` configures for it; else one less than its
    replication factor (2 of 3), so that with ``acks=all`` a write survives the loss of a
    broker and the topic stays writable while one is down. A single copy needs 1.
    """
    found = []
    for spec in specs:
        rf = replication_factor or spec.replication_factor
        configs = dict(spec.configs)
        if min_insync_replicas is not None:
            configs[MIN_INSYNC] = str(min_insync_replicas)
        elif MIN_INSYNC not in configs and rf > 1:
            configs[MIN_INSYNC] = str(rf - 1)
        wanted = int(configs.get(MIN_INSYNC, "1"))
        if wanted > rf:
            raise TopicsError(
                f"topic {spec.name}: min.insync.replicas={wanted} is more than its "
                f"replication factor {rf}, so no write could ever be acknowledged "
                "(RFLOW_TOPIC_MIN_INSYNC_REPLICAS, or the topic's configs in topics.yaml)"
            )
        found.append(replace(spec, replication_factor=rf, configs=configs))
    return found


@dataclass(frozen=True)
class Catalog:
    """The declared topics under one settings' prefix."""

    specs: tuple[TopicSpec, ...]
    prefix: str = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> Catalog:
        """The catalog of ``settings.topics_file``, replicated as the settings say."""
        specs = replicated(
            load(settings.topics_file),
            settings.topic_replication_factor,
            settings.topic_min_insync_replicas,
        )
        return cls(tuple(specs), settings.topic_prefix)

    def full_name(self, name: str) -> str:
        """The broker-side name of declared topic ``name``."""
        self.spec(name)
        return self.prefix + name

    def spec(self, name: str) -> TopicSpec:
        for spec in self.specs:
            if spec.name == name:
                return spec
        raise TopicsError(f"topic {name!r} is not declared in topics.yaml")

    def declared(self, name: str) -> str:
        """The declared name of topic ``name``, given as the workers name it (with the
        prefix, as in their logs and the broker) or as ``topics.yaml`` declares it."""
        if self.prefix and name.startswith(self.prefix):
            unprefixed = name[len(self.prefix) :]
            if any(spec.name == unprefixed for spec in self.specs):
                return unprefixed
        if any(spec.name == name for spec in self.specs):
            return name
        known = ", ".join(self.prefix + spec.name for spec in self.specs)
        raise TopicsError(
            f"topic {name!r} is not one of the workers' topics under "
            f"RFLOW_TOPIC_PREFIX={self.prefix!r} (topics.yaml declares: {known})"
        )

    def __iter__(self):
        return iter(self.specs)


@dataclass(frozen=True)
class ApplyResult:
    """What ``apply`` found and did."""

    created: list[str]
    unchanged: list[str]
    fewer_copies: list[str] = field(default_factory=list)
    """Warnings: live topics with fewer copies than asked for (``apply`` leaves a live
    topic's replication alone)."""


async def apply(
    settings: Settings, catalog: Catalog | None = None, *, dry_run: bool = False
) -> ApplyResult:
    """Create the declared topics that are missing; refuse partition-count mismatches.

    Every mismatch is reported together, before anything is created.
    """
    catalog = catalog or Catalog.from_settings(settings)
    async with _admin(settings) as admin:
        names = [catalog.prefix + s.name for s in catalog]
        shapes = await _known_shapes(admin, names)
        problems, missing, unchanged, fewer = [], [], [], []
        for spec in catalog:
            name = catalog.prefix + spec.name
            shape = shapes.get(name)
            if shape is None:
                missing.append((name, spec))
                continue
            count, copies = shape
            if count != spec.partitions:
                problems.append(_mismatch(name, count, spec.partitions))
                continue
            unchanged.append(name)
            if copies < spec.replication_factor:
                fewer.append(_fewer(name, copies, spec))
        if problems:
            raise TopicsError("\n".join(problems))
        if missing:
            await _check_brokers(admin, settings, [spec for _, spec in missing])
        if missing and not dry_run:
            new = [
                NewTopic(n, s.partitions, s.replication_factor, topic_configs=s.configs)
                for n, s in missing
            ]
            response = await admin.create_topics(new, timeout_ms=15000)
            existed = set()
            for name, code, message in (tuple(e)[:3] for e in response.topic_errors):
                # 36: it exists already (a racing apply, or, on a cluster, a broker whose
                # metadata lagged behind): a live topic, checked below like any other.
                if code == _TOPIC_ALREADY_EXISTS:
                    existed.add(name)
                elif code != 0:
                    raise TopicsError(f"creating topic {name} failed (error {code}): {message}")
            await _verify(admin, catalog)
            if existed:
                shapes = await _known_shapes(admin, sorted(existed), present=existed)
                for name, spec in missing:
                    if name in existed:
                        unchanged.append(name)
                        shape = shapes.get(name)
                        if shape is not None and shape[1] < spec.replication_factor:
                            fewer.append(_fewer(name, shape[1], spec))
                missing = [(n, s) for n, s in missing if n not in existed]
                unchanged.sort(key=names.index)
        return ApplyResult([n for n, _ in missing], unchanged, fewer)


def _fewer(name: str, copies: int, spec: TopicSpec) -> str:
    return (
        f"topic {name} has {copies} cop{'y' if copies == 1 else 'ies'} but "
        f"{spec.replication_factor} are asked for: rflow does not change the "
        "replication of a live topic; give it more with Kafka's "
        "kafka-reassign-partitions (docs/cluster.md)"
    )


async def describe(settings: Settings, names: Iterable[str]) -> dict[str, int]:
    """Partition counts of the named broker-side topics that exist."""
    async with _admin(settings) as admin:
        return await _partition_counts(admin, list(names))


async def _check_brokers(
    admin: AIOKafkaAdminClient, settings: Settings, specs: list[TopicSpec]
) -> None:
    """Refuse, before creating anything, topics that want more copies than there are
    brokers (the broker would refuse each with INVALID_REPLICATION_FACTOR)."""
    try:
        cluster = await admin.describe_cluster()
    except KafkaError as exc:
        raise TopicsError(
            f"cannot describe the cluster at {settings.kafka_display}: {exc}"
        ) from None
    brokers = len(cluster["brokers"])
    rf = max(spec.replication_factor for spec in specs)
    if rf > brokers:
        wanting = ", ".join(spec.name for spec in specs if spec.replication_factor > brokers)
        raise TopicsError(
            f"replication factor {rf} asked for ({wanting}), but the cluster at "
            f"{settings.kafka_display} has {brokers} broker(s) up: every copy needs a broker of "
            "its own. Set RFLOW_TOPIC_REPLICATION_FACTOR (or topics.yaml's "
            f"replication_factor) to at most {brokers}, or add brokers"
        )


def _mismatch(name: str, actual: int, declared: int) -> str:
    return (
        f"topic {name} has {actual} partitions but topics.yaml declares {declared}; "
        "changing the count of a live topic moves keys between partitions, so rflow "
        "will not do it: create a new topic, or change topics.yaml back"
    )


async def _verify(admin: AIOKafkaAdminClient, catalog: Catalog, timeout: float = 15.0) -> None:
    """Wait until the broker's metadata lists every declared topic with its partitions
    (on a cluster, the broker asked may list a topic just created before it knows its
    partitions: no topic has none), then check counts."""
    want = {catalog.prefix + spec.name: spec.partitions for spec in catalog}
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        counts = await _partition_counts(admin, list(want))
        if set(counts) == set(want) and all(counts.values()):
            break
        if asyncio.get_running_loop().time() > deadline:
            absent = ", ".join(sorted(name for name in want if not counts.get(name)))
            raise TopicsError(
                f"topics not visible on the broker {timeout:.0f}s after creation: {absent}"
            )
        await asyncio.sleep(0.1)
    wrong = [
        _mismatch(name, counts[name], declared)
        for name, declared in want.items()
        if counts[name] != declared
    ]
    if wrong:
        raise TopicsError("\n".join(wrong))


@asynccontextmanager
async def _admin(settings: Settings) -> AsyncIterator[AIOKafkaAdminClient]:
    from rflow.streams import kafka

    try:
        admin = kafka.admin(settings, request_timeout_ms=15000)
    except kafka.KafkaSettingsError as exc:
        raise TopicsError(str(exc)) from None
    try:
        await kafka.start(admin, settings)
    except kafka.KafkaUnavailable as exc:
        raise TopicsError(str(exc)) from None
    try:
        yield admin
    finally:
        await admin.close()


async def _partition_counts(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    return {name: count for name, (count, _) in (await _shapes(admin, names)).items()}


async def _known_shapes(
    admin: AIOKafkaAdminClient, names: list[str], present: Iterable[str] = ()
) -> dict[str, tuple[int, int]]:
    """:func:`_shapes`, asked again (for up to 15 s) while the broker answering lists a
    topic without its partitions or does not list one of ``present`` yet: on a cluster, a
    broker may learn of a topic another one created a moment ago in either way. No topic
    has no partitions, so neither is judged before then."""
    deadline = asyncio.get_running_loop().time() + 15.0
    while True:
        shapes = await _shapes(admin, names)
        settled = all(count for count, _ in shapes.values()) and all(
            name in shapes for name in present
        )
        if settled or asyncio.get_running_loop().time() > deadline:
            return shapes
        await asyncio.sleep(0.1)


async def _shapes(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, tuple[int, int]]:
    """Partition count and fewest copies of a partition, of each named topic that exists."""
    present = set(await admin.list_topics())
    wanted = [n for n in names if n in present]
    if not wanted:
        return {}
    described = await admin.describe_topics(wanted)
    return {
        t["topic"]: (
            len(t["partitions"]),
            min((len(p["replicas"]) for p in t["partitions"]), default=0),
        )
        for t in described
    }


async def group_members(settings: Settings, group: str) -> list[dict[str, str]]:
    """The members of consumer group ``group`` as Kafka lists them: each one's
    ``client_id``, ``client_host`` and ``member_id`` (none while the group is empty)."""
    async with _admin(settings) as admin:
        try:
            [response] = await admin.describe_consumer_groups([group])
        except KafkaError as exc:
            raise TopicsError(f"cannot describe consumer group {group!r}: {exc}") from None
    found = []
    for described in response.to_object()["groups"]:
        for member in described["members"]:
            found.append({key: member[key] for key in ("client_id", "client_host", "member_id")})
    return found
