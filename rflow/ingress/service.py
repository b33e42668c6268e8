"""The shape every worker-side ingress loop shares: started with the app, with its own
acknowledged producer, started the first time it has a record to produce."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from mode import Service

from rflow.streams.producer import LazyProducer

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp, Runtime


class Loop(Protocol):
    async def run(self) -> None: ...


class IngressService(Service):
    """Runs one ingress :class:`Loop` for the workflows of a Faust app's current project.

    Add it to the app after its database (``app.add_dependency``). The loop runs on
    every worker, whatever the project it started with: a deploy may give it work (a
    schedule, an event trigger) at any time. Its producer starts when the loop first
    produces, so a worker without such triggers holds none, and outlives the loop's
    task: mode cancels the task before it closes the service's async contexts.
    """

    what = "ingress"

    def __init__(self, app: RflowApp, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app = app
        self.loop_runner: Loop | None = None

    def build(self, runtime: Runtime, producer: LazyProducer) -> Loop:
        """The loop to run, given the app's runtime and its producer."""
        raise NotImplementedError

    async def on_start(self) -> None:
        runtime = self.app.rflow
        if runtime.database is None:
            raise RuntimeError(f"{self.what} needs the app's database: add it first")
        producer = await self.add_async_context(LazyProducer(runtime.settings))
        self.loop_runner = self.build(runtime, producer)

    @Service.task
    async def _run_loop(self) -> None:
        if self.loop_runner is not None:
            await self.loop_runner.run()
