"""Workflows: paused or active, the circuit breaker, the durable state (read only),
versions with a diff between two, pause and resume."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rflow import durable_state
from rflow.console import present
from rflow.console.auth import PREFIX
from rflow.engine.keys import workflow_version
from rflow.storage import circuits, controls, runs, versions, workflow_state

if TYPE_CHECKING:
    from rflow.console.web import Console, Visit


def attach(console: Console) -> None:
    """Mount the workflows pages and the pause and resume actions."""
    control = console.control

    async def overview(conn: Any) -> tuple[Any, Any, Any]:
        return (
            await controls.paused(conn),
            await circuits.circuits(conn),
            await runs.backlog(conn),
        )

    def describe(name: str, definition: Any, paused: Any, circuit: Any, backlog: Any) -> dict:
        current = console.runtime.deployment
        by, reason = paused.get(name, (None, None))
        breaker = definition.circuit_breaker
        state = circuit.state if circuit is not None else "closed"
        return {
            "name": name,
            "trigger": ", ".join(definition.trigger_kinds),
            "version": current.versions.get(name) or workflow_version(definition),
            "paused": bool(definition.paused) or name in paused,
            "paused_by": "its definition (paused: true)" if definition.paused else by,
            "reason": reason,
            "breaker": breaker,
            "circuit": state if breaker is not None else None,
            "failures": len(circuit.failures) if circuit is not None else 0,
            "probe": circuit.probe if circuit is not None else None,
            "pending": sum(n for w, s, _, n in backlog if w == name and s == "pending"),
            "waiting": sum(n for w, s, _, n in backlog if w == name and s == "waiting"),
        }

    async def list_page(visit: Visit) -> Any:
        paused, found, backlog = await console.db(overview, "workflows")
        project = console.runtime.project
        rows = [
            describe(name, definition, paused, found.get(name), backlog)
            for name, definition in (project.workflows if project else {}).items()
        ]
        return console.render(
            visit,
            "workflows.html",
            active="workflows",
            workflows=rows,
            deployment=console.runtime.deployment,
            waiting=await console.approvals_waiting(),
        )

    async def workflow_page(visit: Visit) -> Any:
        name = visit.params["name"]
        project = console.runtime.project
        definition = project.workflows.get(name) if project else None

        async def load(conn: Any) -> tuple[Any, ...]:
            history = await versions.history(conn, name)
            state = await workflow_state.entries(conn, name)
            return (*await overview(conn), history, state)

        paused, found, backlog, history, state = await console.db(load, "workflow")
        if definition is None and not history:
            return console.render(
                visit,
                "missing.html",
                status=404,
                active="workflows",
                what=f"There is no workflow {name!r}.",
                waiting=await console.approvals_waiting(),
            )
        known = [row["version"] for row in history]
        old = visit.query.get("a") or (known[1] if len(known) > 1 else None)
        new = visit.query.get("b") or (known[0] if known else None)
        problems = [f"{v!r} is not a version of {name}" for v in (old, new) if v and v not in known]
        lines: list[Any] = []
        if old in known and new in known:
            stored = await console.db(
                lambda conn: _definitions(conn, [old, new]), "workflow versions"
            )
            lines = present.diff(
                present.definition_text(stored[old]), present.definition_text(stored[new])
            )
        return console.render(
            visit,
            "workflow.html",
            active="workflows",
            workflow=(
                describe(name, definition, paused, found.get(name), backlog)
                if definition is not None
                else None
            ),
            name=name,
            history=history,
            old=old,
            new=new,
            diff=lines,
            problems=problems,
            state=[
                {
                    "key": entry.key,
                    "type": durable_state.describe(entry.value),
                    "value": present.pretty(present.redact(entry.value, entry.key)),
                    "updated_at": entry.updated_at,
                }
                for entry in state
            ],
            waiting=await console.approvals_waiting(),
        )

    async def pause(visit: Visit) -> Any:
        name = visit.params["name"]
        reason = visit.text("reason") or f"paused by {visit.principal.name} from the console"
        return await console.act(
            visit,
            lambda: control.pause(name, reason, visit.principal.name),
            lambda _: f"Paused {name}: its new firings are held until it is resumed.",
            to=visit.text("next") or f"{PREFIX}/workflows",
        )

    async def resume(visit: Visit) -> Any:
        name = visit.params["name"]
        return await console.act(
            visit,
            lambda: control.resume(name),
            lambda _: f"Resumed {name}: the firings held meanwhile start in order.",
            to=visit.text("next") or f"{PREFIX}/workflows",
        )

    console.route("/workflows", get=list_page, needs="runs.read")
    console.route("/workflows/{name}", get=workflow_page, needs="runs.read")
    console.route("/workflows/{name}/pause", post=pause, needs="workflows.pause")
    console.route("/workflows/{name}/resume", post=resume, needs="workflows.pause")


async def _definitions(conn: Any, wanted: list[str]) -> dict[str, Any]:
    found = {}
    for version in wanted:
        stored = await versions.definition(conn, version)
        found[version] = stored[1] if stored else None
    return found
