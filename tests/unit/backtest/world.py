"""A recorded world for backtests without services: projects from YAML text, a history
recorded by running the bare engine over firings (each effect answered by a script), and
a chain that answers from a table (the sandbox's decisions are what is tested; the chain
is the stack's, in the integration tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from rflow.backtest.chain import Read, Simulated
from rflow.backtest.history import (
    Firing,
    History,
    RecordedCharge,
    RecordedRun,
    RecordedSend,
    RecordedStep,
    Window,
)
from rflow.budgets import charges
from rflow.codecs.records import TriggerRecord
from rflow.engine import Execute, Journal, Park, ScheduleTimer, Settle, Start, StepResult
from rflow.engine.advance import advance
from rflow.engine.events import TimerFired, WaitResolved
from rflow.engine.keys import firing_runs, workflow_version
from rflow.lang import validate_text
from rflow.lang.model import Project
from rflow.lang.reads import reads_state
from rflow.relayer import build
from rflow.triggering import group_of

T0 = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
"""A Monday."""
RELAYER = "0x00000000000000000000000000000000000000aa"
MILLI = 10**15

HEADER = f"""
networks:
  local: {{ chain_id: 31337 }}
relayers:
  payout: {{ key_env: PAYOUT_KEY, address: "{RELAYER}", networks: [local] }}
channels:
  ops: {{ type: log }}
"""


def project(body: str) -> Project:
    """A project: the local network, relayer ``payout``, channel ``ops``, then ``body``."""
    report = validate_text(HEADER + body, {"PAYOUT_KEY": "0x01"})
    assert report.ok, "\n".join(str(d) for d in report.diagnostics)
    return report.project


def firing(workflow: str, key: str, payload: dict[str, Any], at: datetime) -> Firing:
    record = TriggerRecord(
        workflow=workflow,
        trigger_key=key,
        source="manual",
        payload=payload,
        received_at=at,
    )
    return Firing(record)


Script = Callable[[Execute], tuple[Any, Any]]
"""An effect's recorded answer: ``(output, error)``."""


def sent(effect: Execute) -> tuple[Any, Any]:
    """A send mined in block 100 for 21000 gas at 1 gwei."""
    action = effect.action
    return {
        "tx": {
            "hash": "0x" + format(abs(hash(effect.key)), "064x")[-64:],
            "status": "success",
            "block": 100,
            "gas_used": 21000,
            "effective_gas_price": 10**9,
            "to": action.get("to"),
            "value": action.get("value"),
        }
    }, None


def record(
    deployed: Project,
    firings: Iterable[Firing],
    script: Script = sent,
    *,
    step: timedelta = timedelta(seconds=1),
    waits: Callable[[Park], Any] | None = None,
    spend: tuple = (),
    window: Window | None = None,
    block: int = 100,
    relayer: str = RELAYER,
) -> History:
    """What ``deployed`` really did with ``firings``: each run driven by the bare engine
    to its end, every effect answered by ``script`` (``step`` later), every wait by
    ``waits`` (none: its timeout), sends recorded as mined with their charges."""
    firings = list(firings)
    durable: dict[str, dict[str, Any]] = {}
    runs: dict[str, tuple[RecordedRun, ...]] = {}
    for fired in firings:
        workflow = deployed.workflows[fired.record.workflow]
        found = []
        for combo, rid in firing_runs(
            fired.record.workflow,
            fired.record.trigger_key,
            workflow.strategy.matrix if workflow.strategy else None,
        ):
            found.append(
                _run(deployed, fired, rid, combo, script, step, waits, durable, block, relayer)
            )
        runs[fired.gate] = tuple(found)
    span = window or Window(
        min(f.at for f in firings) - timedelta(hours=1),
        max(f.at for f in firings) + timedelta(hours=1),
    )
    return History(window=span, firings=tuple(firings), runs=runs, spend=tuple(spend))


def _run(
    deployed, fired, rid, combo, script, step, waits, durable_state, block, relayer
) -> RecordedRun:
    name = fired.record.workflow
    workflow = deployed.workflows[name]
    durable = durable_state.setdefault(name, {})
    now = fired.at
    start = Start(
        state=dict(durable) if _reads_state(workflow) else {},
        run_id=rid,
        workflow=name,
        version=workflow_version(workflow),
        trigger_key=fired.record.trigger_key,
        matrix=combo or None,
        group=group_of(workflow, fired.record.payload),
        source="manual",
        trigger=fired.record.payload,
    )
    queue: list[tuple[datetime, int, Any]] = [(now, 0, start)]
    seq = 1
    state = None
    started: dict[tuple[str, int], datetime] = {}
    steps: dict[tuple[str, int], RecordedStep] = {}
    sends: list[RecordedSend] = []
    charged: list[RecordedCharge] = []
    status = "running"
    while queue:
        queue.sort(key=lambda item: (item[0], item[1]))
        now, _, event = queue.pop(0)
        state, effects = advance(workflow, state, event, now, deployed.config)
        for effect in effects:
            if isinstance(effect, Journal):
                key = (effect.path, effect.data.get("visit", 1))
                if effect.event == "step_started":
                    started[key] = effect.at
                    steps[key] = RecordedStep(
                        effect.path, key[1], effect.data.get("kind"), "running", 1,
                        None, None, None, None, effect.at, None,
                    )  # fmt: skip
                elif effect.event == "step_settled":
                    error = effect.data.get("error") or {}
                    kind = steps[key].kind if key in steps else None
                    steps[key] = RecordedStep(
                        effect.path, key[1], kind, effect.status, effect.data.get("attempt", 1),
                        effect.data.get("input"), effect.data.get("output"), error.get("kind"),
                        error.get("message"), started.get(key, effect.at), effect.at,
                    )  # fmt: skip
                elif effect.event == "run_settled":
                    status = effect.status
            elif isinstance(effect, Execute):
                if effect.kind in ("state_set", "list_add", "list_remove"):
                    output, error = _state(durable, effect), None
                else:
                    output, error = script(effect)
                if effect.kind == "send_transaction" and error is None:
                    intent = build.intent(deployed, effect.action)
                    sends.append(
                        RecordedSend(
                            effect.key, effect.path, intent.network, intent.relayer, relayer,
                            intent.to, intent.value, "succeeded", block, 21000, 10**9, "0x01",
                        )
                    )  # fmt: skip
                    reserved, _ = charges(deployed, name, intent.shape)
                    charged += [
                        RecordedCharge(c.budget, c.asset, c.amount, "spent", effect.key)
                        for c in reserved
                    ]
                result = StepResult(
                    run_id=rid, path=effect.path, visit=effect.visit, attempt=effect.attempt,
                    output=output, error=error,
                )  # fmt: skip
                queue.append((now + step, seq, result))
            elif isinstance(effect, ScheduleTimer):
                timer = TimerFired(
                    run_id=rid, path=effect.path, visit=effect.visit, attempt=effect.attempt,
                    purpose=effect.purpose, due_at=effect.due_at,
                )  # fmt: skip
                queue.append((effect.due_at, seq, timer))
            elif isinstance(effect, Park) and waits is not None:
                answer = waits(effect)
                if answer is not None:
                    resolved = WaitResolved(
                        run_id=rid, path=effect.path, wait_id=effect.wait_id, payload=answer
                    )
                    queue.append((now + step, seq, resolved))
            elif isinstance(effect, Settle):
                status = str(effect.status)
            seq += 1
    return RecordedRun(
        run_id=rid,
        workflow=name,
        version=workflow_version(workflow),
        status=status,
        trigger_key=fired.record.trigger_key,
        matrix=combo or None,
        created_at=fired.at,
        started_at=fired.at,
        settled_at=now,
        steps=tuple(steps.values()),
        sends=tuple(sends),
        charges=tuple(charged),
    )


_READS: dict[int, tuple[Any, bool]] = {}


def _reads_state(workflow: Any) -> bool:
    """Whether ``workflow`` reads durable state, asked once per definition (as the
    runner asks once per version)."""
    found = _READS.get(id(workflow))
    if found is None or found[0] is not workflow:
        found = _READS[id(workflow)] = (workflow, reads_state(workflow))
    return found[1]


def _state(durable: dict[str, Any], effect: Execute) -> dict[str, Any]:
    """A state step as Postgres applies it (storage/workflow_state.py)."""
    action = effect.action
    if effect.kind == "state_set":
        changed = dict(action)
    else:
        current = durable.get(action["list"])
        items = list(current) if isinstance(current, list) else []
        if effect.kind == "list_add":
            items.append(action["value"])
        else:
            items = [item for item in items if item != action["value"]]
        changed = {action["list"]: items}
    durable.update(changed)
    return {"state": changed}


class Chain:
    """A chain answering from tables: every send simulates for 21000 gas (or reverts,
    when its target is in ``reverts``), reads answer ``reads[method]``; every question is
    counted."""

    def __init__(
        self,
        *,
        reverts: dict[str, str] | None = None,
        reads: dict[str, Any] | None = None,
        archive: bool = True,
        block: int = 99,
    ) -> None:
        self.reverts = reverts or {}
        self.reads = reads or {}
        self.archive = archive
        self.block = block
        self.asked: list[tuple[str, Any]] = []

    async def simulate(self, network, block, call, gas_limit) -> Simulated:
        self.asked.append(("simulate", (block, call)))
        source = "simulated" if self.archive else "latest"
        reason = self.reverts.get(call["to"].lower())
        if reason is not None:
            return Simulated(None, reason, source, block)
        return Simulated(21000, None, source, block)

    async def read(self, network, block, method, params) -> Read:
        self.asked.append(("read", (block, method, params)))
        return Read(self.reads.get(method), not self.archive)

    async def block_at(self, network, when) -> int:
        self.asked.append(("block_at", when))
        return self.block

    async def base_fee(self, network, block) -> int:
        return 10**9
