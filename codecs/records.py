"""The records that travel on rflow's topics.

Every record is a frozen pydantic model with a ``kind`` (which record it is) and a
``v`` (the version of that kind's shape). A reader accepts the versions it knows and
sends anything else to the dead-letter path with the reason.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rflow.codecs import json
from rflow.engine.effects import Execute, Journal, Settle
from rflow.engine.events import Event
from rflow.engine.state import ParentLink


class Record(BaseModel):
    """Base of every topic record."""

    model_config = ConfigDict(frozen=True, extra="forbid")


PROOF = Field(
    None,
    max_length=200,
    description="set by rflow's own producers: `v1:<key id>:<HMAC-SHA256>` of the record's "
    "other fields, under RFLOW_INGRESS_KEYS (see rflow.engine.provenance); an outside "
    "producer leaves it out",
)


class Vouched(Record):
    """A record that rflow's producers sign (:mod:`rflow.engine.provenance`). Version 2
    carries the ``proof``; version 1 (still read, and what an outside producer may write)
    had none."""

    @model_validator(mode="after")
    def _proof_from_version_2(self) -> Vouched:
        if self.v == 1 and self.proof is not None:  # type: ignore[attr-defined]
            raise ValueError("a version 1 record carries no proof: it is new in version 2")
        return self


def signed_content(record: Record) -> bytes:
    """What a record's proof signs: every field but the proof, as compact JSON with
    sorted keys (the same bytes for the record as produced and as decoded)."""
    return json.dumps(record.model_dump(mode="json", exclude={"proof"}))


class TriggerRecord(Vouched):
    """One firing of a workflow's trigger, as produced to the triggers topic.

    The Kafka key is ``group`` when the workflow declares a concurrency group, else
    ``trigger_key``; ``trigger_key`` is the firing's idempotency key, so a repeated
    delivery of the same firing starts no second run. A firing from rflow's chain,
    webhook or schedule ingress carries a ``proof`` (version 2).
    """

    kind: Literal["trigger"] = "trigger"
    v: Literal[1, 2] = 1
    workflow: str = Field(min_length=1, max_length=200)
    trigger_key: str = Field(min_length=1, max_length=512)
    group: str | None = Field(None, max_length=512)
    source: Literal["event", "webhook", "schedule", "manual"]
    payload: dict[str, Any] = Field(default_factory=dict)
    received_at: datetime
    proof: str | None = PROOF

    @property
    def partition_key(self) -> str:
        """The Kafka key: the concurrency group, or the run's own key without one."""
        return self.group if self.group is not None else self.trigger_key


class CallRecord(TriggerRecord):
    """The firing of a child run: a run's ``call_workflow`` step asked for it (on the
    triggers topic, keyed like any firing of the called workflow, so it is admitted, and
    deduplicated by its trigger key ``<parent run>/<step>``, as every firing is).

    Not part of the trigger record producers outside rflow write: only a worker starts
    a child run, and ``parent`` says which run and step it answers.
    """

    kind: Literal["call"] = "call"  # type: ignore[assignment]
    source: Literal["workflow"] = "workflow"  # type: ignore[assignment]
    parent: ParentLink


class TriggerRetracted(Vouched):
    """A firing withdrawn by its source (a chain reorg removed the event's block).

    Keyed like the firing it retracts; its run is cancelled if it has sent nothing, and
    the retraction is recorded on the run either way.
    """

    kind: Literal["trigger_retracted"] = "trigger_retracted"
    v: Literal[1, 2] = 1
    workflow: str = Field(min_length=1, max_length=200)
    trigger_key: str = Field(min_length=1, max_length=512)
    group: str | None = Field(None, max_length=512)
    reason: str
    retracted_at: datetime
    proof: str | None = PROOF

    @property
    def partition_key(self) -> str:
        return self.group if self.group is not None else self.trigger_key


class PauseChanged(Record):
    """An operator paused or resumed a workflow (on every partition of the triggers topic).

    Produced after the pause is stored in Postgres and before the operator is answered,
    so every firing produced after the answer comes after it on its partition: the
    worker that owns the partition reads the pauses again when it reaches this record,
    and holds those firings (or starts the held ones, on a resume, before them).
    """

    kind: Literal["pause_changed"] = "pause_changed"
    v: Literal[1] = 1
    workflow: str = Field(min_length=1, max_length=200)
    paused: bool
    at: datetime


class RetryRecord(Vouched):
    """``rflow runs retry``: continue a failed run as a new run (on the triggers topic,
    keyed like the failed run's firing, so it is admitted where that run's group lives:
    behind the group's lane, held while the workflow is paused).

    ``previous`` is the failed run's final state; the new run's id derives from it, so
    asking twice starts one run.
    """

    kind: Literal["retry"] = "retry"
    v: Literal[1, 2] = 1
    workflow: str = Field(min_length=1, max_length=200)
    run_id: str = Field(min_length=1, max_length=64)
    retry_of: str = Field(min_length=1, max_length=64)
    trigger_key: str = Field(min_length=1, max_length=512)
    group: str | None = Field(None, max_length=512)
    from_step: str | None = Field(None, max_length=200)
    previous: dict[str, Any]
    state: dict[str, Any] = Field(default_factory=dict)
    requested_at: datetime
    proof: str | None = PROOF

    @property
    def partition_key(self) -> str:
        return self.group if self.group is not None else self.trigger_key

    @property
    def gate_key(self) -> str:
        """The firing-table key of this retry: one per failed run."""
        return f"{self.workflow}:retry-of:{self.retry_of}"


DEAD_LETTER_RAW_LIMIT = 64 * 1024
"""Bytes of a record a dead letter keeps; a longer record is cut there."""


class DeadLetter(Record):
    """A record that could not be processed, with where it came from and why."""

    kind: Literal["dead_letter"] = "dead_letter"
    v: Literal[1] = 1
    topic: str
    partition: int
    offset: int
    key: str | None
    reason: str
    raw: str = Field(
        description="the record's bytes, decoded as UTF-8 with replacement, cut to 64 KiB"
    )
    failed_at: datetime


class RunEvent(Record):
    """Something that happened to a run (on the runs topic, keyed like its firing)."""

    kind: Literal["run_event"] = "run_event"
    v: Literal[1] = 1
    event: Event


class SendRequest(Record):
    """A send step for the relayer (on the sends topic, keyed ``network:relayer``).

    ``execute`` is the engine's effect, with the step's idempotency key; ``reply_key``
    is the Kafka key of the run's events, where the step's result goes back. Version 2
    carries the deadline of the step's timeout (``execute.deadline``); version 1 (still
    read) had none.
    """

    kind: Literal["send"] = "send"
    v: Literal[1, 2] = 2
    execute: Execute
    reply_key: str = Field(min_length=1, max_length=512)

    @model_validator(mode="after")
    def _deadline_from_version_2(self) -> SendRequest:
        if self.v == 1 and self.execute.deadline is not None:
            raise ValueError("a version 1 send carries no deadline: it is new in version 2")
        return self

    @property
    def partition_key(self) -> str:
        """The Kafka key: one relayer's sends on one partition, in order."""
        return f"{self.execute.action['network']}:{self.execute.action['relayer']}"


class SendControl(Record):
    """An operator's speed-up or cancel of a pending send, for the relayer that owns its
    signer (on the sends topic, keyed ``network:relayer`` like the send).

    What was asked (fees, going above the cap) and what became of it are in the request's
    row in Postgres (``send_controls``), written before this record is produced: the
    relayer carries out a request only while that row still says ``requested``.
    """

    kind: Literal["send_control"] = "send_control"
    v: Literal[1] = 1
    request_id: str = Field(min_length=1, max_length=64)
    send_key: str = Field(min_length=1, max_length=2048)
    network: str = Field(min_length=1, max_length=200)
    relayer: str = Field(min_length=1, max_length=200)
    action: Literal["speedup", "cancel"]
    requested_at: datetime

    @property
    def partition_key(self) -> str:
        """The Kafka key: the sends of the signer it controls, on their partition."""
        return f"{self.network}:{self.relayer}"


JournalEntry = Annotated[Journal | Settle, Field(discriminator="type")]


class RunJournal(Record):
    """Journal entries of a run for the read model (on the events topic, keyed by run id).

    Version 2 carries the run's entries since the last checkpoint of the worker that
    decided them, in order; version 1 (still read) carried one entry.
    """

    kind: Literal["run_journal"] = "run_journal"
    v: Literal[1, 2] = 2
    entry: JournalEntry | None = None
    entries: list[JournalEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_shape_per_version(self) -> RunJournal:
        if self.v == 1 and (self.entry is None or self.entries):
            raise ValueError("a version 1 run_journal carries exactly one entry, in 'entry'")
        if self.v == 2 and (self.entry is not None or not self.entries):
            raise ValueError("a version 2 run_journal carries its entries in 'entries'")
        runs = {entry.run_id for entry in self.journal}
        if len(runs) > 1:
            raise ValueError(f"a run_journal belongs to one run, not to {sorted(runs)}")
        return self

    @property
    def journal(self) -> list[Journal | Settle]:
        """The entries, whatever the version."""
        return [self.entry] if self.entry is not None else list(self.entries)


AnyRecord = Annotated[
    TriggerRecord
    | CallRecord
    | TriggerRetracted
    | PauseChanged
    | RetryRecord
    | RunEvent
    | RunJournal
    | SendRequest
    | SendControl
    | DeadLetter,
    Field(discriminator="kind"),
]

KNOWN_VERSIONS: dict[str, frozenset[int]] = {
    "trigger": frozenset({1, 2}),
    "call": frozenset({1, 2}),
    "trigger_retracted": frozenset({1, 2}),
    "pause_changed": frozenset({1}),
    "retry": frozenset({1, 2}),
    "run_event": frozenset({1}),
    "run_journal": frozenset({1, 2}),
    "send": frozenset({1, 2}),
    "send_control": frozenset({1}),
    "dead_letter": frozenset({1}),
}
