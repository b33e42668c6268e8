"""Chain ingress in a worker: one follower per network across all workers.

Every worker runs a :class:`ChainIngress`; for each network that some workflow listens
to, it tries to take that network's Postgres session advisory lock on a connection of
its own. The worker that gets it runs the :class:`~rflow.ingress.chain.ChainFollower`
and checks the connection every few seconds; the others try again every few seconds.
A worker that dies, or loses its connection, loses the lock with it, and another takes
over from the stored cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import psycopg

from rflow import storage
from rflow.deployment import ProjectAt, project_reader
from rflow.ingress.chain import ChainFollower, TriggerSink
from rflow.ingress.chain_state import ChainStore, PostgresChainStore
from rflow.ingress.listeners import event_networks, following
from rflow.ingress.service import IngressService
from rflow.lang import Project
from rflow.settings import Settings
from rflow.storage import StorageError
from rflow.storage import chain as chain_store

if TYPE_CHECKING:
    from rflow.streams.app import Runtime

log = logging.getLogger(__name__)


class ChainIngress:
    """Follows every network of ``project`` that has event triggers, while it holds the
    network's lock; :meth:`run` until cancelled.

    ``project`` is a project, or a function answering the current one (a worker's, which
    a deploy changes): a network a deployment starts listening to is followed, one it no
    longer listens to is let go, and one whose listeners changed is followed anew, from
    its stored cursor (so no block is skipped or fired twice). ``refresh`` is how often,
    in seconds, the project is looked at.

    ``store`` keeps the followers' state (:class:`PostgresChainStore` in a worker); the
    locks take connections of their own, from ``settings``.

    ``follower_options`` are passed to each :class:`ChainFollower` (tests shorten
    intervals or set a start block).
    """

    def __init__(
        self,
        settings: Settings,
        project: Project | ProjectAt | None,
        producer: TriggerSink,
        store: ChainStore,
        *,
        env: Mapping[str, str] | None = None,
        lock_retry: float = 3.0,
        lock_check: float = 2.0,
        refresh: float = 1.0,
        follower_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.settings = settings
        self.current = project_reader(project)
        self.producer = producer
        self.store = store
        self.env = env
        self.lock_retry = lock_retry
        self.lock_check = lock_check
        self.refresh = refresh
        self.follower_options = dict(follower_options or {})
        self.followers: dict[str, ChainFollower] = {}
        """The networks this process follows now (it holds their locks)."""

    @property
    def networks(self) -> list[str]:
        """The networks the current project listens to."""
        project = self.current()
        return event_networks(project) if project is not None else []

    async def run(self) -> None:
        """Contend for every network's lock and follow those won, until cancelled; take up
        what each deploy changes."""
        running: dict[str, tuple[Any, asyncio.Task[None]]] = {}
        try:
            while True:
                project = self.current()
                wanted = {
                    network: following(project, network)
                    for network in (event_networks(project) if project is not None else [])
                }
                for network, (basis, task) in list(running.items()):
                    if wanted.get(network) == basis:
                        continue
                    del running[network]
                    await _stopped(task)
                    log.info("the listeners on %s changed with a deploy", network)
                for network, basis in wanted.items():
                    if network not in running:
                        assert project is not None
                        task = asyncio.create_task(
                            self._network(network, project), name=f"rflow.chain-ingress {network}"
                        )
                        task.add_done_callback(_log_failure)
                        running[network] = (basis, task)
                await asyncio.sleep(self.refresh)
        finally:
            for _, task in running.values():
                await _stopped(task)

    async def _network(self, network: str, project: Project) -> None:
        try:
            follower = ChainFollower(
                self.settings,
                project,
                self.producer,
                self.store,
                network,
                env=self.env,
                **self.follower_options,
            )
        except LookupError as exc:
            # No RPC URL for the network: a configuration error no retry can fix.
            log.error("not following %s: %s", network, exc)
            return
        if not follower.listeners:
            return
        while True:
            conn: psycopg.AsyncConnection | None = None
            try:
                conn = await storage.connect(self.settings)
                if await chain_store.try_lock(conn, self.settings.database_schema, network):
                    log.info("took the follower lock of %s", network)
                    await self._follow(conn, follower)
            except StorageError as exc:
                log.warning("follower lock of %s lost or unavailable: %s", network, exc)
            finally:
                if conn is not None:
                    # Closing the session releases the lock if it was held.
                    with contextlib.suppress(psycopg.Error, OSError):
                        await conn.close()
            await asyncio.sleep(self.lock_retry)

    async def _follow(self, conn: psycopg.AsyncConnection, follower: ChainFollower) -> None:
        """Run ``follower`` until the lock's connection fails (then raise StorageError)."""
        network = follower.network
        self.followers[network] = follower
        task = asyncio.create_task(follower.run(), name=f"rflow.chain {network}")
        try:
            while not task.done():
                done, _ = await asyncio.wait({task}, timeout=self.lock_check)
                if not done:
                    # Without the session the lock is gone: stop before another worker
                    # starts following the same network.
                    await chain_store.alive(conn)
        finally:
            self.followers.pop(network, None)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _stopped(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait until it has stopped (its lock connection closed)."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s stopped: %r", task.get_name(), task.exception())


class ChainIngressService(IngressService):
    """Runs :class:`ChainIngress` for the event triggers and event waits of a Faust app's
    current project."""

    what = "chain ingress"

    @property
    def ingress(self) -> ChainIngress | None:
        return self.loop_runner  # type: ignore[return-value]

    def build(self, runtime: Runtime, producer: TriggerSink) -> ChainIngress:
        return ChainIngress(
            runtime.settings,
            lambda: runtime.project,
            producer,
            PostgresChainStore(runtime.database),
            env=runtime.env,
        )
