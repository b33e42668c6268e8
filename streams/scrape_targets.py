"""Prometheus finds the workers itself: each worker writes a file-based service-discovery
target for its ``/metrics`` into ``RFLOW_METRICS_TARGETS_DIR`` while it runs.

The shipped ``scripts/compose/prometheus.yml`` reads every ``*.json`` of that directory
(``.stack/prometheus/targets/``, which ``scripts/stack env`` sets): a worker that starts
is scraped within seconds, one that stops takes its file with it, and one that was
killed leaves its file behind, so Prometheus reports it down (``up == 0``) until it
comes back on the same port or the file is removed.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from mode import Service

from rflow import workers
from rflow.settings import Settings

log = logging.getLogger(__name__)


def target_file(directory: Path, settings: Settings) -> Path:
    """Where this worker's target goes: one file per host and web port."""
    return directory / f"{workers.client_id(socket.gethostname(), settings.web_port)}.json"


def target_document(settings: Settings) -> list[dict[str, Any]]:
    """The file-SD document of one worker: its address and who it is."""
    host = socket.gethostname()
    return [
        {
            "targets": [f"127.0.0.1:{settings.web_port}"],
            "labels": {
                "rflow_worker": workers.worker_name(host, settings.web_port),
                "rflow_group": settings.app_id,
            },
        }
    ]


class ScrapeTarget(Service):
    """Writes this worker's target file when it starts, removes it when it stops."""

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        directory = settings.metrics_targets_dir
        self.path = target_file(directory, settings) if directory is not None else None

    async def on_started(self) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_suffix(".json.tmp")
            partial.write_text(json.dumps(target_document(self.settings), indent=2) + "\n")
            os.replace(partial, self.path)  # Prometheus never reads half a file
        except OSError as exc:  # metrics must never keep a worker from running
            log.warning("cannot write the Prometheus target %s: %s", self.path, exc)

    async def on_stop(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
