"""The intake agent: accepts trigger firings into the ``triggers`` table, once each."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rflow.agents.dead_letters import send_dead_letter
from rflow.codecs import DecodeError, TriggerRecord, decode

if TYPE_CHECKING:
    from rflow.streams.app import RflowApp

log = logging.getLogger(__name__)


def attach(app: RflowApp) -> None:
    """Declare the intake agent on ``app``."""
    triggers = app.rflow.tables.triggers

    @app.agent(app.rflow.topics.triggers, name="rflow.intake", concurrency=1)
    async def intake(stream):
        """Decode trigger firings, dead-letter bad ones, record each new firing once."""
        async for event in stream.events():
            try:
                record = decode(event.value, TriggerRecord)
            except DecodeError as exc:
                await send_dead_letter(app, event.message, exc.reason)
                continue
            if triggers.get(record.trigger_key) is not None:
                log.info("duplicate delivery of trigger %s ignored", record.trigger_key)
                continue
            triggers[record.trigger_key] = record.model_dump(mode="json")
