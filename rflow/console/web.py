"""The console's pages on the worker's web server: routing behind the sign-in, rendering,
forms and their answers.

Every page but the sign-in form and the static files goes through :meth:`Console.route`,
which names the action the page or form needs, asks for a signed-in principal (a page
redirects to the sign-in, a form is refused), for a form's CSRF token, and then the gate
(:mod:`rflow.streams.gate`, which asks :mod:`rflow.authz`) before the handler runs: a
principal without the action gets a 403 page naming the action and the principal, and
nothing is done. Pages hide the forms the principal may not use. Actions call the
operator actions of :class:`~rflow.streams.control.Control`, the ones the HTTP API and
the CLI call, are written to the audit trail, and answer with a redirect to a page that
says what was done (post, redirect, get).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlencode

import jinja2
from aiohttp import web
from faust.web import Request, View

from rflow import authz
from rflow.authz import Principal, Target
from rflow.console import auth, present
from rflow.principals import Principals
from rflow.storage import StorageError, sessions, waits
from rflow.streams.control import Control, ControlError
from rflow.streams.gate import Forbidden, target_of
from rflow.streams.producer import ProduceError

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
VENDOR = HERE / "assets" / "node_modules"
ASSETS: dict[str, tuple[Path, str]] = {
    "console.css": (STATIC / "console.css", "text/css"),
    "console.js": (STATIC / "console.js", "text/javascript"),
    "htmx.min.js": (VENDOR / "htmx.org" / "dist" / "htmx.min.js", "text/javascript"),
    "uPlot.iife.min.js": (VENDOR / "uplot" / "dist" / "uPlot.iife.min.js", "text/javascript"),
    "uPlot.min.css": (VENDOR / "uplot" / "dist" / "uPlot.min.css", "text/css"),
}
"""The files the console serves, by name: its own, and the pinned libraries that
``scripts/bootstrap`` installs with ``npm ci`` (rflow/console/assets/package-lock.json)."""

NAV = (
    ("runs", "Runs", "runs.read"),
    ("approvals", "Approvals", "runs.read"),
    ("workflows", "Workflows", "runs.read"),
    ("budgets", "Budgets", "runs.read"),
    ("sends", "Sends", "runs.read"),
    ("dead-letters", "Dead letters", "runs.read"),
    ("backtests", "Backtests", "backtests.read"),
    ("audit", "Audit", "audit.read"),
)
"""The navigation: each page's path, title, and the action it needs (a link the
principal may not follow is not shown)."""

TOUCH_EVERY = timedelta(seconds=15)
"""A session's last use is written at most this often (a busy page writes no more)."""


def owns(path: str) -> bool:
    """Whether ``path`` is the console's: it signs its visitors in itself, with a cookie,
    so the API's bearer check leaves it alone."""
    return path == auth.PREFIX or path.startswith(auth.PREFIX + "/")


@dataclass(frozen=True)
class Session:
    """A signed-in browser: its principal, and the session's id and CSRF token."""

    principal: Principal
    session_id: str
    csrf: str


@dataclass
class Visit:
    """One signed-in request: who makes it, the action it takes (on what), its path
    parameters, query and form."""

    request: web.Request
    principal: Principal
    csrf: str
    params: dict[str, str]
    action: str
    target: Target | None = None
    form: Mapping[str, str] = field(default_factory=dict)

    def may(self, action: str, target: Target | None = None) -> bool:
        """Whether the principal may take ``action`` (pages hide what it may not)."""
        return authz.decide(self.principal, action, target).allowed

    @property
    def query(self) -> Mapping[str, str]:
        return self.request.query

    def text(self, name: str) -> str | None:
        """A form field, stripped; ``None`` when empty or absent."""
        value = self.form.get(name)
        if value is None:
            return None
        value = str(value).strip()
        return value or None


Handler = Callable[[Visit], Awaitable[web.StreamResponse]]


class Console:
    """The console attached to one worker's web server."""

    def __init__(
        self, app: RflowApp, control: Control, principals: Callable[[], Principals]
    ) -> None:
        self.app = app
        self.runtime = app.rflow
        self.settings = app.rflow.settings
        self.control = control
        self.gate = control.gate
        self.principals = principals
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES),
            autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.globals.update(
            present=present, nav=NAV, prefix=auth.PREFIX, csrf_field=auth.CSRF_FIELD
        )
        self.templates.filters.update(
            when=present.when,
            ago=present.ago,
            readable=present.readable,
            grouped=present.grouped,
            ether=present.ether,
            gwei=present.gwei,
            urlq=lambda value: quote(str(value), safe=""),
        )

    # --- routing ------------------------------------------------------------------

    def route(
        self,
        path: str,
        *,
        needs: str,
        get: Handler | None = None,
        post: Handler | None = None,
    ) -> None:
        """Mount ``path`` (under ``/console``) behind the sign-in: ``get`` renders a page,
        ``post`` carries out a form (after its CSRF check); either only for a principal
        that may take the action it ``needs``."""
        if needs not in authz.ACTIONS:
            raise ValueError(f"console route {path}: {needs!r} is not an action")
        methods: dict[str, Any] = {}
        if get is not None:

            async def do_get(view: View, request: Request, **params: str) -> Any:
                return await self._guarded(request, params, get, needs, form=False)

            methods["get"] = do_get
        if post is not None:

            async def do_post(view: View, request: Request, **params: str) -> Any:
                return await self._guarded(request, params, post, needs, form=True)

            methods["post"] = do_post
        name = "rflow.console" + (path.replace("/", ".").replace("{", "").replace("}", "") or ".")
        view = type("ConsoleView", (View,), methods)
        self.app.page(auth.PREFIX + path, name=name)(view)

    async def signed_in(self, request: web.Request) -> Session | None:
        """The request's session, if its cookie names one that has not ended: not revoked
        (signed out), not expired, not idle too long, and signed in with the token its
        principal holds now (a rotated token ends it)."""
        session_id = request.cookies.get(auth.SESSION_COOKIE)
        if not session_id or len(session_id) > 200:
            return None
        key = auth.id_hash(session_id)
        row = await self.db(lambda conn: sessions.get(conn, key), "console session")
        if row is None or row.revoked_at is not None:
            return None
        now = datetime.now(UTC)
        idle = timedelta(seconds=self.settings.console_idle_timeout)
        ended = None
        if now >= row.expires_at:
            ended = "expired"
        elif now - row.last_seen_at > idle:
            ended = "idle for longer than the idle timeout"
        principals = self.principals()
        principal = principals.named(row.principal)
        digest = principals.digest_of(row.principal)
        if ended is None and (
            principal is None
            or digest is None
            or not hmac.compare_digest(row.token_check, auth.token_check(session_id, digest))
        ):
            ended = "the principal's token changed (or the principal is gone)"
        if ended is not None:
            await self.db(lambda conn: sessions.revoke(conn, key, ended, now=now), "end session")
            return None
        assert principal is not None
        if not request.headers.get("HX-Request"):  # a live refresh is not a person's use
            await self.db(
                lambda conn: sessions.touch(conn, key, now=now, older_than=now - TOUCH_EVERY),
                "console session",
            )
        return Session(principal, session_id, auth.csrf_for(session_id))

    async def _guarded(
        self,
        request: web.Request,
        params: dict[str, str],
        handler: Handler,
        needs: str,
        *,
        form: bool,
    ) -> web.StreamResponse:
        try:
            session = await self.signed_in(request)
        except StorageError as exc:
            return self.refusal(request, 503, f"The database is unavailable: {exc}")
        if session is None:
            if form:
                return self.refusal(
                    request, 401, "You are not signed in (or your token changed): sign in again."
                )
            target = auth.safe_next(request.path_qs)
            where = f"{auth.PREFIX}/sign-in?{urlencode({'next': target})}"
            if request.headers.get("HX-Request"):
                return web.Response(status=401, headers={"HX-Redirect": where})
            return redirect(where)
        target = target_of(params)
        visit = Visit(request, session.principal, session.csrf, params, needs, target)
        if form:
            fields = await request.post()
            if not auth.same_origin(request, self.settings) or not auth.csrf_ok(
                visit.csrf, fields.get(auth.CSRF_FIELD)
            ):
                return self.refusal(
                    request,
                    403,
                    "This form was refused: its security token (CSRF) is missing or wrong, "
                    "so nothing was done. Go back, reload the page and try again.",
                    principal=session.principal.name,
                )
            visit.form = {key: str(value) for key, value in fields.items()}
        try:
            await self.gate.check(
                visit.principal, needs, target, via="console", args=visit.form or None
            )
            return await handler(visit)
        except Forbidden as exc:
            return self.refusal(request, 403, str(exc), principal=session.principal.name)
        except StorageError as exc:
            return self.refusal(request, 503, f"The database is unavailable: {exc}")

    # --- answers ------------------------------------------------------------------

    def render(self, visit: Visit, template: str, *, status: int = 200, **context: Any) -> Any:
        """The page ``template`` with the layout's context (who is signed in, the CSRF
        token, the message of the last action)."""
        flash = visit.request.cookies.get(auth.FLASH_COOKIE)
        kind, _, message = unquote(flash or "").partition(":")
        body = self.templates.get_template(template).render(
            principal=visit.principal.name,
            role=visit.principal.role,
            may=visit.may,
            csrf=visit.csrf,
            path=visit.request.path,
            path_qs=visit.request.path_qs,
            flash={"kind": kind, "message": message} if message else None,
            **context,
        )
        response = web.Response(text=body, status=status, content_type="text/html")
        response.headers["Cache-Control"] = "no-store"
        if flash:
            response.del_cookie(auth.FLASH_COOKIE, path=auth.PREFIX + "/")
        return response

    def fragment(self, template: str, **context: Any) -> Any:
        """A piece of a page (the live-refreshed rows), without the layout."""
        body = self.templates.get_template(template).render(**context)
        response = web.Response(text=body, content_type="text/html")
        response.headers["Cache-Control"] = "no-store"
        return response

    def refusal(
        self, request: web.Request, status: int, message: str, principal: str | None = None
    ) -> web.Response:
        """An error page that says why, with a way back to the sign-in (or, signed in, to
        the runs)."""
        body = self.templates.get_template("refused.html").render(
            status=status, message=message, principal=None, who=principal, path=request.path
        )
        response = web.Response(text=body, status=status, content_type="text/html")
        response.headers["Cache-Control"] = "no-store"
        return response

    def done(self, visit: Visit, message: str, to: str | None = None, kind: str = "ok") -> Any:
        """Redirect (303) to ``to`` (or the form's ``next``) with ``message`` shown there."""
        target = auth.safe_next(to or visit.text("next"))
        response = redirect(target)
        response.set_cookie(
            auth.FLASH_COOKIE,
            quote(f"{kind}:{message}", safe=""),
            **auth.cookie_options(visit.request, self.settings),
        )
        return response

    async def act(
        self,
        visit: Visit,
        work: Callable[[], Awaitable[Any]],
        said: Callable[[Any], str],
        to: str | None = None,
    ) -> Any:
        """Carry out ``work`` (the visit's operator action, written to the audit trail)
        and go back with what it did, or with why it was refused: the action's own words,
        nothing made up here."""
        try:
            result = await self.gate.perform(
                visit.principal, visit.action, visit.target, work, via="console", args=visit.form
            )
        except ControlError as exc:
            return self.done(visit, str(exc), to, kind="error")
        except ProduceError as exc:
            return self.done(visit, f"Kafka did not take the request: {exc}", to, kind="error")
        return self.done(visit, said(result), to)

    async def db(self, work: Callable[[Any], Awaitable[Any]], what: str) -> Any:
        return await self.runtime.database.run(work, what=what)

    async def approvals_waiting(self) -> int:
        """How many approvals wait (the navigation's badge)."""
        counts = await self.db(waits.pending_approval_counts, "approval counts")
        return sum(counts.values())


def attach(app: RflowApp, control: Control, principals: Callable[[], Principals]) -> Console:
    """Mount the console on ``app``'s web server under ``/console/``."""
    from rflow.console import approvals, backtests, budgets, runs, sends, workflows
    from rflow.console import audit as audit_page

    console = Console(app, control, principals)
    missing = [name for name, (path, _) in ASSETS.items() if not path.exists()]
    if missing:
        log.warning(
            "the console's front-end libraries are not installed (%s): its pages work "
            "without live refresh and charts; run scripts/bootstrap to install them",
            ", ".join(missing),
        )
    _attach_sign_in(console)
    for module in (runs, approvals, workflows, budgets, sends, backtests):
        module.attach(console)
    audit_page.attach(console)
    return console


def _attach_sign_in(console: Console) -> None:
    app = console.app

    for path in (auth.PREFIX, auth.PREFIX + "/"):

        class Home(View):
            """The console's front door: its runs (or the sign-in, from there)."""

            async def get(self, request: Request) -> Any:
                return redirect(auth.PREFIX + "/runs")

        app.page(path, name=f"rflow.console.home{path.count('/')}")(Home)

    @app.page(auth.PREFIX + "/static/{name}", name="rflow.console.static")
    class Static(View):
        """The console's style sheet, script and pinned libraries (no session needed:
        they hold no data)."""

        async def get(self, request: Request, name: str) -> Any:
            found = ASSETS.get(name)
            if found is None or not found[0].exists():
                why = "" if found is None else ": run scripts/bootstrap to install it"
                return web.Response(status=404, text=f"no console asset {name!r}{why}")
            path, kind = found
            return web.Response(
                body=path.read_bytes(),
                content_type=kind,
                headers={"Cache-Control": "public, max-age=3600"},
            )

    @app.page(auth.PREFIX + "/sign-in", name="rflow.console.sign_in")
    class SignIn(View):
        """Sign in with the token of a principal: a session starts on the server, and the
        browser's cookie holds its id."""

        async def get(self, request: Request) -> Any:
            return console_sign_in_page(console, request, None, 200)

        async def post(self, request: Request) -> Any:
            fields = await request.post()
            nonce = request.cookies.get(auth.SIGN_IN_COOKIE)
            if not auth.same_origin(request, console.settings) or not auth.csrf_ok(
                nonce, fields.get(auth.CSRF_FIELD)
            ):
                return console_sign_in_page(
                    console,
                    request,
                    "This sign-in form was refused (its security token is missing or old): "
                    "try again.",
                    403,
                )
            token = str(fields.get("token") or "").strip()
            principals = console.principals()
            if not principals:
                return console_sign_in_page(
                    console,
                    request,
                    "This worker has no API token, so nobody can sign in: set "
                    "RFLOW_API_TOKEN (or a principal's token variable) and restart it.",
                    401,
                )
            principal = principals.principal(token) if token else None
            digest = principals.digest_of(principal.name) if principal else None
            if principal is None or digest is None:
                return console_sign_in_page(
                    console, request, "That token is not the token of any principal.", 401
                )
            session_id = auth.new_session_id()
            now = datetime.now(UTC)
            expires = now + timedelta(seconds=console.settings.console_session_ttl)

            async def start(conn: Any) -> None:
                await sessions.purge(conn, now - timedelta(days=1))
                await sessions.create(
                    conn,
                    auth.id_hash(session_id),
                    principal.name,
                    auth.token_check(session_id, digest),
                    now=now,
                    expires_at=expires,
                )

            try:
                await console.db(start, "start a console session")
            except StorageError as exc:
                return console.refusal(request, 503, f"The database is unavailable: {exc}")
            response = redirect(auth.safe_next(str(fields.get("next") or "")))
            auth.sign_in(response, request, console.settings, session_id)
            return response

    @app.page(auth.PREFIX + "/sign-out", name="rflow.console.sign_out")
    class SignOut(View):
        """End the session: revoked on the server, so its cookie (or a copy of it) signs
        nobody in any more (a form, with its CSRF token, so no other site can do it)."""

        async def post(self, request: Request) -> Any:
            try:
                session = await console.signed_in(request)
            except StorageError as exc:
                return console.refusal(request, 503, f"The database is unavailable: {exc}")
            fields = await request.post()
            if session is not None:
                if not auth.csrf_ok(session.csrf, fields.get(auth.CSRF_FIELD)):
                    return console.refusal(request, 403, "This form was refused: nothing was done.")
                key = auth.id_hash(session.session_id)
                now = datetime.now(UTC)
                try:
                    await console.db(
                        lambda conn: sessions.revoke(conn, key, "signed out", now=now),
                        "end a console session",
                    )
                except StorageError as exc:
                    return console.refusal(request, 503, f"The database is unavailable: {exc}")
            response = redirect(auth.PREFIX + "/sign-in")
            response.headers["Cache-Control"] = "no-store"
            auth.sign_out(response)
            return response


def redirect(location: str) -> web.Response:
    """303 See Other to ``location`` (after a form, the browser GETs it)."""
    return web.Response(status=303, headers={"Location": location})


def console_sign_in_page(
    console: Console, request: web.Request, error: str | None, status: int
) -> web.Response:
    """The sign-in form, with a fresh double-submit value in its cookie and its field."""
    nonce = auth.new_sign_in_nonce()
    body = console.templates.get_template("sign_in.html").render(
        principal=None,
        path=request.path,
        error=error,
        nonce=nonce,
        next=auth.safe_next(request.query.get("next")),
    )
    response = web.Response(text=body, status=status, content_type="text/html")
    response.headers["Cache-Control"] = "no-store"
    response.set_cookie(
        auth.SIGN_IN_COOKIE, nonce, **auth.cookie_options(request, console.settings)
    )
    return response
