"""A worker's side of deployments: it publishes the project it started with, then follows
the newest deployment.

Before the worker takes a record (:meth:`Deployments.start`, from the app's start), it
publishes its own project, unless that project is an older deployment's: then it does
not deploy it (every worker would roll back to it) and runs the newest instead, saying
which is newer and how to run it; with ``--rollback`` it deploys it as the operator's
action ``deploy.rollback``. A worker whose newest deployment does not load here does not
start at all rather than run the older project.

About once a second (:data:`POLL_INTERVAL`) a worker asks Postgres for the newest
deployment id. A newer one is read, loaded with the worker's own environment in a
thread (off the event loop), and swapped in whole by :meth:`Runtime.take`: every
component reads the current project when it uses it, and the runner takes up the new
workflows and versions in the same step. A deployment that does not load here (an
environment variable it needs is not set on this worker, say) leaves the previous one
running; the worker logs why, reports it (``deployment_workers``: ``rflow deployments``,
``GET /healthz``, ``GET /api/workflows``) and does not try that id again.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rflow import workers
from rflow.deployment import Changes, load, older_message
from rflow.engine.keys import deployable
from rflow.lang import ConfigError, ProjectSource
from rflow.settings import SettingsError
from rflow.storage import deployments, versions
from rflow.streams.loops import every

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp, Runtime

log = logging.getLogger(__name__)
POLL_INTERVAL = 1.0
"""Seconds between two looks at the newest deployment id (one cheap query)."""
REPORT_INTERVAL = 5.0
"""Seconds between two reports of what this worker runs (sooner when it changes)."""
MAX_ERROR = 4000
"""Characters of a load error kept in the report."""


class StartRefused(SettingsError):
    """The worker cannot start with what it was given; the message says why and what to do."""


def worker_name(runtime: Runtime) -> str:
    """How this worker is named in ``deployment_workers``: host and web port."""
    return workers.worker_name(socket.gethostname(), runtime.settings.web_port)


class Deployments:
    """Publishes the worker's own project, follows the newest deployment, reports."""

    def __init__(
        self, runtime: Runtime, source: ProjectSource | None = None, *, rollback: bool = False
    ) -> None:
        self.runtime = runtime
        self.source = source
        """The source of the project this worker started with (``None``: none, or one
        given in memory, whose versions alone are published)."""
        self.rollback = rollback
        """``rflow worker --rollback``: deploy the worker's project even if it is older."""
        self.worker = worker_name(runtime)
        self.started_at = datetime.now(UTC)
        self.failed: tuple[int, str] | None = None
        """The newest deployment that did not load here, and why."""
        self.following = False
        """Set once the worker's own project is published: following starts then."""
        self.client_id = workers.client_id(socket.gethostname(), runtime.settings.web_port)
        self.assignment: Callable[[], dict[str, Any]] = dict
        """The partitions this worker holds now, as :func:`rflow.workers.assignment`
        gives them (set by :func:`attach`, which knows the app's assignor)."""
        self._lock = asyncio.Lock()
        self._reported: tuple[Any, ...] | None = None
        self._reported_at = 0.0

    async def db(self, work: Any, what: str) -> Any:
        return await self.runtime.database.run(work, what=what)

    # --- publishing -----------------------------------------------------------------------

    async def start(self) -> None:
        """Settle what this worker runs before it takes a record: its own project, deployed
        (:meth:`publish_own`), or the newest deployment when its project is older."""
        await self.publish_own()

    async def publish_own(self) -> None:
        """Deploy the project this worker started with, as ``rflow deploy`` does, unless it
        is an older deployment's: then take up the newest (:meth:`_older`)."""
        current = self.runtime.deployment
        project = current.project
        try:
            if project is None:
                return
            definitions = deployable(project.workflows)
            if self.source is None:
                changed = await self.db(
                    lambda conn: versions.deploy(conn, definitions), "deploy versions"
                )
                for name, (previous, version) in changed.items():
                    log.info("deployed workflow %s version %s (was %s)", name, version, previous)
                return
            source = self.source
            where = self.runtime.settings.project_path
            try:
                published = await self.db(
                    lambda conn: deployments.publish(
                        conn,
                        digest=source.digest,
                        source=source.document(),
                        definitions=definitions,
                        rollback=self.rollback,
                        actor=f"worker {self.worker}" + (" --rollback" if self.rollback else ""),
                    ),
                    "deploy",
                )
            except deployments.Older as older:
                await self._older(older)
                return
            if published.action == deployments.ROLLBACK:
                log.warning(
                    "rolled back: deployed the project at %s as deployment %d "
                    "(deploy.rollback, as this worker was started with --rollback)",
                    where,
                    published.id,
                )
            elif published.created:
                changes = Changes.between(published.before, current.versions)
                log.info(
                    "deployed the project at %s as deployment %d: %s",
                    where,
                    published.id,
                    changes.summary(),
                )
            else:
                log.info("the project at %s is deployment %d already", where, published.id)
            if self.runtime.deployment is current:
                self.runtime.take(current.stored_as(published.id))
        finally:
            self.following = True
            await self.report(force=True)

    async def _older(self, older: deployments.Older) -> None:
        """This worker's project is an older deployment's: run the newest instead, or
        refuse to start when the newest does not load here."""
        where = self.runtime.settings.project_path or "this worker's project"
        stored = await self.db(
            lambda conn: deployments.get(conn, older.newest), f"deployment {older.newest}"
        )
        try:
            source = ProjectSource.from_document(stored.source)
            newest = await asyncio.to_thread(load, source, self.runtime.env, older.newest)
        except (ConfigError, ValueError) as exc:
            then = (
                f"this worker does not deploy it; and deployment {older.newest} does not load "
                f"here ({exc}), so this worker does not start: it never runs the older project"
            )
            raise StartRefused(older_message(where, older, then)) from None
        said = older_message(
            where,
            older,
            f"this worker does not deploy it and runs deployment {older.newest} instead",
        )
        log.error("%s", said)
        self.runtime.take(newest)

    # --- following ------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Take up the newest deployment, unless this worker runs it (or it failed here).

        Called every second, and at once by a component that meets a workflow it does
        not know (another worker may have taken up a deployment that declares it first).
        """
        if not self.following:
            return
        async with self._lock:
            latest = await self.db(deployments.latest_id, "the newest deployment")
            running = self.runtime.deployment.id
            if latest is None or (running is not None and latest <= running):
                return
            if self.failed is not None and self.failed[0] == latest:
                return
            await self._take_up(latest)

    async def _take_up(self, id: int) -> None:
        stored = await self.db(lambda conn: deployments.get(conn, id), f"deployment {id}")
        if stored is None:
            return
        before = self.runtime.deployment
        try:
            source = ProjectSource.from_document(stored.source)
            deployment = await asyncio.to_thread(load, source, self.runtime.env, id)
        except (ConfigError, ValueError) as exc:
            reason = str(exc)
            self.failed = (id, reason[:MAX_ERROR])
            log.error(
                "deployment %d does not load on this worker, which keeps running %s: %s",
                id,
                before.label,
                reason,
            )
            await self.report(force=True)
            return
        self.runtime.take(deployment)
        self.failed = None
        changes = Changes.between(before.versions, deployment.versions)
        log.info("took up deployment %d (was %s): %s", id, before.label, changes.summary())
        await self.report(force=True)

    # --- reporting ------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What this worker runs: ``{"id": ..., "failed": {"id": ..., "error": ...}}``."""
        failed = self.failed
        return {
            "id": self.runtime.deployment.id,
            "failed": {"id": failed[0], "error": failed[1]} if failed else None,
        }

    async def report(self, *, force: bool = False) -> None:
        """Record what this worker runs, when it changed or every :data:`REPORT_INTERVAL`."""
        failed = self.failed
        held = self.assignment()
        state = (self.runtime.deployment.id, *(failed or (None, None)), held)
        now = time.monotonic()
        if not force and state == self._reported and now - self._reported_at < REPORT_INTERVAL:
            return
        running, failed_id, error, _ = state
        await self.db(
            lambda conn: deployments.report(
                conn,
                worker=self.worker,
                app_id=self.runtime.settings.app_id,
                deployment=running,
                failed=failed_id,
                error=error,
                started_at=self.started_at,
                client_id=self.client_id,
                assignment=held,
            ),
            "deployment report",
        )
        self._reported, self._reported_at = state, now


def attach(app: RflowApp, follower: Deployments) -> None:
    """Declare the following loop on ``app`` (the worker's own project is published as the
    app starts: :meth:`Deployments.start`), and what it reports of the partitions held."""
    prefix = follower.runtime.settings.topic_prefix

    def held() -> dict[str, Any]:
        assignor = app.assignor
        try:
            actives, standbys = assignor.assigned_actives(), assignor.assigned_standbys()
        except AttributeError:  # nothing assigned yet: the assignor has no assignment
            actives, standbys = set(), set()
        return workers.assignment(actives, standbys, prefix)

    follower.assignment = held
    reporting: set[asyncio.Task[None]] = set()

    async def report_now() -> None:
        try:
            await follower.report(force=True)
        except Exception:  # the next look, a second later, reports it
            log.exception("reporting the partitions taken failed")

    async def opened(partitions: frozenset[int]) -> None:
        # What this worker owns changed: say so now (`rflow runs show --live` finds a
        # run's owner by it), not at the next look, and without holding up the opening.
        task = asyncio.create_task(report_now())
        reporting.add(task)
        task.add_done_callback(reporting.discard)

    follower.runtime.consumption.on_open.append(opened)

    @every(app, POLL_INTERVAL, "rflow.deployments")
    async def follow_deployments() -> None:
        """Take up the newest deployment (``rflow deploy``) and report what runs here."""
        try:
            await follower.refresh()
            await follower.report()
        except Exception:  # a failed look is logged; the next one, a second later, retries
            log.exception("following deployments failed")
