"""The worker's HTTP API: runs, approvals, workflows, schedules, budgets, pending sends and
the audit trail, behind bearer tokens.

Every route but the webhooks (which authenticate their own way) and the health checks
needs ``Authorization: Bearer <token>``, the token of a principal: ``operator``'s
(``RFLOW_API_TOKEN``) or one the project declares under ``principals``. A worker with no
token at all refuses them all. Every route names the action it needs (:data:`ROUTES`);
the authenticator asks :mod:`rflow.authz` through the gate before the route runs, so a
principal without it gets 403 naming the action and the principal, and nothing happens;
an action carried out is written to the audit trail with how it ended. An answer to an
approval is recorded as the principal the token authenticated. Errors are JSON objects
with an ``error`` that says why. The routes are described by ``schemas/openapi.json``,
served at ``/api/openapi.json``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from faust.web import Request, Response, View

from rflow import approvals, authz, durable_state, workers
from rflow import schedules as schedule_view
from rflow.audit import document as audit_document
from rflow.audit import since_of
from rflow.authz import Principal
from rflow.codecs import json
from rflow.codecs.json import JSONDecodeError
from rflow.codecs.tables import write_run_entry, write_settled_entry
from rflow.engine import RunStatus
from rflow.engine.keys import workflow_version
from rflow.lang.units import UnitError, parse_amount
from rflow.principals import Principals
from rflow.schedules import ScheduleError
from rflow.storage import (
    InvalidValue,
    StorageError,
    audit,
    budgets,
    controls,
    deployments,
    runs,
    sends,
    versions,
    waits,
)
from rflow.streams.control import Control, ControlError
from rflow.streams.gate import Forbidden, Gate, target_of
from rflow.streams.producer import ProduceError
from rflow.streams.send_actions import deferral_document

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

OPENAPI = Path(__file__).resolve().parent.parent / "schemas" / "openapi.json"
PUBLIC = frozenset({"/healthz", "/rflow/ready/"})
"""Health checks: answered without a token (a load balancer has none)."""

MAX_BODY = 64 * 1024
RUN_STATUSES = frozenset(status.value for status in RunStatus)
SOURCES = ("event", "webhook", "schedule", "manual", "workflow")
"""Where a firing comes from (``TriggerRecord.source``; ``workflow``: a parent run's call)."""
PRINCIPAL = "rflow.principal"
"""Where the authenticator leaves the request's principal (a :class:`Principal`)."""
ARGS = "rflow.args"
"""Where a route leaves the fields of its request, for the audit trail."""

ROUTES: dict[str, dict[str, str]] = {
    "/metrics": {"GET": "metrics.read"},
    "/api/openapi.json": {"GET": "runs.read"},
    "/api/runs": {"GET": "runs.read"},
    "/api/runs/{run_id}": {"GET": "runs.read"},
    "/api/runs/{run_id}/cancel": {"POST": "runs.cancel"},
    "/api/runs/{run_id}/retry": {"POST": "runs.retry"},
    "/api/runs/{run_id}/approve": {"POST": "approvals.answer"},
    "/api/runs/{run_id}/reject": {"POST": "approvals.answer"},
    "/api/runs/{run_id}/signals/{name}": {"POST": "runs.signal"},
    "/api/approvals": {"GET": "runs.read"},
    "/api/workflows": {"GET": "runs.read"},
    "/api/workflows/{name}/runs": {"POST": "runs.run"},
    "/api/workflows/{name}/state": {"GET": "state.read"},
    "/api/workflows/{workflow}/pause": {"POST": "workflows.pause"},
    "/api/workflows/{workflow}/resume": {"POST": "workflows.pause"},
    "/api/schedules": {"GET": "runs.read"},
    "/api/schedules/{workflow}/{trigger}/disable": {"POST": "schedules.toggle"},
    "/api/schedules/{workflow}/{trigger}/enable": {"POST": "schedules.toggle"},
    "/api/budgets": {"GET": "runs.read"},
    "/api/sends": {"GET": "runs.read"},
    "/api/sends/{send_id}/speedup": {"POST": "sends.speedup"},
    "/api/sends/{send_id}/cancel": {"POST": "sends.cancel"},
    "/api/audit": {"GET": "audit.read"},
    "/rflow/triggers/{key}/": {"GET": "runs.read"},
}
"""Each route of the API (as its path is declared) -> method -> the action it needs. A
route the table does not list (Faust's own pages) needs ``runs.read`` to be read, and is
refused any other method."""


def route_action(canonical: str, method: str) -> str | None:
    """The action ``method`` on route ``canonical`` needs; ``None``: no action is named."""
    methods = ROUTES.get(canonical)
    if methods is not None and method in methods:
        return methods[method]
    if method in ("GET", "HEAD"):
        return "runs.read"
    return None


def error(
    status: int, message: str, headers: dict[str, str] | None = None, **details: Any
) -> web.Response:
    return web.Response(
        body=json.dumps({"error": message, **details}),
        status=status,
        content_type="application/json",
        headers=headers or None,
    )


@web.middleware
async def json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """aiohttp's own refusals (no such route, a method it does not take) in JSON too, as
    every other error of the worker's HTTP endpoints."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        return error(exc.status, f"{exc.reason}: {request.method} {request.path}", headers)


def authenticator(
    current: Callable[[], Principals], public: Callable[[str], bool], gate: Callable[[], Gate]
) -> Any:
    """The aiohttp middleware that asks every non-public route for the bearer token of one
    of the ``current`` principals (the current deployment's), leaves the principal it
    names on the request (``request[PRINCIPAL]``), and lets the request through only if
    the principal may take the route's action (:data:`ROUTES`), writing the outcome of an
    action to the audit trail."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
        if public(request.path):
            return await handler(request)
        principals = current()
        challenge = {"WWW-Authenticate": 'Bearer realm="rflow"'}
        if not principals:
            return error(
                401,
                "this worker has no API token: set RFLOW_API_TOKEN, or the token of a "
                "principal the project declares",
                challenge,
            )
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return error(401, "missing bearer token (Authorization: Bearer ...)", challenge)
        principal = principals.principal(given.strip())
        if principal is None:
            return error(401, "wrong bearer token", challenge)
        request[PRINCIPAL] = principal
        info = request.match_info
        if info.http_exception is not None:  # no such route, or not this method
            return await handler(request)
        canonical = info.route.resource.canonical if info.route.resource else request.path
        action = route_action(canonical, request.method)
        target = target_of(dict(info))
        if action is None:
            return error(
                403,
                f"forbidden: {request.method} {canonical} names no action, so nobody may take it",
                principal=principal.name,
            )
        doors = gate()
        try:
            await doors.check(principal, action, target, via="api")
        except Forbidden as exc:
            return error(exc.status, str(exc), **exc.details)
        response = await handler(request)
        # A 403 is a refusal, recorded where it was decided (a retry's resends, an
        # approval's approvers).
        if request.method not in ("GET", "HEAD") and response.status != 403:
            await doors.done(
                principal,
                action,
                target,
                via="api",
                args={**dict(info), **request.get(ARGS, {})},
                error=_error_of(response),
            )
        return response

    return authenticate


def _error_of(response: web.StreamResponse) -> str | None:
    """The ``error`` of a refusal (status 400 and above), for the audit trail."""
    if response.status < 400:
        return None
    body = getattr(response, "body", None)
    try:
        said = json.loads(bytes(body)).get("error") if body else None
    except (JSONDecodeError, TypeError, ValueError, AttributeError):
        said = None
    return f"{response.status}: {said or response.reason}"


def attach(app: RflowApp, control: Control) -> None:
    """Mount the API routes on ``app``'s web server."""
    runtime = app.rflow
    database = runtime.database
    assert database is not None, "attach the database before the API"

    def body(value: Any, status: int = 200) -> Response:
        return web.Response(body=json.dumps(value), status=status, content_type="application/json")

    async def answer(work: Callable[[], Awaitable[Any]]) -> Response:
        try:
            return body(await work())
        except ControlError as exc:
            return error(exc.status, str(exc), **exc.details)
        except ScheduleError as exc:
            return error(exc.status, str(exc))
        except ProduceError as exc:
            return error(503, str(exc))
        except InvalidValue as exc:
            return error(400, f"a value in the request cannot be stored or looked up: {exc}")
        except StorageError as exc:
            return error(503, f"the database is unavailable: {exc}")

    async def read(request: Request) -> dict[str, Any]:
        raw = await request.content.read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            raise ControlError(f"the body is over {MAX_BODY} bytes", 413)
        if not raw.strip():
            return {}
        try:
            value = json.loads(raw)
        except JSONDecodeError as exc:
            raise ControlError(f"the body is not JSON: {exc}", 400) from None
        if not isinstance(value, dict):
            raise ControlError("the body must be a JSON object", 400)
        request[ARGS] = value
        return value

    def text(fields: dict[str, Any], name: str, default: str | None = None) -> str | None:
        value = fields.get(name, default)
        if value is not None and not isinstance(value, str):
            raise ControlError(f"{name!r} must be a string", 400)
        return value

    def db(work: Callable[[Any], Awaitable[Any]], what: str) -> Awaitable[Any]:
        return database.run(work, what=what)

    def deployment() -> dict[str, Any]:
        if runtime.deployments is not None:
            return runtime.deployments.status()
        return {"id": runtime.deployment.id, "failed": None}

    @app.page("/healthz", name="rflow.healthz")
    async def healthz(self: View, request: Request) -> Response:
        """200 while the worker runs; ``ready`` says whether it holds its partitions,
        ``deployment`` which deployment it runs (and the newest that failed to load)."""
        recovered = app.tables.recovery.completed.is_set()
        ready = recovered and not app.rebalancing and not app.in_recovery
        return self.json({"status": "ok", "ready": ready, "deployment": deployment()})

    @app.page("/metrics", name="rflow.metrics")
    async def metrics(self: View, request: Request) -> Response:
        """Prometheus metrics of this worker (text exposition format)."""
        return web.Response(
            body=runtime.metrics.render(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    @app.page("/api/openapi.json", name="rflow.openapi")
    async def openapi(self: View, request: Request) -> Response:
        """The API's OpenAPI document."""
        return self.bytes(OPENAPI.read_bytes(), content_type="application/json")

    @app.page("/api/runs", name="rflow.api.runs")
    async def list_runs(self: View, request: Request) -> Response:
        """The newest runs: ?workflow=W&status=S&source=S&failed=true&limit=N
        (``failed=true``: the dead-lettered runs only)."""

        async def work() -> dict[str, Any]:
            query = request.query
            status = query.get("status")
            dead = query.get("failed", "").lower() in ("1", "true", "yes")
            if status is not None and status not in RUN_STATUSES:
                known = ", ".join(sorted(RUN_STATUSES))
                raise ControlError(f"unknown status {status!r}: one of {known}", 400)
            limit = limit_of(query)
            source = query.get("source")
            if source is not None and source not in SOURCES:
                raise ControlError(f"unknown source {source!r}: one of {', '.join(SOURCES)}", 400)
            workflow = query.get("workflow")
            rows = await db(
                lambda conn: runs.list_runs(
                    conn, workflow=workflow, status=status, source=source, dead=dead, limit=limit
                ),
                "runs",
            )
            if (
                not rows
                and workflow is not None
                and not await db(lambda conn: versions.known(conn, workflow), "workflows")
            ):
                raise ControlError(
                    f"no workflow {workflow!r}: none is deployed under that name, and none "
                    "has runs",
                    404,
                )
            return {"runs": rows}

        return await answer(work)

    @app.page("/api/runs/{run_id}", name="rflow.api.run")
    async def show_run(self: View, request: Request, run_id: str) -> Response:
        """One run: its journal step by step, its budget charges and, when this worker
        holds its partition, its live state."""

        async def work() -> dict[str, Any]:
            async def load(conn: Any) -> dict[str, Any] | None:
                run = await runs.get_run(conn, run_id)
                if run is not None:
                    run["charges"] = await budgets.run_charges(conn, run_id)
                    run["sends"] = await sends.of_run(conn, run_id)
                    run["deferred_sends"] = [
                        deferral_document(d) for d in await sends.deferrals(conn, run_id=run_id)
                    ]
                return run

            run = await db(load, "run")
            stored = runtime.tables.runs.get(run_id)
            live = json.loads(write_run_entry(stored)) if stored is not None else None
            if live is None and (settled := runtime.tables.settled.get(run_id)) is not None:
                live = write_settled_entry(settled)
            if run is None and live is None:
                raise ControlError(f"no run {run_id}", 404)
            found = {**(run or {"run_id": run_id}), "live": live}
            if live is None and run is not None and run.get("settled_at") is None:
                found["owner"] = await owner_of(run)  # another worker holds it
            # A resume URL answers a wait: shown to whoever may answer.
            if authz.decide(request[PRINCIPAL], "approvals.answer"):
                found["webhook_waits"] = await control.resume_urls(
                    run_id, runtime.settings.base_url
                )
            else:
                found["webhook_waits"] = None
            return found

        return await answer(work)

    async def owner_of(run: dict[str, Any]) -> dict[str, Any]:
        """The worker that owns the run's partition of ``rflow.runs``, as the workers
        report it (``worker`` is ``None`` when none has reported owning it)."""
        topic = runtime.catalog.full_name("rflow.runs")
        count = runtime.catalog.spec("rflow.runs").partitions
        partition = workers.partition_of(workers.run_key(run), count)
        reports = await db(deployments.workers, "workers")
        owner = workers.owner(reports, runtime.settings.app_id, topic, partition)
        return {
            "topic": topic,
            "partition": partition,
            "worker": owner.worker if owner else None,
            "client_id": owner.client_id if owner else None,
        }

    def limit_of(query: Any, default: int = 50) -> int:
        try:
            limit = int(query.get("limit", str(default)))
        except ValueError:
            raise ControlError("limit must be an integer", 400) from None
        if not 1 <= limit <= 1000:
            raise ControlError("limit must be between 1 and 1000", 400)
        return limit

    def action(
        path: str,
        what: str,
        name: str,
        act: Callable[[str, dict[str, Any], Principal], Awaitable[Any]],
    ) -> None:
        """Mount ``POST path``, whose one path parameter, JSON body and authenticated
        principal go to ``act``."""

        async def post(self: View, request: Request, **params: str) -> Response:
            async def work() -> Any:
                [ident] = params.values()
                return await act(ident, await read(request), request[PRINCIPAL])

            return await answer(work)

        post.__doc__ = act.__doc__
        view = type(f"{what.title()}{name.title()}View", (View,), {"post": post})
        app.page(path, name=f"rflow.api.{what}.{name}")(view)

    async def cancel(run_id: str, fields: dict[str, Any], principal: Principal) -> Any:
        """Cancel the run at its next step boundary; body ``{"reason": ...}`` (optional).
        The run's cancellation names the principal who asked."""
        return await control.cancel(run_id, text(fields, "reason"), principal.name)

    async def retry(run_id: str, fields: dict[str, Any], principal: Principal) -> Any:
        """Continue a failed run as a new run linked to it; body ``{"from": STEP, "yes":
        true}`` (both optional) restarts from an earlier step, confirming its resends
        (which take runs.resend too)."""
        confirm = fields.get("yes", False)
        if not isinstance(confirm, bool):
            raise ControlError("'yes' must be true or false", 400)
        return await control.retry(
            run_id, text(fields, "from"), confirm=confirm, who=principal, via="api"
        )

    def decide(decision: approvals.Decision) -> Callable[..., Awaitable[Any]]:
        async def act(run_id: str, fields: dict[str, Any], principal: Principal) -> Any:
            if "by" in fields:
                # Refused rather than ignored: a caller who names an approver expects that
                # name recorded, and it never is.
                raise ControlError(
                    "'by' is not accepted: an answer is recorded as the principal whose "
                    f"token made the request ({principal.name})",
                    400,
                )
            return await control.decide(
                run_id,
                text(fields, "step"),
                decision,
                principal,
                choice=text(fields, "choice"),
                text=text(fields, "text"),
                via="api",
            )

        act.__doc__ = f"{decision.title()} a run waiting for a human decision."
        return act

    @app.page("/api/runs/{run_id}/signals/{name}", name="rflow.api.run.signal")
    class SignalView(View):
        async def post(self, request: Request, run_id: str, name: str) -> Response:
            """Send the run signal NAME; body ``{"data": ...}``
            (optional): the step waiting for it takes it, else it is kept when the
            workflow buffers that signal, else it is refused (409)."""

            async def work() -> Any:
                fields = await read(request)
                unknown = set(fields) - {"data"}
                if unknown:
                    raise ControlError(f"unknown field(s) {', '.join(sorted(unknown))}", 400)
                request[ARGS] = {**fields, "name": name}
                return await control.signal(
                    run_id, name, fields.get("data"), request[PRINCIPAL].name
                )

            return await answer(work)

    action("/api/runs/{run_id}/cancel", "run", "cancel", cancel)
    action("/api/runs/{run_id}/retry", "run", "retry", retry)
    action("/api/runs/{run_id}/approve", "run", "approve", decide("approve"))
    action("/api/runs/{run_id}/reject", "run", "reject", decide("reject"))

    @app.page("/api/approvals", name="rflow.api.approvals")
    async def list_approvals(self: View, request: Request) -> Response:
        """Pending approvals, most urgent first: ?workflow=W&run=ID&mine=true&limit=N."""

        async def work() -> dict[str, Any]:
            query = request.query
            limit = limit_of(query, 100)
            mine = query.get("mine", "").lower() in ("1", "true", "yes")
            rows = await db(
                lambda conn: waits.pending_approvals(
                    conn,
                    workflow=query.get("workflow"),
                    run_id=query.get("run"),
                    approver=request[PRINCIPAL].name if mine else None,
                    limit=limit,
                ),
                "approvals",
            )
            return {"approvals": [approvals.inbox_entry(row) for row in rows]}

        return await answer(work)

    @app.page("/api/workflows", name="rflow.api.workflows")
    async def list_workflows(self: View, request: Request) -> Response:
        """The project's workflows: their triggers (``trigger``: their kinds, comma
        separated; ``triggers``: each one's id and kind), the version new runs start with
        (the deployed one) and pause state; the deployment this worker runs."""

        async def work() -> dict[str, Any]:
            paused = await db(controls.paused, "workflow controls")
            current = runtime.deployment
            project = current.project
            found = []
            for name, definition in (project.workflows if project else {}).items():
                by, reason = paused.get(name, (None, None))
                found.append(
                    {
                        "workflow": name,
                        "trigger": ", ".join(definition.trigger_kinds),
                        "triggers": [
                            {"id": trigger_id, "kind": trigger.kind}
                            for trigger_id, trigger in definition.named_triggers()
                        ],
                        "version": current.versions.get(name) or workflow_version(definition),
                        "paused": bool(definition.paused) or name in paused,
                        "paused_by": "definition" if definition.paused else by,
                        "reason": reason,
                    }
                )
            return {"workflows": found, "deployment": deployment()}

        return await answer(work)

    @app.page("/api/workflows/{name}/state", name="rflow.api.workflow.state")
    async def workflow_state(self: View, request: Request, name: str) -> Response:
        """The workflow's durable state, as its steps left it: every key with its value and
        when it was last written, or ``?key=K`` alone. Read only."""

        async def work() -> dict[str, Any]:
            key = request.query.get("key")
            try:
                return await db(lambda conn: durable_state.read(conn, name, key), "state")
            except durable_state.StateError as exc:
                raise ControlError(str(exc), exc.status) from None

        return await answer(work)

    async def pause(workflow: str, fields: dict[str, Any], principal: Principal) -> Any:
        """Pause the workflow: its triggers start no runs until resumed; body
        ``{"reason": ...}`` (optional). The pause names the principal who asked."""
        reason = text(fields, "reason", f"paused by {principal.name}")
        return await control.pause(workflow, reason, principal.name)

    async def resume(workflow: str, fields: dict[str, Any], principal: Principal) -> Any:
        """Resume the workflow after a pause: the firings held meanwhile start in order."""
        return await control.resume(workflow)

    action("/api/workflows/{workflow}/pause", "workflow", "pause", pause)
    action("/api/workflows/{workflow}/resume", "workflow", "resume", resume)

    @app.page("/api/schedules", name="rflow.api.schedules")
    async def list_schedules(self: View, request: Request) -> Response:
        """Every schedule of this worker's deployment: its cron and time zone, whether it
        fires (and who disabled it), its next and last fire times, its
        consecutive_failures since its last success and its last_error."""

        async def work() -> dict[str, Any]:
            project = runtime.project
            rows = await db(
                lambda conn: schedule_view.listing(conn, project, datetime.now(UTC)), "schedules"
            )
            return {"schedules": rows}

        return await answer(work)

    def schedule_action(name: str, act: Callable[..., Awaitable[Any]]) -> None:
        async def post(self: View, request: Request, workflow: str, trigger: str) -> Response:
            async def work() -> Any:
                fields = await read(request)
                return await db(
                    lambda conn: act(conn, workflow, trigger, fields, request[PRINCIPAL]),
                    f"{name} schedule {trigger} of {workflow}",
                )

            return await answer(work)

        post.__doc__ = act.__doc__
        view = type(f"Schedule{name.title()}View", (View,), {"post": post})
        app.page(
            f"/api/schedules/{{workflow}}/{{trigger}}/{name}", name=f"rflow.api.schedule.{name}"
        )(view)

    async def disable(
        conn: Any, workflow: str, trigger: str, fields: dict[str, Any], principal: Principal
    ) -> Any:
        """Disable the schedule: it fires nothing until enabled, the workflow's other
        triggers still do; body ``{"reason": ...}`` (optional)."""
        reason = text(fields, "reason", f"disabled by {principal.name}")
        return await schedule_view.disable(
            conn, runtime.project, workflow, trigger, by=principal.name, reason=reason
        )

    async def enable(
        conn: Any, workflow: str, trigger: str, fields: dict[str, Any], principal: Principal
    ) -> Any:
        """Enable a schedule an operator disabled: it fires from now on, never the times it
        skipped while disabled."""
        if fields:
            raise ControlError(f"unknown field(s) {', '.join(sorted(fields))}", 400)
        return await schedule_view.enable(
            conn, runtime.project, workflow, trigger, at=datetime.now(UTC)
        )

    schedule_action("disable", disable)
    schedule_action("enable", enable)

    @app.page("/api/budgets", name="rflow.api.budgets")
    async def list_budgets(self: View, request: Request) -> Response:
        """Each cap of each budget in its rolling window, in raw units."""

        async def work() -> dict[str, Any]:
            project = runtime.project
            declared = project.budgets if project else {}
            rows = (
                await db(lambda conn: budgets.usage(conn, declared), "budgets") if declared else []
            )
            return {"budgets": [row.document() for row in rows]}

        return await answer(work)

    @app.page("/api/sends", name="rflow.api.sends")
    async def list_sends(self: View, request: Request) -> Response:
        """The sends not settled yet: ?network=N&relayer=R&limit=N."""

        async def work() -> dict[str, Any]:
            query = request.query
            found = await control.sends.pending(
                network=query.get("network"),
                relayer=query.get("relayer"),
                limit=limit_of(query, 1000),
            )
            deferred = await control.sends.deferred(
                network=query.get("network"),
                relayer=query.get("relayer"),
                limit=limit_of(query, 1000),
            )
            return {"sends": found, "deferred": deferred}

        return await answer(work)

    def amount(fields: dict[str, Any], name: str) -> int | None:
        value = fields.get(name)
        if value is None:
            return None
        if not isinstance(value, int | str):
            raise ControlError(f'{name!r} must be an amount such as "40 gwei" or wei', 400)
        try:
            return parse_amount(value)
        except UnitError as exc:
            raise ControlError(f"{name!r}: {exc}", 400) from None

    def flag(fields: dict[str, Any], name: str) -> bool:
        value = fields.get(name, False)
        if not isinstance(value, bool):
            raise ControlError(f"{name!r} must be true or false", 400)
        return value

    async def speedup(send_id: str, fields: dict[str, Any], principal: Principal) -> Any:
        """Replace the send's transaction with one paying more, at the same nonce; body
        ``{"max_fee": ..., "tip": ..., "above_cap": false}`` (all optional)."""
        unknown = set(fields) - {"max_fee", "tip", "above_cap"}
        if unknown:
            raise ControlError(f"unknown field(s) {', '.join(sorted(unknown))}", 400)
        return await control.sends.speedup(
            send_id,
            max_fee=amount(fields, "max_fee"),
            tip=amount(fields, "tip"),
            above_cap=flag(fields, "above_cap"),
            by=principal.name,
        )

    async def cancel_send(send_id: str, fields: dict[str, Any], principal: Principal) -> Any:
        """Cancel the send: a zero-value self-transfer takes its nonce."""
        if fields:
            raise ControlError(f"unknown field(s) {', '.join(sorted(fields))}", 400)
        return await control.sends.cancel(send_id, by=principal.name)

    @app.page("/api/audit", name="rflow.api.audit")
    async def list_audit(self: View, request: Request) -> Response:
        """The audit trail, newest first:
        ?principal=P&action=A&since=TIME&outcome=O&target=ID&limit=N (``action`` may name a
        family, ``runs``; ``since`` is an ISO 8601 time or a duration back from now, 24h)."""

        async def work() -> dict[str, Any]:
            query = request.query
            outcome = query.get("outcome")
            if outcome is not None and outcome not in ("done", "failed", "refused"):
                raise ControlError("outcome is done, failed or refused", 400)
            try:
                since = since_of(query.get("since"), datetime.now(UTC))
            except ValueError as exc:
                raise ControlError(str(exc), 400) from None
            rows = await db(
                lambda conn: audit.listing(
                    conn,
                    principal=query.get("principal"),
                    action=query.get("action"),
                    since=since,
                    outcome=outcome,
                    target=query.get("target"),
                    limit=limit_of(query, 100),
                ),
                "audit trail",
            )
            return {"entries": [audit_document(row) for row in rows]}

        return await answer(work)

    action("/api/sends/{send_id}/speedup", "send", "speedup", speedup)
    action("/api/sends/{send_id}/cancel", "send", "cancel", cancel_send)
