"""The worker's JSON-RPC endpoints (:class:`~rflow.ingress.pool.Pools`), closed when the
app stops."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mode import Service

from rflow.ingress.pool import Pools

if TYPE_CHECKING:
    from rflow.streams.app import Runtime


class Nodes(Service):
    """Owns the pools of every network the worker reads or sends on."""

    def __init__(self, runtime: Runtime, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pools = Pools(
            runtime.settings, runtime.current_project, runtime.env, observer=runtime.metrics
        )

    async def on_stop(self) -> None:
        await self.pools.close()
