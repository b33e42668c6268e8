"""The shape every worker-side ingress loop shares: started with the app, only when the
project needs it, with its own acknowledged producer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from mode import Service

from rflow.streams.producer import Producer

if TYPE_CHECKING:
    from rflow.lang import Project
    from rflow.streams.app import RflowApp, Runtime


class Loop(Protocol):
    async def run(self) -> None: ...


class IngressService(Service):
    """Runs one ingress :class:`Loop` for the workflows of a Faust app's project.

    Add it to the app after its database (``app.add_dependency``). It does nothing when
    :meth:`needed` says the project has no use for it. Its producer outlives its task:
    mode cancels the task before it closes the service's async contexts.
    """

    what = "ingress"

    def __init__(self, app: RflowApp, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app = app
        self.loop_runner: Loop | None = None

    def needed(self, project: Project | None) -> bool:
        """Whether ``project`` has anything for this ingress to do."""
        raise NotImplementedError

    def build(self, runtime: Runtime, producer: Producer) -> Loop:
        """The loop to run, given the app's runtime and a started producer."""
        raise NotImplementedError

    async def on_start(self) -> None:
        runtime = self.app.rflow
        if not self.needed(runtime.project):
            return
        if runtime.database is None:
            raise RuntimeError(f"{self.what} needs the app's database: add it first")
        producer = await self.add_async_context(Producer(runtime.settings))
        self.loop_runner = self.build(runtime, producer)

    @Service.task
    async def _run_loop(self) -> None:
        if self.loop_runner is not None:
            await self.loop_runner.run()
