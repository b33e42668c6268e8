"""The three engines of the peers benchmark, each set up and driven as its users do.

Every engine runs the same workflow (bench/bench_pipeline.py's, with a concurrency group):

    state_set last_seq = trigger.seq  ->  choose on trigger.priority  ->  notify the sink

and is started fresh (its own topics, schema or data directory) and removed afterwards.
``fire`` starts one run the way a user's system would, and returns once the engine has
acknowledged it durably:

- rflow: one trigger record produced to ``rflow.triggers`` as docs/producing-triggers.md
  shows (aiokafka, ``acks=all``, idempotent producer, key = the concurrency group), for a
  worker started as that page says (``rflow worker``
  with ``RFLOW_PROJECT``, which creates its topics and tables);
- Restate: a one-way call to its HTTP ingress, ``POST /Bench/<group>/run/send`` with an
  ``idempotency-key`` (202 Accepted once the invocation is in Restate's log), for a
  virtual object ``Bench`` keyed by the group (bench/peers/restate_service.py);
- DBOS: ``DBOSClient.enqueue`` (what DBOS offers a system outside the application) on a
  queue partitioned by the group with one workflow at a time per partition, workflow id =
  the trigger key, for a DBOS application process (bench/peers/dbos_app.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import psycopg
from _cpu import stack_pids
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from measure import BenchError, Ports, Process, wait_until
from psycopg import sql

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BENCH_DIR = REPO / ".bench"
RESTATE_BIN = BENCH_DIR / "npm/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
WORKFLOW = "bench"
# The role every engine's Postgres sessions use: the stack's server runs with
# synchronous_commit=off, so the role turns it on for the benchmark's sessions (rflow's
# worker sets its own connection options, so a URL parameter would not reach it).
ROLE = "peers_bench"


@dataclass(frozen=True)
class Firing:
    """One trigger: what the workflow reads, and the id the sink will see."""

    trigger_key: str
    group: str
    seq: int

    @property
    def priority(self) -> str:
        return "high" if self.seq % 2 else "low"

    @property
    def sink_id(self) -> str:
        # rflow's notify carries Idempotency-Key <workflow>:<trigger key>:<step id>; the
        # peers send the same, so one sink counts all three alike.
        return f"{WORKFLOW}:{self.trigger_key}:tell"

    def payload(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "priority": self.priority,
            "group": self.group,
            "trigger_key": self.trigger_key,
        }


@dataclass
class Stack:
    """The local stack the benchmark runs on: Kafka for rflow, Postgres for rflow and
    DBOS, and the PIDs of both servers (from scripts/stack) to meter their CPU."""

    brokers: str
    admin_url: str  # the stack's own role: creates the benchmark's role
    bench_url: str  # the benchmark's role, synchronous_commit on
    kafka_pids: list[int]
    postgres_pids: list[int]

    @classmethod
    def from_env(cls) -> Stack:
        brokers = os.environ.get("RFLOW_KAFKA_BROKERS")
        url = os.environ.get("RFLOW_DATABASE_URL")
        protocol = os.environ.get("RFLOW_KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT"
        if protocol != "PLAINTEXT":
            # This driver runs in the peers' own virtualenv, without rflow and the one
            # place that builds rflow's Kafka clients (rflow.streams.kafka).
            raise BenchError(
                f"RFLOW_KAFKA_SECURITY_PROTOCOL={protocol}: the peers benchmark runs on a "
                "plaintext stack only (`scripts/stack up`, not --secure)"
            )
        if not brokers or not url:
            raise BenchError(
                "RFLOW_KAFKA_BROKERS and RFLOW_DATABASE_URL are not set: start the stack "
                '(`scripts/stack up`) and load its settings (`eval "$(scripts/stack env)"`)'
            )
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
            raise BenchError(
                f"RFLOW_DATABASE_URL: expected postgresql://user@host:port/db, got {url!r}"
            )
        netloc = f"{ROLE}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        bench_url = urlunsplit(("postgresql", netloc, parts.path, parts.query, ""))
        return cls(
            brokers=brokers,
            admin_url=url,
            bench_url=bench_url,
            kafka_pids=stack_pids(REPO, "kafka"),
            postgres_pids=stack_pids(REPO, "postgres"),
        )

    async def prepare(self) -> dict[str, str]:
        """Create (or update) the benchmark's role; return the durability settings the
        Kafka broker and the role's Postgres sessions have."""
        async with await psycopg.AsyncConnection.connect(self.admin_url, autocommit=True) as conn:
            database = (await (await conn.execute("SELECT current_database()")).fetchone())[0]
            exists = await (
                await conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,))
            ).fetchone()
            if not exists:
                await conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(ROLE)))
            await conn.execute(
                sql.SQL("ALTER ROLE {} SET synchronous_commit = on").format(sql.Identifier(ROLE))
            )
            await conn.execute(
                sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                    sql.Identifier(database), sql.Identifier(ROLE)
                )
            )
        async with await psycopg.AsyncConnection.connect(self.bench_url) as conn:
            settings = {}
            for name in ("synchronous_commit", "fsync"):
                settings[f"postgres {name}"] = (
                    await (
                        await conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name)))
                    ).fetchone()
                )[0]
        if settings["postgres synchronous_commit"] != "on":
            raise BenchError(f"role {ROLE}: synchronous_commit is not on ({settings})")
        admin = AIOKafkaAdminClient(bootstrap_servers=self.brokers, request_timeout_ms=15000)
        await admin.start()
        try:
            broker = (await admin.describe_cluster())["brokers"][0]["node_id"]
            wanted = ("log.flush.interval.messages", "log.flush.interval.ms", "min.insync.replicas")
            resource = ConfigResource(ConfigResourceType.BROKER, str(broker), dict.fromkeys(wanted))
            response = await admin.describe_configs([resource])
            for described in response[0].resources:
                for name, value, *_ in described[4]:
                    settings[f"kafka {name}"] = str(value)
        finally:
            await admin.close()
        return settings


def _clean_env(*prefixes: str) -> dict[str, str]:
    """This process's environment without the settings of the engines."""
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


async def _drop_schema(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


class Engine:
    """One engine under test: ``start``, ``fire`` firings, ``stop``."""

    name = ""
    label = ""  # what the CPU of ``processes()`` covers

    def __init__(self, stack: Stack, ports: Ports, workdir: Path, sink_url: str) -> None:
        self.stack = stack
        self.ports = ports
        self.workdir = workdir
        self.sink_url = sink_url
        self.tag = uuid.uuid4().hex[:8]
        self.running: list[Process] = []

    async def start(self) -> None:
        raise NotImplementedError

    async def fire(self, firing: Firing) -> None:
        raise NotImplementedError

    def processes(self) -> list[int]:
        return [p.pid for p in self.running]

    def alive(self) -> None:
        for process in self.running:
            process.check_alive()

    def durability(self) -> str:
        raise NotImplementedError

    async def stop(self) -> None:
        for process in reversed(self.running):
            process.stop()
        self.running.clear()


# --- rflow ----------------------------------------------------------------------------

PROJECT = """\
channels:
  hook: {{ type: webhook, url: "{sink}/notify" }}
workflows:
  bench:
    # The driver is an outside producer (no proof of rflow's ingress): the manual trigger
    # takes its firings, with exactly these inputs.
    trigger: {{ manual: {{ inputs: [seq, priority, group, trigger_key] }} }}
    concurrency:
      group: "${{{{ trigger.group }}}}"
    steps:
      - id: remember
        state_set: {{ last_seq: "${{{{ trigger.seq }}}}" }}
      - id: route
        choose:
          branches:
            - when: {{ value: "${{{{ trigger.priority }}}}", op: equals, to: high }}
              goto: tell
          default: continue
      - id: tell
        notify: {{ channel: hook, message: "run ${{{{ trigger.seq }}}} (${{{{ trigger.priority }}}})" }}
"""


class Rflow(Engine):
    """``rflow worker`` from the project's virtualenv, fed by an aiokafka producer."""

    name = "rflow"
    label = "rflow worker"

    def __init__(
        self, *args: Any, grouped: bool = True, command: Path | None = None, workers: int = 1
    ) -> None:
        super().__init__(*args)
        self.grouped = grouped
        self.workers = workers
        if workers > 1:
            self.label = f"{workers} rflow workers"
        self.command = command or REPO / ".venv" / "bin" / "rflow"
        self.prefix = f"peers{self.tag}."
        self.app_id = f"rflow-peers{self.tag}"
        self.schema = f"peers_{self.tag}"
        self.topic = self.prefix + "rflow.triggers"
        self.producer: AIOKafkaProducer | None = None
        self.web_ports: list[int] = []

    async def start(self) -> None:
        rflow = self.command
        if not rflow.exists():
            raise BenchError(f"{rflow} is missing: run scripts/bootstrap (or see --rflow)")
        project = self.workdir / "rflow-project"
        project.mkdir()
        text = PROJECT.format(sink=self.sink_url)
        if not self.grouped:
            text = text.replace('    concurrency:\n      group: "${{ trigger.group }}"\n', "")
        (project / "bench.yaml").write_text(text)
        for n in range(1, self.workers + 1):
            # One consumer group: each worker starts, then all are ready once the
            # group has shared the partitions out.
            await self.start_worker(rflow, project, n)

    async def start_worker(self, rflow: Path, project: Path, n: int) -> None:
        web_port = self.ports.take()
        env = _clean_env("RFLOW_") | {
            "RFLOW_KAFKA_BROKERS": self.stack.brokers,
            "RFLOW_DATABASE_URL": self.stack.bench_url,
            "RFLOW_DATABASE_SCHEMA": self.schema,
            "RFLOW_TOPIC_PREFIX": self.prefix,
            "RFLOW_APP_ID": self.app_id,
            "RFLOW_WEB_PORT": str(web_port),
            "RFLOW_DATA_DIR": str(self.workdir / f"rflow-data-{n}"),
            "RFLOW_PROJECT": str(project),
            # A worker needs the keys rflow's ingresses vouch with (scripts/stack env).
            **{
                name: os.environ[name]
                for name in ("RFLOW_INGRESS_KEYS", "RFLOW_INGRESS_KEYS_FILE")
                if os.environ.get(name)
            },
        }
        log = self.workdir / ("rflow-worker.log" if n == 1 else f"rflow-worker-{n}.log")
        worker = Process("rflow worker", [str(rflow), "worker"], env, log)
        self.running.append(worker)
        self.web_ports.append(web_port)

        async with aiohttp.ClientSession() as http:

            async def ready() -> bool:
                for port in self.web_ports:
                    try:
                        async with http.get(f"http://127.0.0.1:{port}/rflow/ready/") as response:
                            if not (
                                response.status == 200
                                and (await response.json()).get("ready") is True
                            ):
                                return False
                    except aiohttp.ClientError:
                        return False
                return True

            await wait_until(
                ready, timeout=180, what="the rflow workers to be ready", alive=self.alive
            )
        if self.producer is not None:
            return
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.stack.brokers, acks="all", enable_idempotence=True
        )
        await self.producer.start()

    async def fire(self, firing: Firing) -> None:
        assert self.producer is not None
        group = firing.group if self.grouped else None
        record = {
            "kind": "trigger",
            "v": 1,
            "workflow": WORKFLOW,
            "trigger_key": firing.trigger_key,
            "group": group,
            "source": "manual",
            "payload": firing.payload(),
            "received_at": datetime.now(UTC).isoformat(),
        }
        key = group if group is not None else firing.trigger_key
        sent = await self.producer.send(
            self.topic, key=key.encode(), value=json.dumps(record).encode()
        )
        await sent

    def durability(self) -> str:
        return (
            "Kafka acks=all for the trigger records and for the worker's own writes, broker "
            "defaults; the worker's Postgres sessions synchronous_commit=on"
        )

    async def stop(self) -> None:
        if self.producer is not None:
            await self.producer.stop()
        await super().stop()
        admin = AIOKafkaAdminClient(bootstrap_servers=self.stack.brokers, request_timeout_ms=15000)
        await admin.start()
        try:
            mine = [
                t
                for t in await admin.list_topics()
                if t.startswith((self.prefix, self.app_id + "-"))
            ]
            if mine:
                await admin.delete_topics(mine, timeout_ms=15000)
        finally:
            await admin.close()
        await _drop_schema(self.stack.admin_url, self.schema)


# --- Restate --------------------------------------------------------------------------

RESTATE_VERSION = "1.7.12"
# Restate's log (bifrost over its log-server) and its local loglet fsync their RocksDB WAL
# before acknowledging, by default; Kafka (broker defaults) and the stack's Postgres
# (fsync=off) acknowledge once a write has reached the operating system. With equal
# durability every side acknowledges at that point: the WAL is written, not fsynced.
RESTATE_NO_FSYNC = {
    "RESTATE_LOG_SERVER__ROCKSDB_DISABLE_WAL_FSYNC": "true",
    "RESTATE_BIFROST__LOCAL__ROCKSDB_DISABLE_WAL_FSYNC": "true",
}


class Restate(Engine):
    """restate-server (single node, its defaults) and the Python service it invokes."""

    name = "restate"
    label = "restate-server + Python service"

    def __init__(self, *args: Any, fsync: bool = False) -> None:
        super().__init__(*args)
        self.fsync = fsync
        if fsync:
            self.name = "restate-fsync"
        self.session: aiohttp.ClientSession | None = None

    def _env(self) -> dict[str, str]:
        env = _clean_env("RESTATE_") | {
            "RESTATE_BIND_IP": "127.0.0.1",
            "RESTATE_BIND_PORT": str(self.fabric_port),
            "RESTATE_INGRESS__BIND_PORT": str(self.ingress_port),
            "RESTATE_ADMIN__BIND_PORT": str(self.admin_port),
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_LOG_DISABLE_ANSI_CODES": "true",
        }
        return env if self.fsync else env | RESTATE_NO_FSYNC

    async def start(self) -> None:
        if not RESTATE_BIN.exists():
            raise BenchError(f"{RESTATE_BIN} is missing: bench/bench_peers.py installs it")
        self.fabric_port, self.ingress_port, self.admin_port, service_port = (
            self.ports.take() for _ in range(4)
        )
        data = self.workdir / "restate-data"
        server = Process(
            "restate-server",
            [str(RESTATE_BIN), "--no-logo", "--base-dir", str(data), "--node-name", "bench"],
            self._env(),
            self.workdir / "restate-server.log",
        )
        self.running.append(server)
        self.session = aiohttp.ClientSession()
        admin = f"http://127.0.0.1:{self.admin_port}"
        self.ingress = f"http://127.0.0.1:{self.ingress_port}"

        async def answers(url: str) -> bool:
            assert self.session is not None
            try:
                async with self.session.get(url) as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await wait_until(
            lambda: answers(f"{admin}/health"),
            timeout=120,
            what="restate-server's admin API",
            alive=self.alive,
        )
        await wait_until(
            lambda: answers(f"{self.ingress}/restate/health"),
            timeout=120,
            what="restate-server's ingress",
            alive=self.alive,
        )
        service = Process(
            "Restate service",
            [sys.executable, str(HERE / "restate_service.py")],
            _clean_env("PEERS_")
            | {"PEERS_PORT": str(service_port), "PEERS_SINK_URL": self.sink_url},
            self.workdir / "restate-service.log",
        )
        self.running.append(service)
        await wait_until(
            lambda: _listening(service_port),
            timeout=60,
            what="the Restate service to listen",
            alive=self.alive,
        )
        body = {"uri": f"http://127.0.0.1:{service_port}"}
        async with self.session.post(f"{admin}/deployments", json=body) as response:
            if response.status not in (200, 201):
                raise BenchError(
                    f"registering the Restate service: HTTP {response.status}: {await response.text()}"
                )

    async def fire(self, firing: Firing) -> None:
        assert self.session is not None
        url = f"{self.ingress}/Bench/{firing.group}/run/send"
        headers = {"idempotency-key": firing.trigger_key}
        async with self.session.post(url, json=firing.payload(), headers=headers) as response:
            if response.status not in (200, 202):
                raise BenchError(
                    f"Restate ingress: HTTP {response.status}: {await response.text()}"
                )
            await response.read()

    def durability(self) -> str:
        dump = subprocess.run(
            [str(RESTATE_BIN), "--dump-config"],
            env=self._env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        section = ""
        found = []
        for line in dump.splitlines():
            if line.startswith("["):
                section = line.strip("[]")
            elif "fsync" in line or line.startswith(("default-replication", "default-provider")):
                found.append(f"{section + '.' if section else ''}{line.replace(' ', '')}")
        return ("its defaults as shipped: " if self.fsync else "its defaults but: ") + ", ".join(
            found
        )

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()
        await super().stop()
        shutil.rmtree(self.workdir / "restate-data", ignore_errors=True)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


# --- DBOS -----------------------------------------------------------------------------


class Dbos(Engine):
    """A DBOS application process on the stack's Postgres, fed by ``DBOSClient``."""

    name = "dbos"
    label = "DBOS application"
    APP = "bench-peers"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.schema = f"peers_dbos_{self.tag}"
        self.client: Any = None

    async def start(self) -> None:
        from dbos import DBOSClient

        log = self.workdir / "dbos-app.log"
        app = Process(
            "DBOS application",
            [sys.executable, str(HERE / "dbos_app.py")],
            _clean_env("PEERS_", "DBOS_")
            | {
                "PEERS_DATABASE_URL": self.stack.bench_url,
                "PEERS_SCHEMA": self.schema,
                "PEERS_SINK_URL": self.sink_url,
                "PEERS_APP": self.APP,
            },
            log,
        )
        self.running.append(app)
        await wait_until(
            lambda: re.search(r"^peers: ready$", log.read_text(errors="replace"), re.M),
            timeout=120,
            what="the DBOS application to launch",
            alive=self.alive,
        )
        self.client = DBOSClient(
            system_database_url=self.stack.bench_url,
            dbos_system_schema=self.schema,
            application_name=self.APP,
        )

    async def fire(self, firing: Firing) -> None:
        options = {
            "workflow_name": WORKFLOW,
            "queue_name": WORKFLOW,
            "workflow_id": firing.trigger_key,
            "queue_partition_key": firing.group,
        }
        await self.client.enqueue_async(options, firing.payload())

    def durability(self) -> str:
        return "its system database and the state row on Postgres, synchronous_commit=on"

    async def stop(self) -> None:
        if self.client is not None:
            self.client.destroy()
        await super().stop()
        await _drop_schema(self.stack.admin_url, self.schema)
