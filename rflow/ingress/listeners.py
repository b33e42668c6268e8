"""The event triggers of one network, ready to query and match logs.

A :class:`Listener` is one event trigger of a workflow: where to ask for logs
(address, topics with the indexed-argument filters), how to decode and filter what
comes back, and the payload and trigger key of each match (see
:mod:`rflow.triggering`). Building listeners reads ABI files; matching is pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_utils import to_checksum_address

from rflow.ingress.blocks import BlockRef
from rflow.ingress.logs import EventAbi, LogDecodeError, decode_log, filter_topic, find_events
from rflow.ingress.logs import matches as value_matches
from rflow.lang import Project, Workflow, project_files
from rflow.lang.model.triggers import EventSpec, key_prefix


class ListenerError(ValueError):
    """An event trigger that cannot be followed (no ABI, unknown event); says which."""


@dataclass(frozen=True)
class Listener:
    """One workflow's event trigger on one network."""

    workflow_name: str
    workflow: Workflow = field(repr=False)
    network: str
    chain_id: int
    contract: str
    address: str | None
    """Checksummed emitter address; ``None`` matches every emitter on the network."""
    events: tuple[EventAbi, ...]
    """The event (its overloads, if the ABI has several of that name)."""
    confirmations: int
    topic_filters: tuple[tuple[str, ...] | None, ...] = ()
    """Topics 1..3 to require (``None``: any); from indexed-argument filters."""
    value_filters: Mapping[str, Any] = field(default_factory=dict)
    """Argument name -> required value, checked after decoding."""
    wait_step: str | None = None
    """For a ``wait_for: { event }`` step: its id. Such a listener resumes parked runs
    instead of firing; each wait's own (rendered) filter is checked against the args."""
    trigger_id: str = "event"
    """Which of the workflow's triggers it is: its trigger keys begin with
    ``event@<id>`` unless the id is ``event``."""

    @property
    def query(self) -> dict[str, Any]:
        """The ``eth_getLogs`` filter, without the block selection."""
        topics: list[Any] = [sorted({e.topic0 for e in self.events})]
        topics.extend(list(t) if t is not None else None for t in self.topic_filters)
        while topics and topics[-1] is None:
            topics.pop()
        query: dict[str, Any] = {"topics": topics}
        if self.address is not None:
            query["address"] = self.address
        return query

    def match(self, entry: Mapping[str, Any]) -> dict[str, Any] | None:
        """The decoded arguments if log ``entry`` fires this trigger, else ``None``.

        Raises :class:`~rflow.ingress.logs.LogDecodeError` for a log that claims to be
        the event (right emitter and signature) but does not decode.
        """
        if (
            self.address is not None
            and str(entry.get("address", "")).lower() != self.address.lower()
        ):
            return None
        topics = entry.get("topics") or []
        if not topics or not isinstance(topics[0], str):
            return None
        event = next((e for e in self.events if e.topic0 == topics[0].lower()), None)
        if event is None:
            return None
        args = decode_log(event, entry)
        for position, wanted in enumerate(self.topic_filters, start=1):
            if wanted is not None and (
                len(topics) <= position or str(topics[position]).lower() not in wanted
            ):
                return None
        params = {p.name: p for p in event.inputs}
        for name, wanted in self.value_filters.items():
            param = params.get(name)
            if param is None or not value_matches(param, args.get(name), wanted):
                return None
        return args

    def firing(
        self, entry: Mapping[str, Any], args: dict[str, Any], block: BlockRef
    ) -> tuple[str, dict[str, Any]]:
        """The trigger key and payload of a matched log (shape of :mod:`rflow.triggering`)."""
        try:
            log_index = int(entry["logIndex"], 16)
            tx_index = int(entry["transactionIndex"], 16)
            tx_hash = str(entry["transactionHash"]).lower()
            emitter = to_checksum_address(entry["address"])
        except (KeyError, TypeError, ValueError) as exc:
            raise LogDecodeError(f"the log lacks its position fields: {exc!r}") from None
        key = f"{key_prefix('event', self.trigger_id)}:{self.chain_id}:{block.hash}:{log_index}"
        payload = {
            "network": self.network,
            "chain_id": self.chain_id,
            "contract": self.contract,
            "address": emitter,
            "event": self.events[0].name,
            "args": args,
            "block": {"number": block.number, "hash": block.hash, "timestamp": block.timestamp},
            "tx": {"hash": tx_hash, "index": tx_index},
            "log_index": log_index,
        }
        return key, payload


def listeners_for(
    project: Project, network: str, *, abi_dirs: Sequence[Path] = ()
) -> tuple[list[Listener], list[str]]:
    """Every event trigger of ``project`` on ``network``, and why any cannot be followed.

    A trigger that cannot be followed (validation normally catches these first) is
    left out with a message naming its workflow; the others are unaffected.
    """
    declared = project.networks.get(network)
    if declared is None:
        return [], [f"network {network!r} is not declared"]
    abis: dict[str, list[Any]] = {}
    found: list[Listener] = []
    problems: list[str] = []
    for name, workflow, wait_step, spec, trigger_id in _event_specs(project, network):
        where = f"workflow {name!r}: event {spec.contract}.{spec.name} on {network}"
        try:
            contract = project.contracts.get(spec.contract)
            if contract is None:
                raise ListenerError(f"contract {spec.contract!r} is not declared")
            if spec.contract not in abis:
                abis[spec.contract] = load_abi(spec.contract, contract.abi, abi_dirs)
            events = find_events(abis[spec.contract], spec.name)
            if not events:
                raise ListenerError(f"the ABI has no (non-anonymous) event {spec.name}")
            # A wait's filter may hold expressions, rendered per run when it parks: its
            # listener fetches every such event and each wait checks its own filter.
            topic_filters, value_filters = (
                ((), {}) if wait_step else _split_filters(events, spec.filter)
            )
        except (ListenerError, ValueError) as exc:
            problems.append(f"{where}: {exc}")
            continue
        address = contract.address.get(network)
        found.append(
            Listener(
                workflow_name=name,
                workflow=workflow,
                network=network,
                chain_id=declared.chain_id,
                contract=spec.contract,
                address=to_checksum_address(address) if address else None,
                events=tuple(events),
                confirmations=(
                    spec.confirmations if spec.confirmations is not None else declared.confirmations
                ),
                topic_filters=topic_filters,
                value_filters=value_filters,
                wait_step=wait_step,
                trigger_id=trigger_id,
            )
        )
    return found, problems


def _event_specs(
    project: Project, network: str
) -> list[tuple[str, Workflow, str | None, EventSpec, str]]:
    """Every event trigger (with its id) and every ``wait_for: { event }`` step on
    ``network``."""
    found: list[tuple[str, Workflow, str | None, EventSpec, str]] = []
    for name, workflow in project.workflows.items():
        for trigger_id, trigger in workflow.triggers_of("event"):
            if trigger.event.network == network:
                found.append((name, workflow, None, trigger.event, trigger_id))
        for step in workflow.all_steps():
            if (
                step.kind == "wait_for"
                and step.wait_for.event is not None
                and step.wait_for.event.network == network
            ):
                found.append((name, workflow, step.id, step.wait_for.event, "event"))
    return found


def following(project: Project, network: str) -> tuple[Any, ...]:
    """Everything the listeners on ``network`` are built from: the network, the event
    triggers and waits on it (with their workflows), and their contracts. Two projects
    with equal answers listen to ``network`` alike."""
    specs = _event_specs(project, network)
    contracts = sorted({spec.contract for _, _, _, spec, _ in specs})
    return (
        project.networks.get(network),
        tuple(specs),
        tuple((name, project.contracts.get(name)) for name in contracts),
    )


def event_networks(project: Project) -> list[str]:
    """The networks some workflow listens to (event triggers and event waits), in order."""
    return sorted({network for network in project.networks if _event_specs(project, network)})


def _split_filters(
    events: Sequence[EventAbi], wanted: Mapping[str, Any]
) -> tuple[tuple[tuple[str, ...] | None, ...], dict[str, Any]]:
    """Indexed filters become topics (asked of the node); the rest are checked locally."""
    if len(events) > 1:
        # Overloads place arguments differently: filter every argument after decoding.
        return (), dict(wanted)
    indexed = events[0].indexed
    topics: list[tuple[str, ...] | None] = [None] * len(indexed)
    local: dict[str, Any] = {}
    for name, value in wanted.items():
        position = next((i for i, p in enumerate(indexed) if p.name == name), None)
        if position is None:
            local[name] = value
            continue
        try:
            topic = filter_topic(indexed[position], value)
        except ValueError as exc:
            raise ListenerError(f"filter {name}: {exc}") from None
        if topic is None:
            raise ListenerError(
                f"filter {name}: an indexed {indexed[position].type} is stored hashed "
                "and cannot be compared"
            )
        topics[position] = (topic,)
    return tuple(topics), local


def load_abi(contract: str, abi: str | list[Any] | None, dirs: Sequence[Path]) -> list[Any]:
    """The ABI entries of ``contract``: inline, or read from its file.

    A relative file name is looked up in ``dirs`` (the folders of the project's YAML
    files; the first that has it wins). The file holds a bare ABI list or a build
    artifact with an ``abi`` key.
    """
    if isinstance(abi, list):
        return abi
    if abi is None:
        raise ListenerError(f"contract {contract!r} has no abi: event triggers need it")
    path = Path(abi)
    candidates = [path] if path.is_absolute() else [d / path for d in dirs] or [path]
    file = next((c for c in candidates if c.is_file()), None)
    if file is None:
        tried = ", ".join(str(c) for c in candidates)
        raise ListenerError(f"contract {contract!r}: ABI file {abi!r} not found (tried {tried})")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ListenerError(f"contract {contract!r}: cannot read ABI file {file}: {exc}") from None
    if isinstance(data, dict):
        data = data.get("abi")
    if not isinstance(data, list):
        raise ListenerError(f"contract {contract!r}: {file} holds no ABI list")
    return data


def abi_dirs(project_path: Path | None) -> list[Path]:
    """Where relative ABI file names of a project at ``project_path`` are looked up."""
    if project_path is None:
        return [Path.cwd()]
    root = Path(project_path)
    if root.is_file():
        return [root.parent]
    dirs = [root]
    for file in project_files(root) if root.is_dir() else ():
        if file.parent not in dirs:
            dirs.append(file.parent)
    return dirs
