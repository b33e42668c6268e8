"""The projector agent: run journals into the Postgres read model, in batches."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rflow.agents.dead_letters import send_dead_letter
from rflow.codecs import DecodeError, RunJournal, decode
from rflow.engine import Journal, Settle, WaitResolved
from rflow.engine.children import answer
from rflow.storage import StorageError, Unavailable, runs, waits

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)
BATCH = 500
"""Journal records projected in one transaction at most."""


def attach(app: RflowApp) -> None:
    """Declare the projector agent on ``app``."""
    runtime = app.rflow
    consumption = runtime.consumption
    topic = runtime.topics.events.get_topic_name()

    @app.agent(runtime.topics.events, name="rflow.projector", concurrency=1)
    async def project(stream):
        """Upsert runs, step logs and dead-lettered runs from journal entries, in batches."""
        async for batch in consumption.batches(stream, topic, BATCH):
            await consumption.handle(
                "the projector", batch, project_batch, dead_letter, passes=(Unavailable,)
            )

    async def dead_letter(message, reason: str) -> None:
        await send_dead_letter(app, message, reason)

    async def project_batch(batch: list) -> None:
        """Project a batch's journals; dead-letter what cannot be read or stored."""
        decoded = []
        for event in batch:
            try:
                decoded.append((event.message, decode(event.value, RunJournal).journal))
            except DecodeError as exc:
                await send_dead_letter(app, event.message, exc.reason)
        if not decoded:
            return
        entries = [entry for _, journal in decoded for entry in journal]
        try:
            await runtime.database.run(
                lambda conn, entries=entries: runs.project(conn, entries), what="projection"
            )
        except Unavailable:
            raise  # the worker is stopping: these records are read again, not refused
        except StorageError:
            # One entry the database refuses must not hold back (or crash away) the
            # rest: project one by one, dead-lettering the record of what is refused.
            for message, journal in decoded:
                for entry in journal:
                    try:
                        await runtime.database.run(
                            lambda conn, entry=entry: runs.project(conn, [entry]),
                            what="projection",
                        )
                    except Unavailable:
                        raise
                    except StorageError as exc:
                        await send_dead_letter(
                            app,
                            message,
                            f"the read model refused this entry ({describe(entry)}): {exc}",
                        )
        try:
            await answer_parents(entries)
        except Unavailable:
            raise  # read again: the answers are given once each (first answer wins)
        except StorageError:
            log.exception("answering the parents of child runs failed")

    async def answer_parents(entries: list[Journal | Settle]) -> None:
        """A child run settled: answer the wait of the parent's step with how it ended and
        its outputs, then tell the parent. Read from the journal, so a worker that dies
        after settling the child cannot lose the answer; a parent not told (this worker
        dies now) is told by the sweep of answered waits."""
        answers = [
            (entry.parent.wait_id, answer(entry.run_id, entry.status, entry.outputs, entry.error))
            for entry in entries
            if isinstance(entry, Settle) and entry.parent is not None and entry.parent.wait_id
        ]
        if not answers:
            return
        rows = await runtime.database.run(
            lambda conn: waits.resolve_many(conn, answers, datetime.now(UTC)), what="child answers"
        )
        runner = runtime.runner
        for row in rows:
            event = WaitResolved(
                run_id=row["run_id"],
                path=row["path"],
                wait_id=row["wait_id"],
                payload=row["resolution"],
            )
            if runner is not None:
                await runner.effects.send_event(row["partition_key"], event)


def describe(entry: Journal | Settle) -> str:
    """Which entry of a record, for a dead letter's reason."""
    if isinstance(entry, Settle):
        return f"settle of run {entry.run_id}"
    where = f" of step {entry.path}" if entry.path else ""
    return f"{entry.event}{where} of run {entry.run_id}"
