"""The projector agent: run journals into the Postgres read model, in batches."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rflow.agents.dead_letters import send_dead_letter
from rflow.codecs import DecodeError, RunJournal, decode
from rflow.storage import runs

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)
BATCH = 500
WITHIN = 0.1


def attach(app: RflowApp) -> None:
    """Declare the projector agent on ``app``."""
    runtime = app.rflow

    @app.agent(runtime.topics.events, name="rflow.projector", concurrency=1)
    async def project(stream):
        """Upsert runs, step logs and dead-lettered runs from journal entries, in batches."""
        async for batch in stream.take_events(BATCH, within=WITHIN):
            entries = []
            for event in batch:
                try:
                    entries.append(decode(event.value, RunJournal).entry)
                except DecodeError as exc:
                    await send_dead_letter(app, event.message, exc.reason)
            if entries:
                await runtime.database.run(
                    lambda conn, entries=entries: runs.project(conn, entries), what="projection"
                )
