"""Circuit breakers: what the runner does when a run starts and settles, and the loop that
lets an open circuit go half_open. The state machine is :mod:`rflow.breaker`; the state
is in Postgres (``circuit_state``), so a restart does not forget a tripped circuit."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rflow import breaker
from rflow.deployment import Derived
from rflow.engine import Execute, RunStatus
from rflow.lang.envsubst import escape
from rflow.lang.model import Project, Workflow
from rflow.secrets import Secrets
from rflow.storage import circuits, controls

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)
TICK_INTERVAL = 1.0


def rule_of(workflow: Workflow) -> breaker.Rule:
    spec = workflow.circuit_breaker
    return breaker.Rule(max_failures=spec.max_failures, window=spec.window)


def guarded(project: Project | None) -> dict[str, Workflow]:
    """The workflows of ``project`` with a circuit breaker, by name."""
    return {
        name: workflow
        for name, workflow in (project.workflows.items() if project else [])
        if workflow.circuit_breaker is not None
    }


class Breakers:
    """The circuits of the current deployment's workflows."""

    def __init__(self, app: RflowApp, effects: Any) -> None:
        self.runtime = app.rflow
        self.effects = effects
        self._guarded = Derived(app.rflow.current_project, guarded)

    @property
    def guarded(self) -> dict[str, Workflow]:
        """The current deployment's workflows with a circuit breaker, by name: a deploy
        that changes a breaker's rule applies it to the next failure counted."""
        return self._guarded()

    async def admits(self, name: str, run_id: str) -> bool:
        """Whether ``run_id`` may start now (half_open admits only the probe)."""
        _, after, admitted = await self.runtime.database.run(
            lambda conn: circuits.change(conn, name, lambda c: breaker.admit(c, run_id)),
            what="circuit breaker",
        )
        if admitted and after.probe == run_id:
            log.info("run %s is the probe of workflow %s's half-open circuit", run_id, name)
        return admitted

    async def settled(self, name: str, run_id: str, status: RunStatus) -> None:
        """Count a terminal failure (tripping the circuit) or close it on the probe's success.
        Only ``failed`` counts: a run rejected by a person is a decision, not a fault."""
        workflow = self.guarded.get(name)
        if workflow is None:
            # The current deployment has no breaker on it (removed, or the workflow is).
            return
        rule, now = rule_of(workflow), datetime.now(UTC)
        if status == RunStatus.FAILED:

            def step(circuit):
                return breaker.failed(circuit, run_id, now, rule)
        elif status == RunStatus.SUCCEEDED:

            def step(circuit):
                return breaker.succeeded(circuit, run_id), False
        else:  # cancelled, superseded or rejected (a decision): never a failure

            def step(circuit):
                return breaker.let_go(circuit, run_id), False

        before, after, tripped = await self.runtime.database.run(
            lambda conn: circuits.change(conn, name, step), what="circuit breaker"
        )
        if tripped:
            await self.trip(name, workflow, after, run_id)
        elif before.state == "half_open" and after.state == "closed":
            log.info("workflow %s: the probe %s succeeded, circuit closed", name, run_id)

    async def trip(self, name: str, workflow: Workflow, circuit: breaker.Circuit, run_id: str):
        spec = workflow.circuit_breaker
        reason = (
            f"circuit breaker tripped: {spec.max_failures} failed runs within {spec.window}"
            f" (last: {run_id})"
        )
        log.warning("workflow %s: %s", name, reason)
        for action in spec.on_trip:
            if action == "pause":
                await self.runtime.database.run(
                    lambda conn: controls.pause(conn, name, by="breaker", reason=reason),
                    what="breaker pause",
                )
                if self.runtime.runner is not None:
                    self.runtime.runner.paused[name] = f"by breaker: {reason}"
            else:
                opened = max(circuit.failures).isoformat() if circuit.failures else ""
                effect = Execute(
                    run_id=run_id,
                    workflow=name,
                    path="circuit_breaker",
                    visit=1,
                    attempt=1,
                    key=f"{name}:circuit_breaker:{opened}",
                    kind="notify",
                    action={
                        "channel": action.notify.channel,
                        # Plain text, written as an effect's input is: nothing in it
                        # (a run's error, say) can name a variable to fill in.
                        "message": escape(action.notify.message or f"{name}: {reason}"),
                        "severity": "critical",
                    },
                )
                secrets = Secrets(self.runtime.env)
                try:
                    await self.effects.executors.notify(effect, secrets)
                except Exception as exc:  # an alert that cannot go out is logged, not fatal
                    log.error(
                        "workflow %s: breaker notification failed: %s",
                        name,
                        secrets.scrub(repr(exc)),
                    )

    async def tick(self) -> None:
        """Open circuits whose window passed without failure go half_open; the breaker's
        own pause is lifted (an operator's stays)."""
        now = datetime.now(UTC)
        # One read of every circuit; only an open one is changed (under its row lock, so
        # of the workers ticking at once exactly one turns it half-open).
        guarded = self.guarded
        if not guarded:
            return
        found = await self.runtime.database.run(circuits.circuits, what="circuit breakers")
        for name, workflow in guarded.items():
            if name not in found or found[name].state != "open":
                continue
            rule = rule_of(workflow)
            before, after, _ = await self.runtime.database.run(
                lambda conn, rule=rule, name=name: circuits.change(
                    conn, name, lambda c: (breaker.tick(c, now, rule), None)
                ),
                what="circuit breaker",
            )
            if before.state == "open" and after.state == "half_open":
                lifted = await self.runtime.database.run(
                    lambda conn, name=name: controls.resume_paused_by(conn, name, "breaker"),
                    what="breaker resume",
                )
                log.info(
                    "workflow %s: circuit half-open, one probe run admitted%s",
                    name,
                    "" if lifted else " (still paused by an operator)",
                )
