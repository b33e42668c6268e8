"""The report of a backtest, as ``rflow backtest --json`` prints it and the ``backtests``
table keeps it for the console.

A versioned model like the topic records: ``kind`` and ``v`` say what it is, a reader
refuses a version it does not know. Amounts (wei and raw token units) are exact
integers in memory and decimal strings in JSON, so a CI job or a browser never rounds
one through a float.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from rflow.codecs import json


def _exact(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("an amount is an integer, not a boolean")
    if isinstance(value, str):
        return int(value, 10)
    return int(value)


Amount = Annotated[
    int, BeforeValidator(_exact), PlainSerializer(str, return_type=str, when_used="json")
]
"""An exact integer amount, written as its decimal digits."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


MarkKind = Literal[
    "unrecorded",
    "latest",
    "assumed",
    "no_answer",
    "live",
    "state",
    "not_simulated",
    "unknown_sender",
    "reconstructed",
    "drift",
]
"""What a backtest could not reproduce exactly, or reproduced another way:

- ``unrecorded``: a step's request (an HTTP call, a notification, a command, a query the
  sandbox may not send) was not made by the original run, so it has no answer; the run
  stops there and is compared up to that point.
- ``latest``: a read, query or send simulation ran at the chain's latest block, because
  the node keeps no state at the firing's block (not an archive node).
- ``assumed``: a wait or approval the original run never answered took ``--assume``.
- ``no_answer``: such a wait had no recorded answer and no ``--assume``: its timeout applies.
- ``live``: ``--live-http`` sent the GET for real.
- ``state``: the workflow reads durable state, and state from before the window is not
  kept: it starts from what the window's own runs wrote.
- ``not_simulated``: an effect the sandbox has no simulation for; the run stops there.
- ``unknown_sender``: a send was simulated without its relayer's address (none declared,
  none recorded, no key at hand).
- ``reconstructed``: the firing's record has left the triggers topic; it was rebuilt from
  the read model's row of its run.
- ``drift``: the deployed version's replay does not match what the run really did (it
  ran an older version, or something outside the definition changed).
"""


class Mark(_Model):
    """One thing a run's replay could not reproduce exactly."""

    kind: MarkKind
    side: Literal["deployed", "candidate", "both"] = "both"
    path: str | None = None
    text: str


class Charge(_Model):
    """What a send charged one budget."""

    budget: str
    asset: str
    amount: Amount


class Send(_Model):
    """A send one version's run made (or tried to make)."""

    path: str
    network: str
    relayer: str
    to: str
    """The transaction's target: the recipient of native value, or the contract called."""
    value: Amount
    contract: str | None = None
    function: str | None = None
    recipient: str | None = None
    """Who an ERC20 transfer, transferFrom or approve names (its amount is ``token_amount``)."""
    token_amount: Amount | None = None
    data_digest: str | None = None
    """A digest of the call data: equal for the same call."""
    outcome: Literal["sent", "reverted", "failed", "refused"]
    """``sent``: it would be broadcast and mined; ``reverted``: mined and reverted (value
    refunded, gas paid); ``failed``: broadcast and never mined (dropped or expired, as
    the original run's was); ``refused``: stopped before anything was signed."""
    error_kind: str | None = None
    error: str | None = None
    gas_used: int | None = None
    gas_cost: Amount | None = None
    charges: list[Charge] = Field(default_factory=list)
    source: Literal["recorded", "simulated", "fork", "latest", "rules"]
    """``recorded``: the original run made the same send, and the chain's answer is reused;
    ``simulated``: ``eth_call`` and ``eth_estimateGas`` at the firing's block; ``fork``: the
    same on an anvil fork of ``--fork-url``; ``latest``: simulated at the latest block;
    ``rules``: refused by permissions or budgets before the chain was asked."""
    block: int | None = None
    at: datetime


class Step(_Model):
    """A step one version's run took."""

    path: str
    kind: str | None = None
    status: str
    error_kind: str | None = None
    error: str | None = None


class Side(_Model):
    """What one version did with one firing's run."""

    status: str
    """A run status, or ``not_started`` (skipped, superseded, pending, held, absent from
    the project) or ``incomplete`` (stopped at a step it could not reproduce)."""
    reason: str | None = None
    error_kind: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    """When it would start (simulated time: a rate limit or a lane can hold it back)."""
    waited: list[str] = Field(default_factory=list)
    """What it waited for before it started (a lane, a rate limit, a probe, a pause)."""
    steps: list[Step] = Field(default_factory=list)
    sends: list[Send] = Field(default_factory=list)


class StepChange(_Model):
    """A step taken by one version only, or with another outcome."""

    path: str
    old: Step | None = None
    new: Step | None = None


class SendChange(_Model):
    """A send added, removed or changed by the candidate."""

    change: Literal["added", "removed", "changed"]
    path: str
    old: Send | None = None
    new: Send | None = None
    what: list[str] = Field(default_factory=list)
    """For a change: which of ``to``, ``value``, ``recipient``, ``token_amount``,
    ``contract``, ``function``, ``data``, ``outcome`` differ."""


class RunDiff(_Model):
    """One firing's run, where the candidate does something else."""

    run_id: str
    workflow: str
    trigger_key: str
    fired_at: datetime
    origin: Literal["topic", "read_model"]
    old: Side
    new: Side
    start: Literal["would_start", "would_not_start"] | None = None
    """``would_not_start``: the deployed version started it, the candidate would not;
    ``would_start``: the other way round."""
    failure: Literal["appears", "disappears", "changes"] | None = None
    delay: float | None = None
    """Seconds the candidate's run starts later than the deployed version's (earlier
    when negative), when both start but not at the same time."""
    steps: list[StepChange] = Field(default_factory=list)
    sends: list[SendChange] = Field(default_factory=list)
    money: bool = False
    """Whether money moves differently: a send added, removed or changed."""
    marks: list[Mark] = Field(default_factory=list)


class Drift(_Model):
    """A run whose replay with the deployed version differs from what it really did."""

    run_id: str
    workflow: str
    text: str


class WorkflowSummary(_Model):
    """One workflow over the window, deployed → candidate."""

    workflow: str
    firings: int
    differing: int
    started: tuple[int, int]
    failed: tuple[int, int]
    sends: tuple[int, int]
    """Sends that would go out (``sent`` or ``reverted``)."""
    refused: tuple[int, int]
    added: int = 0
    removed: int = 0
    changed: int = 0


class SpendRow(_Model):
    """What one budget's cap would count over the window's sends, deployed → candidate."""

    budget: str
    asset: str
    old: Amount
    new: Amount


class MovedRow(_Model):
    """What would leave one relayer on one network, deployed → candidate (every send,
    whether a budget counts it or not): native value, a token, or gas."""

    network: str
    relayer: str
    asset: str
    """``native``, a token contract's name (raw units), or ``gas`` (wei paid)."""
    old: Amount
    new: Amount


Outcome = Literal["same", "different", "failed"]


class BacktestReport(_Model):
    """Everything one backtest found."""

    kind: Literal["backtest_report"] = "backtest_report"
    v: Literal[1] = 1
    candidate: str
    """The project folder given to ``rflow backtest``."""
    digest: str | None = None
    """The digest of the candidate's source (the one ``rflow deploy`` would store)."""
    deployment: int | None = None
    """The deployment it was compared with."""
    started_at: datetime
    finished_at: datetime
    window_from: datetime
    window_to: datetime
    workflows: list[str] = Field(default_factory=list)
    options: dict[str, Any] = Field(default_factory=dict)
    outcome: Outcome
    reason: str | None = None
    """Why the backtest could not run (``outcome: failed``)."""
    firings: int = 0
    from_topic: int = 0
    from_read_model: int = 0
    money_moves: bool = False
    summary: list[WorkflowSummary] = Field(default_factory=list)
    spend: list[SpendRow] = Field(default_factory=list)
    moved: list[MovedRow] = Field(default_factory=list)
    runs: list[RunDiff] = Field(default_factory=list)
    marks: dict[str, int] = Field(default_factory=dict)
    """How many times each mark was set, over every run of both versions."""
    drift: list[Drift] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def exit_status(self) -> int:
        """0: no difference; 1: differences; 2: the backtest could not run."""
        return {"same": 0, "different": 1, "failed": 2}[self.outcome]

    def document(self) -> dict[str, Any]:
        """The report as JSON data (amounts as decimal strings)."""
        return self.model_dump(mode="json")

    def encode(self) -> bytes:
        """The report as JSON bytes."""
        return json.dumps(self.document())


def decode_report(document: Any) -> BacktestReport:
    """A stored or printed report read back (a ``ValueError`` names what is wrong)."""
    if isinstance(document, bytes | str):
        document = json.loads(document)
    return BacktestReport.model_validate(document)
