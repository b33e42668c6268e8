"""Who vouches for a record on the triggers topic, and what the worker believes of it.

Anyone who may write to ``rflow.triggers`` can say anything there: that a chain event
happened, that a webhook was signed, that a schedule fired. The worker believes those
claims only of records one of rflow's own ingresses produced, which prove it: a proof
(:func:`vouch`) is an HMAC-SHA256, under a key only rflow's processes hold
(``RFLOW_INGRESS_KEYS``), of the record's content in a canonical form (every field but
the proof, keys sorted, as :func:`rflow.codecs.records.signed_content` writes it). The
content, not the bytes on the wire, so that a dead letter replayed byte for byte or a
record re-encoded by another version of the codec still proves itself; the key id names
which key signed it, so that keys rotate by listing the new one first and the old one
after it until no record signed with the old one is left to read.

Pure, beside :mod:`rflow.engine.admission`: a record and the keys in, a decision out.
The runner calls :func:`judge` before admission and dead-letters what it refuses.

The rules, one function each:

- :func:`vouch`: rflow's producers sign the records only they may produce.
- :func:`proof_problem`: whether a record's proof holds, and if not why.
- :func:`judge`: a record claiming ``source: event``, ``webhook`` or ``schedule``, a
  retraction, a retry and a child run's firing (``call``) are believed only with a valid
  proof (else ``unauthenticated_source``); a vouched firing's key lies in its source's
  namespace. A
  record without a proof is an outside firing (``source: manual``): it fires only a
  workflow whose manual trigger accepts outside producers, with exactly the declared
  inputs, under a key outside rflow's namespaces (:data:`NAMESPACES`), so it never
  takes the place of a firing rflow's ingresses vouch for.
- :func:`misplaced`: a run's event on the triggers topic is refused: run events come
  from rflow's workers, on the runs topic.
- :func:`input_problem`: the inputs a manual firing carries against the declared ones
  (the same rule ``rflow run`` and the API apply).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rflow.codecs.records import CallRecord, RetryRecord, TriggerRecord, TriggerRetracted
    from rflow.lang.model import Workflow

    Vouchable = TriggerRecord | TriggerRetracted | RetryRecord | CallRecord

PROOF_VERSION = "v1"
"""The proof's own version: ``v1:<key id>:<HMAC-SHA256 in hex>``."""
_DOMAIN = b"rflow-ingress-proof/v1\n"
"""Prefixed to what is signed, so that a proof means this and nothing else."""
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MIN_SECRET = 32
"""The fewest characters a key's secret may have (`openssl rand -hex 32` gives 64)."""

NAMESPACES: Mapping[str, tuple[str, ...]] = {
    "event": ("event:", "event@"),
    "webhook": ("webhook:", "webhook@"),
    "schedule": ("schedule:", "schedule@"),
    "manual": ("manual:", "manual@"),
    "retry": ("retry-of:",),
    "workflow": (),
}
"""The key prefixes of rflow's own firings, by source: ``<kind>:``, and ``<kind>@<trigger
id>:`` for a trigger with an id of its own; ``retry-of:`` is the gate of a retry
(``<workflow>:retry-of:<run>``). The keys of vouched firings start with their source's
prefixes, and an outside firing's key starts with none of them."""
RESERVED = tuple(prefix for prefixes in NAMESPACES.values() for prefix in prefixes)
CHILD_KEY = re.compile(r"^r[0-9a-f]{24}/")
"""The key of a child run's firing, ``<parent run>/<step>``: a worker vouches for it, and
an outside firing may not take it first (its run would answer the parent)."""

SOURCES_VOUCHED_FOR = ("event", "webhook", "schedule")
"""The sources a trigger record claims only with a proof."""

Code = Literal["unauthenticated_source", "not_accepted", "invalid_input", "reserved_key"]


# --- keys -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One ingress key: its id (named in each proof it makes) and its secret."""

    id: str
    secret: bytes = b""

    def __repr__(self) -> str:
        return f"Key({self.id!r})"  # never the secret


class KeyringError(ValueError):
    """``RFLOW_INGRESS_KEYS`` is malformed; the message names the entry, never a secret."""


@dataclass(frozen=True)
class Keyring:
    """The ingress keys of this process: the first signs, every one verifies."""

    keys: tuple[Key, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Keyring:
        """``id:secret`` entries separated by commas or new lines (a file of keys has one
        per line; ``#`` starts a comment line)."""
        keys: list[Key] = []
        entries = [
            entry.strip()
            for line in text.splitlines()
            if not line.strip().startswith("#")
            for entry in line.split(",")
        ]
        for number, entry in enumerate((e for e in entries if e), start=1):
            key_id, colon, secret = entry.partition(":")
            key_id = key_id.strip()
            if not colon or not _KEY_ID.match(key_id):
                raise KeyringError(
                    f"RFLOW_INGRESS_KEYS: entry {number} is not id:secret (an id of letters, "
                    "digits, '_', '-' and '.', then ':' and the secret)"
                )
            if len(secret.strip()) < MIN_SECRET:
                raise KeyringError(
                    f"RFLOW_INGRESS_KEYS: the secret of key {key_id!r} is shorter than "
                    f"{MIN_SECRET} characters (make one with `openssl rand -hex 32`)"
                )
            if any(key.id == key_id for key in keys):
                raise KeyringError(f"RFLOW_INGRESS_KEYS: key {key_id!r} is listed twice")
            keys.append(Key(key_id, secret.strip().encode()))
        return cls(tuple(keys))

    @property
    def signer(self) -> Key | None:
        """The key new proofs are made with (the first listed), or ``None``."""
        return self.keys[0] if self.keys else None

    def get(self, key_id: str) -> Key | None:
        return next((key for key in self.keys if key.id == key_id), None)

    @property
    def ids(self) -> list[str]:
        return [key.id for key in self.keys]


# --- proofs -----------------------------------------------------------------------------


def needs_proof(record: Any) -> bool:
    """Whether only a record with a proof is believed: a trigger claiming one of
    :data:`SOURCES_VOUCHED_FOR`, a retraction, a retry."""
    if record.kind == "trigger":
        return record.source in SOURCES_VOUCHED_FOR
    return record.kind in ("trigger_retracted", "retry", "call")


def vouch(record: Vouchable, keyring: Keyring) -> Vouchable:
    """``record`` with the proof of ``keyring``'s signing key (replacing any it had).

    Raises :class:`KeyringError` without a key: nothing rflow vouches for goes out unsigned.
    """
    key = keyring.signer
    if key is None:
        raise KeyringError(
            "RFLOW_INGRESS_KEYS is not set: rflow's ingresses vouch for their firings with it "
            "(set the workers' keys here too)"
        )
    unsigned = record.model_copy(update={"proof": None, "v": 2})
    return unsigned.model_copy(update={"proof": _proof(key, unsigned)})


def proof_problem(record: Vouchable, keyring: Keyring) -> str | None:
    """Why ``record``'s proof does not hold, or ``None`` when it does."""
    proof = record.proof
    if proof is None:
        return "it carries no proof"
    version, _, rest = proof.partition(":")
    key_id, _, _ = rest.partition(":")
    if version != PROOF_VERSION or not key_id:
        return f"its proof is not a {PROOF_VERSION} proof"
    key = keyring.get(key_id)
    if key is None:
        held = ", ".join(keyring.ids) or "none"
        return f"its proof names key {key_id!r}, which this worker does not hold (it holds {held})"
    if not hmac.compare_digest(proof, _proof(key, record)):
        return f"its proof does not verify with key {key_id!r}: the record is not what was signed"
    return None


def _proof(key: Key, record: Vouchable) -> str:
    from rflow.codecs.records import signed_content  # the one canonical writer

    digest = hmac.digest(key.secret, _DOMAIN + signed_content(record), "sha256")
    return f"{PROOF_VERSION}:{key.id}:{digest.hex()}"


# --- what a workflow accepts from outside -------------------------------------------------


@dataclass(frozen=True)
class Accepts:
    """What a workflow's triggers say about firings nobody vouches for."""

    name: str
    kinds: tuple[str, ...]
    """Its trigger kinds, for the messages."""
    inputs: tuple[str, ...] | None
    """The inputs its manual trigger declares; ``None`` without a manual trigger."""
    outside: bool = True
    """Whether its manual trigger takes records outside producers write to the triggers
    topic (``manual: {outside: false}``: only ``rflow run`` and the API)."""

    @classmethod
    def of(cls, name: str, workflow: Workflow) -> Accepts:
        manual = workflow.manual
        return cls(
            name=name,
            kinds=tuple(workflow.trigger_kinds),
            inputs=tuple(manual.manual.inputs) if manual is not None else None,
            outside=manual.manual.outside if manual is not None else False,
        )


def input_problem(name: str, declared: Sequence[str], inputs: Iterable[str]) -> str | None:
    """Why ``inputs`` are not exactly the ``declared`` inputs of workflow ``name``'s
    manual trigger, or ``None``."""
    given = set(inputs)
    takes = f"it takes: {', '.join(declared)}" if declared else "it takes no inputs"
    unknown = sorted(given - set(declared))
    if unknown:
        return f"unknown input(s) {', '.join(map(repr, unknown))} for {name!r}; {takes}"
    missing = [item for item in declared if item not in given]
    if missing:
        return f"missing input(s) {', '.join(map(repr, missing))} for {name!r}; {takes}"
    return None


# --- decisions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Believed:
    """rflow's ingress vouched for the record with key ``key``."""

    key: str


@dataclass(frozen=True)
class Outside:
    """An outside producer's firing, which its workflow accepts."""


@dataclass(frozen=True)
class Refused:
    """Not admitted: dead-lettered with :attr:`reason`, counted by ``code``."""

    code: Code
    message: str

    @property
    def reason(self) -> str:
        """The dead letter's reason: the code first, then why."""
        return f"{self.code}: {self.message}"


Verdict = Believed | Outside | Refused


# --- the rules -----------------------------------------------------------------------------


def judge(record: Vouchable, keyring: Keyring, accepts: Accepts | None) -> Verdict:
    """What the worker believes of ``record`` (``accepts``: what its workflow takes from
    outside producers, ``None`` when this worker does not know the workflow)."""
    claim = _claim(record)
    if record.proof is not None or needs_proof(record):
        problem = proof_problem(record, keyring)
        if problem is not None:
            return Refused(
                "unauthenticated_source",
                f"a record claiming {claim} is believed only with the proof of rflow's "
                f"ingress, and {problem}"
                + (
                    "; an outside producer writes source 'manual', for a workflow with a "
                    "manual trigger"
                    if record.kind == "trigger" and record.proof is None
                    else ""
                ),
            )
        assert record.proof is not None
        # A vouched chain event, webhook, schedule or retraction keeps to its namespace,
        # which no outside firing may enter: nothing can take its key first. (A vouched
        # manual firing is keyed manual:<workflow>:<id> by rflow run and the API.)
        namespace = NAMESPACES[_source(record)]
        if _source(record) in SOURCES_VOUCHED_FOR and not record.trigger_key.startswith(namespace):
            return Refused(
                "reserved_key",
                f"a vouched firing from {claim} is keyed {record.trigger_key!r}, outside "
                f"its namespace ({' or '.join(map(repr, namespace))})",
            )
        return Believed(record.proof.split(":", 2)[1])
    return _outside(record, accepts)


def _outside(record: TriggerRecord, accepts: Accepts | None) -> Verdict:
    """An outside producer's firing: its key, its workflow's manual trigger, its inputs."""
    reserved = next((p for p in RESERVED if record.trigger_key.startswith(p)), None)
    if reserved is None and CHILD_KEY.match(record.trigger_key):
        reserved = record.trigger_key.split("/", 1)[0] + "/"
    if reserved is not None:
        return Refused(
            "reserved_key",
            f"trigger_key {record.trigger_key!r} starts with {reserved!r}, a namespace of "
            f"rflow's own firings ({', '.join(RESERVED)}), which only a firing "
            "rflow's ingress vouches for may use: key an outside firing in your own terms "
            "(an order id, a transfer's hash)",
        )
    if accepts is None:
        return Outside()  # an unknown workflow is the runner's to refuse
    if accepts.inputs is None:
        return Refused(
            "not_accepted",
            f"workflow {accepts.name!r} takes no firings from outside producers: it has no "
            f"manual trigger (it starts on {', '.join(accepts.kinds)})",
        )
    if not accepts.outside:
        return Refused(
            "not_accepted",
            f"workflow {accepts.name!r} takes manual runs from rflow run and the API only "
            "(its manual trigger says outside: false)",
        )
    problem = input_problem(accepts.name, accepts.inputs, record.payload)
    if problem is not None:
        return Refused("invalid_input", f"payload: {problem}")
    return Outside()


def misplaced(kind: str) -> Refused | None:
    """Why a record of ``kind`` read from the triggers topic, which outside producers may
    write, is refused there; ``None`` when it belongs."""
    if kind == "run_event":
        return Refused(
            "unauthenticated_source",
            "a run_event record on the triggers topic: a run's events come only from "
            "rflow's workers, on the runs topic",
        )
    return None


def _source(record: Vouchable) -> str:
    """The source a record speaks for (a retraction, a chain event's)."""
    if record.kind == "trigger":
        return record.source
    if record.kind == "call":
        return "workflow"
    if record.kind == "trigger_retracted":
        # A chain event's, or a child run's cancelled by its parent.
        return "workflow" if CHILD_KEY.match(record.trigger_key) else "event"
    return "retry"


def _claim(record: Vouchable) -> str:
    if record.kind == "trigger":
        return f"source {record.source!r}"
    if record.kind == "trigger_retracted":
        return "to retract a firing"
    if record.kind == "call":
        return "to start a child run"
    return "to retry a run"
