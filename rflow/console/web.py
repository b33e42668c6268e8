"""The console's pages on the worker's web server: routing behind the sign-in, rendering,
forms and their answers.

Every page but the sign-in form and the static files goes through :meth:`Console.route`,
which asks for a signed-in principal (a page redirects to the sign-in, a form is refused)
and, for a form, for its CSRF token before the handler runs. Actions call the operator
actions of :class:`~rflow.streams.control.Control`, the ones the HTTP API and the CLI
call, and answer with a redirect to a page that says what was done (post, redirect, get).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlencode

import jinja2
from aiohttp import web
from faust.web import Request, View

from rflow.console import auth, present
from rflow.principals import Principals
from rflow.storage import StorageError, waits
from rflow.streams.control import Control, ControlError
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
    ("runs", "Runs"),
    ("approvals", "Approvals"),
    ("workflows", "Workflows"),
    ("budgets", "Budgets"),
    ("sends", "Sends"),
    ("dead-letters", "Dead letters"),
    ("backtests", "Backtests"),
)


def owns(path: str) -> bool:
    """Whether ``path`` is the console's: it signs its visitors in itself, with a cookie,
    so the API's bearer check leaves it alone."""
    return path == auth.PREFIX or path.startswith(auth.PREFIX + "/")


@dataclass
class Visit:
    """One signed-in request: who makes it, its path parameters, query and form."""

    request: web.Request
    principal: str
    csrf: str
    params: dict[str, str]
    form: Mapping[str, str] = field(default_factory=dict)

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
        self.control = control
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

    def route(self, path: str, *, get: Handler | None = None, post: Handler | None = None) -> None:
        """Mount ``path`` (under ``/console``) behind the sign-in: ``get`` renders a page,
        ``post`` carries out a form (after its CSRF check)."""
        methods: dict[str, Any] = {}
        if get is not None:

            async def do_get(view: View, request: Request, **params: str) -> Any:
                return await self._guarded(request, params, get, form=False)

            methods["get"] = do_get
        if post is not None:

            async def do_post(view: View, request: Request, **params: str) -> Any:
                return await self._guarded(request, params, post, form=True)

            methods["post"] = do_post
        name = "rflow.console" + (path.replace("/", ".").replace("{", "").replace("}", "") or ".")
        view = type("ConsoleView", (View,), methods)
        self.app.page(auth.PREFIX + path, name=name)(view)

    def signed_in(self, request: web.Request) -> tuple[str, str] | None:
        """(principal, token) of the request's session, if it holds a current token."""
        token = request.cookies.get(auth.SESSION_COOKIE)
        if not token:
            return None
        principal = self.principals().resolve(token)
        return (principal, token) if principal is not None else None

    async def _guarded(
        self, request: web.Request, params: dict[str, str], handler: Handler, *, form: bool
    ) -> web.StreamResponse:
        session = self.signed_in(request)
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
        principal, token = session
        visit = Visit(request, principal, auth.csrf_for(token), params)
        if form:
            fields = await request.post()
            if not auth.same_origin(request) or not auth.csrf_ok(
                visit.csrf, fields.get(auth.CSRF_FIELD)
            ):
                return self.refusal(
                    request,
                    403,
                    "This form was refused: its security token (CSRF) is missing or wrong, "
                    "so nothing was done. Go back, reload the page and try again.",
                )
            visit.form = {key: str(value) for key, value in fields.items()}
        try:
            return await handler(visit)
        except StorageError as exc:
            return self.refusal(request, 503, f"The database is unavailable: {exc}")

    # --- answers ------------------------------------------------------------------

    def render(self, visit: Visit, template: str, *, status: int = 200, **context: Any) -> Any:
        """The page ``template`` with the layout's context (who is signed in, the CSRF
        token, the message of the last action)."""
        flash = visit.request.cookies.get(auth.FLASH_COOKIE)
        kind, _, message = unquote(flash or "").partition(":")
        body = self.templates.get_template(template).render(
            principal=visit.principal,
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

    def refusal(self, request: web.Request, status: int, message: str) -> web.Response:
        """An error page that says why, with a way back to the sign-in."""
        body = self.templates.get_template("refused.html").render(
            status=status, message=message, principal=None, path=request.path
        )
        return web.Response(text=body, status=status, content_type="text/html")

    def done(self, visit: Visit, message: str, to: str | None = None, kind: str = "ok") -> Any:
        """Redirect (303) to ``to`` (or the form's ``next``) with ``message`` shown there."""
        target = auth.safe_next(to or visit.text("next"))
        response = redirect(target)
        response.set_cookie(
            auth.FLASH_COOKIE,
            quote(f"{kind}:{message}", safe=""),
            **auth.cookie_options(visit.request),
        )
        return response

    async def act(
        self,
        visit: Visit,
        work: Callable[[], Awaitable[Any]],
        said: Callable[[Any], str],
        to: str | None = None,
    ) -> Any:
        """Carry out ``work`` (an operator action) and go back with what it did, or with
        why it was refused: the action's own words, nothing made up here."""
        try:
            result = await work()
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
        """Sign in with the token of a principal; it is kept in a session cookie."""

        async def get(self, request: Request) -> Any:
            return console_sign_in_page(console, request, None, 200)

        async def post(self, request: Request) -> Any:
            fields = await request.post()
            nonce = request.cookies.get(auth.SIGN_IN_COOKIE)
            if not auth.same_origin(request) or not auth.csrf_ok(
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
            if not token or principals.resolve(token) is None:
                return console_sign_in_page(
                    console, request, "That token is not the token of any principal.", 401
                )
            response = redirect(auth.safe_next(str(fields.get("next") or "")))
            auth.sign_in(response, request, token)
            return response

    @app.page(auth.PREFIX + "/sign-out", name="rflow.console.sign_out")
    class SignOut(View):
        """End the session (a form, with its CSRF token, so no other site can do it)."""

        async def post(self, request: Request) -> Any:
            session = console.signed_in(request)
            fields = await request.post()
            if session is not None and not auth.csrf_ok(
                auth.csrf_for(session[1]), fields.get(auth.CSRF_FIELD)
            ):
                return console.refusal(request, 403, "This form was refused: nothing was done.")
            response = redirect(auth.PREFIX + "/sign-in")
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
    response.set_cookie(auth.SIGN_IN_COOKIE, nonce, **auth.cookie_options(request))
    return response
