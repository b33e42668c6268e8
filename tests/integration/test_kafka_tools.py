"""Kafka's own command-line tools, on the PATH ``scripts/stack env`` exports: every
``kafka-*`` command the README and ``docs/`` name runs as written, against the real stack
and a real worker, and answers what they say."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rflow import storage, workers
from rflow.codecs import TriggerRecord
from rflow.settings import Settings
from rflow.storage import dead_letters
from rflow.streams.producer import produce_trigger
from tests.conftest import REPO
from tests.integration.harness import wait_until

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

TOOLS = (
    "kafka-topics",
    "kafka-consumer-groups",
    "kafka-console-producer",
    "kafka-console-consumer",
    "kafka-acls",
)
PROJECT = """
channels:
  ops: { type: log }
workflows:
  hello:
    trigger: { manual: {} }
    steps:
      - id: greet
        command: { name: log, args: { message: hi } }
"""
_FENCE = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```", re.S | re.M)
_ANSWERS = re.compile(r"\s+#\s*answers:\s*(?P<text>.+)$")
# A part of a page rendered from the code (scripts/docs): the kafka-acls commands of
# docs/kafka-security.md are templates for a secured cluster (BROKERS, admin.properties),
# applied as `rflow kafka acls` prints them by tests/integration/test_kafka_security.py.
_GENERATED = re.compile(r"<!-- generated: (\S+) -->.*?<!-- end: \1 -->", re.S)


def documented_commands() -> list[tuple[str, str, str | None]]:
    """Every shell command line of the README and docs/ that runs one of Kafka's tools,
    outside the parts generated from the code: ``(page, command, what it answers when a
    '# answers:' comment says)``."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in _FENCE.findall(_GENERATED.sub("", page.read_text())):
            for line in block.replace("\\\n", " ").splitlines():
                if not any(line.lstrip().startswith(t) or f"| {t}" in line for t in TOOLS):
                    continue
                answers = _ANSWERS.search(line)
                command = line[: answers.start()] if answers else line
                found.append((page.name, command.strip(), answers["text"] if answers else None))
    return found


def in_shell(command: str, settings: Settings) -> subprocess.CompletedProcess[str]:
    """``command`` in bash after ``eval "$(scripts/stack env)"``, as a reader would run it,
    with the test worker's prefix and group."""
    env = {
        **os.environ,
        "RFLOW_TOPIC_PREFIX": settings.topic_prefix,
        "RFLOW_APP_ID": settings.app_id,
    }
    env.pop("RFLOW_KAFKA_BROKERS", None)  # scripts/stack env sets it
    return subprocess.run(
        ["bash", "-c", f'set -o pipefail; eval "$(scripts/stack env)"; {command}'],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_pages_name_each_tool():
    named = {tool for _, command, _ in documented_commands() for tool in TOOLS if tool in command}
    assert named == set(TOOLS)


def test_every_tool_is_on_the_path_the_stack_exports_under_both_names(settings):
    found = in_shell(
        "for t in " + " ".join(f"{t} {t}.sh" for t in TOOLS) + '; do command -v "$t"; done',
        settings,
    )
    assert found.returncode == 0, found.stderr
    paths = found.stdout.split()
    assert len(paths) == 2 * len(TOOLS)
    assert all(Path(p).parent == REPO / ".stack" / "kafka" / "bin" for p in paths), paths
    version = in_shell("kafka-topics.sh --version", settings)
    assert version.returncode == 0 and version.stdout.startswith("4."), version


async def test_every_documented_kafka_command_runs_as_written(settings, worker_factory, tmp_path):
    path = tmp_path / "project.yaml"
    path.write_text(PROJECT)
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    # A firing for the console consumer to read from the beginning.
    await produce_trigger(
        settings,
        TriggerRecord(
            workflow="hello",
            trigger_key="tools:1",
            source="manual",
            received_at=datetime.now(UTC),
        ),
    )
    client_id = workers.client_id(socket.gethostname(), worker.settings.web_port)
    commands = documented_commands()
    assert len(commands) >= len(TOOLS)
    for page, command, answers in commands:
        done = await asyncio.to_thread(in_shell, command, settings)
        said = done.stdout + done.stderr
        where = f"{page}: {command}\n--- exit {done.returncode} ---\n{said[-3000:]}"
        if answers is not None:
            assert answers in said, where
            continue
        assert done.returncode == 0, where
        if "kafka-topics" in command and "--list" in command:
            assert f"{settings.topic_prefix}rflow.triggers" in done.stdout, where
        if "kafka-topics" in command and "--describe" in command:
            assert "PartitionCount: 8" in done.stdout, where
        if "kafka-consumer-groups" in command and "--members" in command:
            assert client_id in done.stdout, where
        if "kafka-console-consumer" in command:
            assert "Processed a total of 1 messages" in done.stderr, where

    # The console producer's firing reached the partition its key hashes to: the worker
    # read it and refused it only because no workflow order-paid is deployed here.
    async def refused() -> list[dict]:
        conn = await storage.connect(settings)
        async with conn:
            rows = await dead_letters.recent(conn, limit=20)
        return [row for row in rows if row["record_key"] == "acct-42"]

    [letter] = await wait_until(refused, timeout=30, what="the console producer's firing")
    assert letter["reason"].startswith("unknown workflow 'order-paid'"), letter
