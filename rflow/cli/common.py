"""What the command modules share: failing with a message, one database call, and the
principal a command acts as (:func:`needs`).

Every command that reads or changes what a deployment runs names the action it needs
with :func:`needs`: the CLI acts as the principal of its token (``RFLOW_CLI_TOKEN``,
else ``RFLOW_API_TOKEN``, ``operator``), whose role comes from the newest deployment's
``principals`` (or, before anything is deployed, from ``--project`` /
``$RFLOW_PROJECT``), and the gate (:mod:`rflow.streams.gate`) decides, writing a refusal
and the outcome of an action to the audit trail. The commands that name no action
(:data:`INFRASTRUCTURE`) read local files, or set up the database and Kafka with their
own credentials.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from rflow.settings import Settings

if TYPE_CHECKING:
    from rflow.authz import Principal, Target
    from rflow.lang import Project
    from rflow.lang.model.resources import Principal as DeclaredPrincipal

T = TypeVar("T")

INFRASTRUCTURE = frozenset(
    {
        "rflow validate",
        "rflow schema",
        "rflow doctor",
        "rflow migrate",
        "rflow topics apply",
        "rflow worker",
        "rflow keys generate",
        "rflow keys address",
        "rflow kafka acls",
        "rflow dev emit",
    }
)
"""The commands that name no action: they read local files and check the services
(validate, schema, doctor), set up the database, Kafka and a worker with the
credentials those take (migrate, topics apply, worker), work on a relayer's HSM with
the token PIN they are given (keys), print what an administrator grants (kafka acls),
or act on the local development chain with its own keys (dev emit)."""

PRINCIPAL_KEY = "rflow.principal"
"""Where :func:`needs` leaves the command's principal (``click`` context's ``meta``)."""
AUTHORIZE_KEY = "rflow.authorize"


class Failed(SystemExit):
    """A command failed with ``message`` (already printed); ``recorded``: the audit trail
    has the refusal already."""

    def __init__(self, message: str, code: int = 1, *, recorded: bool = False) -> None:
        super().__init__(code)
        self.message = message
        self.recorded = recorded

    def __str__(self) -> str:
        return self.message


def fail(message: str, code: int = 1, *, recorded: bool = False) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    raise Failed(message, code, recorded=recorded)


async def with_database(work: Callable[[Any], Awaitable[T]], settings: Settings | None = None) -> T:
    """Run ``work`` on a connection to the configured schema; a clear error if the
    database is unreachable or refuses the query (a schema not migrated, say)."""
    from rflow import storage

    try:
        conn = await storage.connect(settings or Settings.from_env())
    except storage.StorageError as exc:
        fail(str(exc))
    async with conn:
        try:
            return await work(conn)
        except storage.StorageError as exc:
            fail(str(exc))


def operate(action: Callable[[Any], Awaitable[T]], project: Project | None = None) -> T:
    """Run an operator action (:class:`rflow.streams.control.Control`) with a connection
    and a producer of the CLI's own; a refusal is printed and exits 1."""
    from rflow.storage import StorageError
    from rflow.streams.control import ControlError, connected
    from rflow.streams.gate import Forbidden
    from rflow.streams.producer import ProduceError

    async def act() -> T:
        async with connected(Settings.from_env(), project) as control:
            return await action(control)

    try:
        return asyncio.run(act())
    except Forbidden as exc:
        fail(str(exc), recorded=True)
    except (ControlError, ProduceError, StorageError) as exc:
        fail(str(exc))


# --- who the CLI acts as -----------------------------------------------------------


def principals_of_source(document: Mapping[str, Any]) -> dict[str, DeclaredPrincipal]:
    """The ``principals`` a stored deployment's source declares (read from its YAML, so
    no variable the rest of the project names needs to be set here)."""
    import yaml

    from rflow.lang.model.resources import Principal as Declared

    found: dict[str, Declared] = {}
    for file in document.get("files") or ():
        try:
            data = yaml.safe_load(file.get("text") or "")
        except yaml.YAMLError:
            continue
        declared = data.get("principals") if isinstance(data, dict) else None
        for name, spec in (declared or {}).items():
            found[str(name)] = Declared.model_validate(spec)
    return found


def acting_token() -> str:
    """The CLI's token: ``RFLOW_CLI_TOKEN``, else ``RFLOW_API_TOKEN``; exits saying so
    when there is none (before anything is read or written)."""
    from rflow.principals import OPERATOR

    token = Settings.from_env().acting_token
    if token is None or not token.get_secret_value():
        fail(
            "the CLI acts as a principal: set RFLOW_CLI_TOKEN to your token (or "
            f"RFLOW_API_TOKEN, the token of {OPERATOR!r})"
        )
    return token.get_secret_value()


def principal_of_token(
    token: str, declared: Mapping[str, DeclaredPrincipal], where: str
) -> Principal:
    """The principal holding ``token`` among ``operator`` and the ``declared`` ones (their
    tokens read from this environment); exits saying ``where`` else it looked."""
    from rflow.principals import OPERATOR, Principals, TokenConflict
    from rflow.settings import environ

    settings = Settings.from_env()
    try:
        principals = Principals.declared(declared, environ(), settings.api_token)
    except TokenConflict as exc:
        fail(str(exc))
    found = principals.principal(token)
    if found is None:
        variable = "RFLOW_CLI_TOKEN" if settings.cli_token is not None else "RFLOW_API_TOKEN"
        fail(f"the token in {variable} is not RFLOW_API_TOKEN ({OPERATOR!r}), {where}")
    return found


async def acting_principal(conn: Any, project: Path | None = None) -> Principal:
    """The principal of the CLI's token: its role from the newest deployment (what every
    worker enforces), or, with nothing deployed, from the project at ``project`` (else
    ``$RFLOW_PROJECT``); exits with the reason when the token is missing or nobody's."""
    from rflow.storage import deployments

    settings = Settings.from_env()
    token = acting_token()
    latest = await deployments.latest_id(conn)
    stored = await deployments.get(conn, latest) if latest is not None else None
    where: str
    if stored is not None:
        declared = principals_of_source(stored.source)
        where = f"nor the token of a principal of deployment {latest}"
    else:
        path = project or settings.project_path
        loaded = _load(path) if path is not None else None
        declared = dict(loaded.principals) if loaded is not None else {}
        where = (
            f"nor the token of a principal of {path}"
            if path is not None
            else "and nothing is deployed (nor is there a project, --project or "
            "RFLOW_PROJECT) whose principals could hold it"
        )
    return principal_of_token(token, declared, where)


def _load(path: Path) -> Any:
    from rflow.lang import ConfigError, load_project
    from rflow.settings import environ

    try:
        return load_project(path, environ())
    except FileNotFoundError as exc:
        fail(str(exc), 2)
    except ConfigError as exc:
        fail(f"{path} has {len(exc.diagnostics)} problems; run rflow validate {path}", 2)


def _gate(conn: Any) -> Any:
    from rflow.streams.gate import Gate

    async def database(work: Callable[[Any], Awaitable[Any]]) -> Any:
        return await work(conn)

    return Gate(database)


def authorize(
    action: str,
    target: Target | None = None,
    *,
    args: Mapping[str, Any] | None = None,
    project: Path | None = None,
) -> Principal:
    """The CLI's principal, once the gate lets it take ``action``; a refusal is written to
    the audit trail, printed, and exits 1 with nothing done."""
    from rflow.streams.gate import Forbidden

    acting_token()  # no token: refused before anything is read

    async def work(conn: Any) -> Principal:
        who = await acting_principal(conn, project)
        try:
            await _gate(conn).check(who, action, target, via="cli", args=args)
        except Forbidden as exc:
            fail(str(exc), recorded=True)
        return who

    return asyncio.run(with_database(work))


def record(
    who: Principal,
    action: str,
    target: Target | None,
    *,
    args: Mapping[str, Any] | None = None,
    error: str | None = None,
) -> None:
    """Write how ``action`` ended to the audit trail (an action the trail keeps)."""
    from rflow import authz

    found = authz.ACTIONS.get(action)
    if found is None or not found.audited:
        return
    asyncio.run(
        with_database(
            lambda conn: _gate(conn).done(who, action, target, via="cli", args=args, error=error)
        )
    )


def needs(
    action: str,
    target: tuple[str, str] | None = None,
    *,
    late: bool = False,
    when: Mapping[str, str] | None = None,
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Declare the action a command needs (on the ``target`` kind its argument names:
    ``("run", "run_id")``): before the command runs, the CLI's principal must be allowed
    it; the outcome goes to the audit trail. Apply it right above ``def``.

    ``late``: the command checks its input first (no service needed) and calls
    :func:`authorized` itself before it changes anything. ``when``: a flag of the
    command that makes it another action (``{"rollback": "deploy.rollback"}``)."""
    from rflow.authz import ACTIONS

    for name in (action, *(when or {}).values()):
        if name not in ACTIONS:
            raise ValueError(f"{name!r} is not an action")

    def wrap(command: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(command)
        def run(*args: Any, **params: Any) -> T:
            from rflow.authz import Target

            taken = next(
                (other for flag, other in (when or {}).items() if params.get(flag)), action
            )
            named = None
            if target is not None and params.get(target[1]) is not None:
                named = Target(target[0], str(params[target[1]]))
            meta = click.get_current_context().meta

            def now() -> Principal:
                if PRINCIPAL_KEY not in meta:
                    project = params.get("project")
                    meta[PRINCIPAL_KEY] = authorize(taken, named, args=params, project=project)
                return meta[PRINCIPAL_KEY]

            meta[AUTHORIZE_KEY] = now
            if not late:
                now()
            try:
                result = command(*args, **params)
            except Failed as exc:
                if PRINCIPAL_KEY in meta and exc.code not in (0, None) and not exc.recorded:
                    record(meta[PRINCIPAL_KEY], taken, named, args=params, error=exc.message)
                raise
            except Exception as exc:
                if PRINCIPAL_KEY in meta:
                    error = f"{type(exc).__name__}: {exc}"
                    record(meta[PRINCIPAL_KEY], taken, named, args=params, error=error)
                raise
            if PRINCIPAL_KEY not in meta:  # a late command that changed nothing
                now()
            record(meta[PRINCIPAL_KEY], taken, named, args=params)
            return result

        run.rflow_action = action  # type: ignore[attr-defined]
        return run

    return wrap


def authorized() -> Principal:
    """The running command's principal, authorized for its action now (a command
    declared ``late`` calls this before it changes anything)."""
    return click.get_current_context().meta[AUTHORIZE_KEY]()


def current_principal() -> Principal:
    """The principal the running command acts as (set by :func:`needs`)."""
    return click.get_current_context().meta[PRINCIPAL_KEY]


async def known_workflow(conn: Any, name: str) -> None:
    """Exit with the reason unless ``name`` is a deployed workflow or has runs."""
    from rflow.storage import versions

    if not await versions.known(conn, name):
        fail(f"no workflow {name!r}: none is deployed under that name, and none has runs")


async def deployed_project(conn: Any) -> Project | None:
    """The project of the newest deployment, as this environment loads it (``None`` when
    nothing is deployed or it does not load here)."""
    from rflow.lang import ProjectSource
    from rflow.settings import environ
    from rflow.storage import deployments

    latest = await deployments.latest_id(conn)
    stored = await deployments.get(conn, latest) if latest is not None else None
    if stored is None:
        return None
    return ProjectSource.from_document(stored.source).validate(environ()).project


def project_or_warn(path: Path | None, unchecked: str) -> Project | None:
    """The project at ``path``; without one, a warning saying what goes ``unchecked``.

    A project with errors prints each diagnostic and exits 2.
    """
    from rflow.lang import ConfigError, load_project
    from rflow.settings import environ

    if path is None:
        click.echo(f"warning: no project (--project or RFLOW_PROJECT): {unchecked}", err=True)
        return None
    try:
        return load_project(path, environ())
    except FileNotFoundError as exc:
        fail(str(exc), 2)
    except ConfigError as exc:
        for diagnostic in exc.diagnostics:
            click.echo(str(diagnostic), err=True)
        fail(f"{path} has errors", 2)


project_option = click.option(
    "--project",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Default: $RFLOW_PROJECT.",
)
"""The ``--project PATH`` option of commands that read the workflows."""


def table(rows: list[list[Any]], header: list[str]) -> str:
    """Rows under a header, in columns as wide as their widest cell."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )
