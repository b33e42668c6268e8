"""Where a chain follower keeps its state: the :class:`ChainStore` protocol and its
Postgres implementation on :mod:`rflow.storage.chain`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from rflow.storage import chain as tables
from rflow.storage import waits
from rflow.storage.chain import ChainState, Emission, StoredBlock

if TYPE_CHECKING:
    import psycopg

T = TypeVar("T")

__all__ = ["ChainState", "ChainStore", "Emission", "PostgresChainStore", "StoredBlock"]


class ChainStore(Protocol):
    """The stored state of followed networks (see :mod:`rflow.storage.chain`)."""

    async def load(self, network: str) -> ChainState:
        """Everything stored for ``network``."""
        ...

    async def reset(self, network: str) -> None:
        """Forget ``network`` (it is followed afresh)."""
        ...

    async def save(
        self,
        network: str,
        origin: tuple[int, str],
        *,
        blocks: Sequence[StoredBlock],
        tip: int,
        floor: int,
        cursors: Mapping[int, int],
        retracted: Sequence[str] = (),
    ) -> None:
        """Record progress atomically (see :func:`rflow.storage.chain.save`)."""
        ...

    async def record_emissions(self, network: str, emissions: Sequence[Emission]) -> None:
        """Note firings about to be produced."""
        ...

    async def emitted_from(self, network: str, block_hashes: Sequence[str]) -> list[Emission]:
        """The firings emitted from these blocks and not yet retracted."""
        ...


class Database(Protocol):
    """Runs a unit of work on a pooled connection, retrying while Postgres is away
    (:class:`~rflow.streams.database.Database` in a worker)."""

    async def run(self, work: Callable[[psycopg.AsyncConnection], Awaitable[T]], *, what: str) -> T:
        """Run ``work``; ``what`` names it in log lines."""
        ...


class PostgresChainStore:
    """:class:`ChainStore` on the ``chain_*`` tables, through ``database``."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def load(self, network: str) -> ChainState:
        return await self.database.run(
            partial(tables.load, network=network), what=f"the {network} chain cursor"
        )

    async def reset(self, network: str) -> None:
        await self.database.run(
            partial(tables.reset, network=network), what=f"resetting the {network} cursor"
        )

    async def save(
        self,
        network: str,
        origin: tuple[int, str],
        *,
        blocks: Sequence[StoredBlock],
        tip: int,
        floor: int,
        cursors: Mapping[int, int],
        retracted: Sequence[str] = (),
    ) -> None:
        await self.database.run(
            partial(
                tables.save,
                network=network,
                origin=origin,
                blocks=blocks,
                tip=tip,
                floor=floor,
                cursors=cursors,
                retracted=retracted,
            ),
            what=f"the {network} chain cursor",
        )

    async def record_emissions(self, network: str, emissions: Sequence[Emission]) -> None:
        await self.database.run(
            partial(tables.record_emissions, network=network, emissions=emissions),
            what=f"noting {len(emissions)} firings on {network}",
        )

    async def emitted_from(self, network: str, block_hashes: Sequence[str]) -> list[Emission]:
        return await self.database.run(
            partial(tables.emitted_from, network=network, block_hashes=block_hashes),
            what=f"firings of replaced {network} blocks",
        )

    async def event_waits(self, workflow: str, step: str) -> list[dict[str, Any]]:
        """Runs of ``workflow`` parked in its ``wait_for: { event }`` step ``step``."""
        return await self.database.run(
            partial(waits.event_waits, workflow=workflow, step=step),
            what=f"event waits of {workflow}",
        )

    async def resolve_wait(self, wait_id: str, answer: Any, at: datetime) -> dict[str, Any] | None:
        """Answer one wait; ``None`` when another answer came first."""
        return await self.database.run(
            partial(waits.resolve, wait_id=wait_id, resolution=answer, at=at),
            what="answering an event wait",
        )
