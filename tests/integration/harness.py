"""Test harness for the real stack: worker processes, producers, condition waits."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import TopicPartition

from rflow.settings import Settings
from rflow.streams import kafka

T = TypeVar("T")


MAX_PATIENCE = 4.0
"""The most a wait is stretched on a loaded machine."""


def patience() -> float:
    """How much longer than on a quiet machine things take now: the run queue per core
    over the last minute (1 on a quiet machine, at most :data:`MAX_PATIENCE`). A slow
    run is not a lost one: waits are stretched by this, so that a test beside CPU-busy
    processes fails only on what never happens."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(MAX_PATIENCE, max(1.0, load))


async def wait_until(
    check: Callable[[], Awaitable[T | None]], *, timeout: float = 30.0, what: str = "condition"
) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds,
    stretched by the machine's load (:func:`patience`)."""
    timeout *= patience()
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.25)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class WorkerProcess:
    """An ``rflow worker`` in its own process, as a user would run it."""

    RFLOW = (sys.executable, "-m", "rflow.cli", "worker", "--no-setup", "-l", "info")
    FAUST = (sys.executable, "-m", "faust", "-A", "rflow.streams.app", "worker", "-l", "info")

    def __init__(
        self,
        settings: Settings,
        log_path: Path,
        command: tuple[str, ...] = RFLOW,
        env: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings.model_copy(update={"web_port": free_port()})
        self.log_path = log_path
        self.command = command
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        # A worker killed by a fault in native code (RocksDB, uvloop) leaves its
        # threads' tracebacks in its log.
        env = {**os.environ, "PYTHONFAULTHANDLER": "1", **self.settings.to_env(), **self.env}
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            list(self.command),
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        return self

    @property
    def auth(self) -> dict[str, str]:
        """The API's bearer token header, as the test's settings configure the worker."""
        token = self.settings.api_token
        return {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.web_port}"

    async def get(self, path: str) -> tuple[int, Any]:
        """GET ``path`` from the worker's web server: (status, JSON body); (0, None) if down."""

        def fetch() -> tuple[int, Any]:
            request = urllib.request.Request(self.url + path, headers=self.auth)
            try:
                with urllib.request.urlopen(request, timeout=2) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read() or b"null")
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                return 0, None

        return await asyncio.to_thread(fetch)

    async def wait_ready(self, timeout: float = 60.0) -> None:
        async def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.tail()}")
            status, _ = await self.get("/rflow/ready/")
            return status == 200

        try:
            await wait_until(ready, timeout=timeout, what="the worker to be ready")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- worker log ---\n{self.tail()}") from None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        """Signal the worker and wait for it to exit; SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout * patience())
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)
        finally:
            self._log.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush, as a crash."""
        self.stop(signal.SIGKILL)

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


async def topic_messages(settings: Settings, name: str | None = None) -> list[Any]:
    """Every record on this test's topics, or on its topic ``name`` (catalog name, as
    ``rflow.runs``), read from the beginning to the end offsets of now."""
    consumer = kafka.consumer(settings, enable_auto_commit=False)
    await consumer.start()
    found: list[Any] = []
    try:
        metadata = await consumer._client.fetch_all_metadata()
        wanted = settings.topic_prefix + (name or "")
        tps = [
            TopicPartition(topic, partition)
            for topic in metadata.topics()
            if (topic == wanted if name else topic.startswith(wanted))
            for partition in metadata.partitions_for_topic(topic) or ()
        ]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        pending = {tp for tp in tps if ends[tp] > 0}
        while pending:
            batch = await consumer.getmany(timeout_ms=2000)
            if not batch:
                break
            for tp, messages in batch.items():
                for message in messages:
                    found.append(message)
                    if message.offset + 1 >= ends[tp]:
                        pending.discard(tp)
    finally:
        await consumer.stop()
    return found


async def produce(settings: Settings, topic: str, key: bytes | None, value: bytes | None) -> None:
    """Produce one record to declared topic ``topic`` (prefix applied), acknowledged by all."""
    producer = kafka.producer(settings, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(settings.topic_prefix + topic, value=value, key=key)
    finally:
        await producer.stop()


async def consumer_lag(settings: Settings) -> int:
    """Records of rflow's stream topics not yet committed by the worker's group."""
    admin = kafka.admin(settings)
    consumer = kafka.consumer(settings)
    await admin.start()
    await consumer.start()
    try:
        committed = await admin.list_consumer_group_offsets(settings.app_id)
        tps = [
            TopicPartition(settings.topic_prefix + name, p)
            for name in ("rflow.triggers", "rflow.runs", "rflow.sends", "rflow.events")
            for p in range(8)
        ]
        ends = await consumer.end_offsets(tps)
        lag = 0
        for tp in tps:
            meta = committed.get(tp)
            lag += ends[tp] - (meta.offset if meta is not None and meta.offset >= 0 else 0)
        return lag
    finally:
        await consumer.stop()
        await admin.close()


TRACED = (
    "rflow.triggers",
    "rflow.state.triggers",
    "rflow.state.runs",
    "rflow.state.settled",
    "rflow.events",
)


async def trace(settings: Settings, keys: set[str]) -> list[str]:
    """Where each of ``keys`` (trigger keys, gate keys, run ids) appears on the triggers
    topic, the changelogs and the events topic, with the group's committed offsets there,
    and its row in the read model: for the report of a firing that never settled."""
    admin = kafka.admin(settings)
    consumer = kafka.consumer(settings, enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    found: list[str] = []
    try:
        committed = await admin.list_consumer_group_offsets(settings.app_id)
        await consumer.topics()  # the cluster's metadata, which partitions_for_topic reads
        for name in TRACED:
            topic = settings.topic_prefix + name
            partitions = consumer.partitions_for_topic(topic) or set()
            tps = [TopicPartition(topic, p) for p in sorted(partitions)]
            if not tps:
                continue
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                while await consumer.position(tp) < ends[tp]:
                    batch = await consumer.getmany(tp, timeout_ms=2000)
                    for message in batch.get(tp, []):
                        text = (
                            (message.key or b"").decode(errors="replace")
                            + " "
                            + (message.value or b"").decode(errors="replace")[:400]
                        )
                        if any(k in text for k in keys):
                            meta = committed.get(tp)
                            found.append(
                                f"{name}[{tp.partition}]@{message.offset} (group at "
                                f"{meta.offset if meta else None}): {text[:200]}"
                            )
    finally:
        await consumer.stop()
        await admin.close()
    found += await _read_model(settings, keys)
    return found


async def _read_model(settings: Settings, keys: set[str]) -> list[str]:
    from rflow import storage

    conn = await storage.connect(settings)
    async with conn:
        cur = await conn.execute(
            "SELECT run_id, trigger_key, status, started_at, settled_at FROM runs "
            "WHERE run_id = ANY(%s) OR trigger_key = ANY(%s)",
            (list(keys), list(keys)),
        )
        rows = await cur.fetchall()
    seen = {key for row in rows for key in row[:2]}
    lines = [f"read model: {row}" for row in rows]
    lines += [f"read model: no row for {key}" for key in sorted(keys - seen)]
    return lines
