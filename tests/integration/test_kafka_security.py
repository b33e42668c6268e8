"""rflow over a secured Kafka: SASL_SSL with SCRAM, TLS from the stack's own certificate
authority, KRaft's StandardAuthorizer, and exactly the ACLs `rflow kafka acls` prints.

The broker is the one `scripts/stack up --secure` runs: the stack's own when it runs
secured, else one of this module's, started by the same script beside the plain stack
(its ports are the stack's Kafka port + 3, + 4 and + 5) and stopped at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    TopicAuthorizationFailedError,
)

from rflow.engine.keys import run_id
from rflow.settings import Settings
from rflow.streams import kafka, topics
from tests.conftest import REPO
from tests.integration.test_kafka_native import kcat_connection
from tests.integration.test_runs import run_status

pytestmark = pytest.mark.usefixtures("schema")

STACK = REPO / "scripts" / "stack"
KAFKA_FIELDS = (
    "kafka_brokers",
    "kafka_security_protocol",
    "kafka_sasl_mechanism",
    "kafka_sasl_username",
    "kafka_sasl_password",
    "kafka_ssl_cafile",
    "kafka_ssl_certfile",
    "kafka_ssl_keyfile",
)
PROJECT = """
workflows:
  order-paid:
    trigger:
      manual: {{ inputs: [account, order] }}
    concurrency:
      group: "${{{{ trigger.account }}}}"
    steps:
      - id: pay
        http_call:
          url: "{sink}/paid"
          method: POST
          body: {{ order: "${{{{ trigger.order }}}}" }}
"""


class SecuredKafka:
    """A running secured broker of ``scripts/stack``, and its principals' connections."""

    def __init__(self, env: dict[str, str], *, own: bool) -> None:
        self.env = env
        self.own = own
        """Whether this module started it (and stops it, ACLs and all)."""

    def stack(self, *args: str) -> str:
        result = subprocess.run(
            [str(STACK), *args], env=self.env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    def connection(self, principal: str) -> dict[str, Any]:
        """The Kafka settings of ``principal`` (rflow, producer, admin), as the stack's
        ``env --as`` exports them."""
        exported = {}
        for line in self.stack("env", "--as", principal).splitlines():
            if line.startswith("export "):
                name, _, value = line.removeprefix("export ").partition("=")
                exported[name] = value
        loaded = Settings.from_env(exported)
        return {name: getattr(loaded, name) for name in KAFKA_FIELDS}

    def secure_dir(self) -> Path:
        exported = dict(
            line.removeprefix("export ").split("=", 1)
            for line in self.stack("env").splitlines()
            if line.startswith("export ")
        )
        return Path(exported["RFLOW_KAFKA_SSL_CAFILE"]).parent


@pytest.fixture(scope="module")
def secured() -> Iterator[SecuredKafka]:
    if os.environ.get("RFLOW_KAFKA_SECURITY_PROTOCOL") == "SASL_SSL":
        yield SecuredKafka(dict(os.environ), own=False)  # the stack runs secured
        return
    port = int(Settings.from_env().kafka_brokers.rsplit(":", 1)[1])
    env = {
        **os.environ,
        "RFLOW_STACK_DIR": str(REPO / ".stack" / "secured-kafka-test"),
        "RFLOW_STACK_KAFKA_LIBS": str(REPO / ".stack" / "kafka" / "libs"),
        "RFLOW_STACK_KAFKA_PORT": str(port + 3),
        "RFLOW_STACK_KAFKA_CONTROLLER_PORT": str(port + 4),
        "RFLOW_STACK_KAFKA_TLS_PORT": str(port + 5),
    }
    own = SecuredKafka(env, own=True)
    own.stack("up", "--secure", "--only", "kafka")
    try:
        yield own
    finally:
        own.stack("down")


@pytest.fixture
def as_rflow(settings, secured) -> Settings:
    """This test's settings, connected as principal rflow."""
    return settings.model_copy(update=secured.connection("rflow"))


@pytest.fixture
def as_producer(settings, secured) -> Settings:
    return settings.model_copy(update=secured.connection("producer"))


@pytest.fixture
def as_admin(settings, secured) -> Settings:
    return settings.model_copy(update=secured.connection("admin"))


@pytest.fixture
async def printed(secured, as_admin) -> list[str]:
    """The kafka-acls commands `rflow kafka acls` prints for this test's topic prefix and
    app id, to principal rflow and to producer."""
    config = str(secured.secure_dir() / "admin.properties")
    result = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "rflow.cli",
            "kafka",
            "acls",
            "--producer",
            "User:producer",
            "--command-config",
            config,
        ],
        env={**os.environ, **as_admin.to_env()},
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in result.stdout.splitlines() if line.startswith("kafka-acls ")]


@pytest.fixture
async def granted(secured, printed, as_admin) -> Any:
    """The printed ACLs, applied with kafka-acls as printed; removed (and the test's
    topics deleted) afterwards."""
    for command in printed:
        await asyncio.to_thread(secured.stack, "kafka-acls", *command.split()[1:])
    yield printed
    if not secured.own:  # a broker of this module's own goes, ACLs and all
        for command in printed:
            removal = command.replace(" --add ", " --remove --force ")
            await asyncio.to_thread(secured.stack, "kafka-acls", *removal.split()[1:])
    admin = kafka.admin(as_admin)
    await admin.start()
    try:
        mine = [
            name
            for name in await admin.list_topics()
            if name.startswith((as_admin.topic_prefix, as_admin.app_id + "-"))
        ]
        if mine:
            await admin.delete_topics(mine)
    finally:
        await admin.close()


def test_the_printed_acls_are_the_documented_ones(printed, as_rflow):
    """What `rflow kafka acls` grants: rflow's topics, Faust's own, the group, the
    transactional ids; the producer writes the triggers topic and nothing else."""
    prefix, app = as_rflow.topic_prefix, as_rflow.app_id
    wanted = [
        f"User:rflow --operation Read --operation Write --operation Create --topic {prefix}rflow. "
        "--resource-pattern-type prefixed",
        f"User:rflow --operation Read --operation Write --operation Create --topic {app}- "
        "--resource-pattern-type prefixed",
        f"User:rflow --operation Read --group {app} --resource-pattern-type literal",
        f"User:rflow --operation Write --transactional-id {app} --resource-pattern-type prefixed",
        f"User:producer --operation Write --topic {prefix}rflow.triggers "
        "--resource-pattern-type literal",
    ]
    assert [command.split("--allow-principal ")[1] for command in printed] == wanted


async def test_a_workflow_runs_end_to_end_with_only_the_printed_acls_and_nothing_else_is_let_in(
    granted, as_rflow, as_producer, worker_factory, sink, tmp_path, secured
):
    """One broker session, in phases: (1) a worker as principal rflow, with only the ACLs
    printed, creates its topics and runs a workflow fired by an outside producer as
    principal producer and by `rflow run`; (2) that producer is refused everywhere but
    the triggers topic; (3) a client certificate is a principal too."""
    project = tmp_path / "orders.yaml"
    project.write_text(PROJECT.format(sink=sink.url))
    # The worker creates the topics itself (no --no-setup), as principal rflow.
    setup = (sys.executable, "-m", "rflow.cli", "worker", "-l", "info")
    connection = {name: getattr(as_rflow, name) for name in KAFKA_FIELDS}
    worker = worker_factory(setup, project_path=project, **connection)
    await worker.wait_ready(timeout=120)

    # An outside producer, as principal producer, with docs/producing-triggers.md's aiokafka
    # settings.
    record = {
        "kind": "trigger",
        "v": 1,
        "workflow": "order-paid",
        "trigger_key": "orders:1",
        "group": "acct-1",
        "source": "manual",
        "payload": {"account": "acct-1", "order": 1},
        "received_at": "2026-05-06T07:08:09Z",
    }
    producer = kafka.producer(as_producer, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(
            as_producer.topic_prefix + "rflow.triggers",
            key=b"acct-1",
            value=json.dumps(record).encode(),
        )
    finally:
        await producer.stop()
    await run_status(as_rflow, run_id("order-paid", "orders:1"), "succeeded", timeout=90)

    # ... and with kcat, as docs/producing-triggers.md shows (librdkafka, over PLAIN: see
    # kcat_connection).
    line = json.dumps({**record, "trigger_key": "orders:3", "group": "acct-3",
                       "payload": {"account": "acct-3", "order": 3}})  # fmt: skip
    produced = await asyncio.to_thread(
        subprocess.run,
        [
            "kcat",
            "-P",
            *kcat_connection(as_producer),
            "-t",
            as_producer.topic_prefix + "rflow.triggers",
            "-k",
            "acct-3",
            "-X",
            "topic.partitioner=murmur2_random",
        ],
        input=line.encode() + b"\n",
        capture_output=True,
        timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    await run_status(as_rflow, run_id("order-paid", "orders:3"), "succeeded", timeout=90)

    # The CLI as principal rflow: rflow run, through the same settings.
    result = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "rflow.cli",
            "run",
            "order-paid",
            "--input",
            "account=acct-2",
            "--input",
            "order=2",
            "--key",
            "two",
            "--project",
            str(project),
            "--json",
        ],
        env={**os.environ, **as_rflow.to_env()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    [rid] = json.loads(result.stdout)["run_ids"]
    await run_status(as_rflow, rid, "succeeded", timeout=90)
    assert len(sink.keys("/paid")) == 3
    assert "Denied" not in worker.tail(2000)
    worker.stop()
    # The password is in no log line, of the worker nor of the CLI.
    password = as_rflow.kafka_sasl_password.get_secret_value()
    assert password not in worker.log_path.read_text()
    assert password not in result.stdout + result.stderr

    await the_producer_writes_only_to_the_triggers_topic(as_producer)
    await a_client_certificate_authenticates_on_the_mutual_tls_listener(as_rflow, secured)


async def test_the_broker_refuses_a_client_without_credentials(as_rflow, tmp_path):
    wrong = as_rflow.model_copy(
        update={"kafka_sasl_password": as_rflow.kafka_sasl_password.__class__("not-it")}
    )
    (tmp_path / "token").write_text("not-a-token\n")
    unoffered = as_rflow.model_copy(  # the listener offers SCRAM and PLAIN only
        update={
            "kafka_sasl_mechanism": "OAUTHBEARER",
            "kafka_sasl_oauth_token_file": tmp_path / "token",
        }
    )
    tls_only = as_rflow.model_copy(
        update={
            "kafka_security_protocol": "SSL",
            "kafka_sasl_mechanism": None,
            "kafka_sasl_username": None,
            "kafka_sasl_password": None,
        }
    )
    plaintext = tls_only.model_copy(
        update={"kafka_security_protocol": "PLAINTEXT", "kafka_ssl_cafile": None}
    )
    for who, why in (
        (wrong, "refused rflow's credentials"),
        (unoffered, "does not offer SASL OAUTHBEARER"),
        # the SASL_SSL listener hangs up on a request before the SASL handshake, and on
        # bytes that are not TLS: the message names the setting to check
        (tls_only, "closed it when rflow spoke SSL to it: .*RFLOW_KAFKA_SECURITY_PROTOCOL"),
        (plaintext, "closed it when rflow spoke PLAINTEXT to it: .*RFLOW_KAFKA_SECURITY_PROTOCOL"),
    ):
        producer = kafka.producer(who, request_timeout_ms=5000)
        with pytest.raises(KafkaError) as refused:
            await asyncio.wait_for(producer.start(), 60)
        await producer.stop()
        assert isinstance(refused.value, KafkaConnectionError) or "uthentication" in str(
            refused.value
        ), (who.kafka_display, refused.value)
        # and what rflow itself says names the cluster and why, never the password
        with pytest.raises(topics.TopicsError, match=why) as said:
            await topics.describe(who, [])
        assert who.kafka_display in str(said.value) and "not-it" not in str(said.value)
        if who is wrong:
            assert "SaslAuthenticationFailed" in str(said.value)
            assert "RFLOW_KAFKA_SASL_USERNAME" in str(said.value)


async def the_producer_writes_only_to_the_triggers_topic(as_producer: Settings) -> None:
    prefix = as_producer.topic_prefix
    producer = kafka.producer(as_producer, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(prefix + "rflow.triggers", key=b"k", value=b"{}")
        others = [
            prefix + name
            for name in (
                "rflow.runs",
                "rflow.sends",
                "rflow.events",
                "rflow.dlq",
                "rflow.state.runs",
                "rflow.state.triggers",
                "rflow.state.lanes",
            )
        ]
        for topic in others:
            with pytest.raises(TopicAuthorizationFailedError):
                await asyncio.wait_for(producer.send_and_wait(topic, key=b"k", value=b"{}"), 30)
    finally:
        await producer.stop()
    # nor read them, nor join rflow's consumer group
    consumer = kafka.consumer(as_producer, prefix + "rflow.triggers", group_id=as_producer.app_id)
    with pytest.raises(GroupAuthorizationFailedError):
        await consumer.start()
        await asyncio.wait_for(consumer.getmany(timeout_ms=5000), 30)
    await consumer.stop()
    # nor create a topic of rflow's
    with pytest.raises(topics.TopicsError):
        await topics.apply(as_producer.model_copy(update={"topic_prefix": prefix + "x."}))


async def a_client_certificate_authenticates_on_the_mutual_tls_listener(
    as_rflow: Settings, secured: SecuredKafka
) -> None:
    directory = secured.secure_dir()
    tls_port = int(as_rflow.kafka_brokers.rsplit(":", 1)[1]) + 2
    with_cert = as_rflow.model_copy(
        update={
            "kafka_brokers": f"127.0.0.1:{tls_port}",
            "kafka_security_protocol": "SSL",
            "kafka_sasl_mechanism": None,
            "kafka_sasl_username": None,
            "kafka_sasl_password": None,
            "kafka_ssl_certfile": directory / "rflow.pem",
            "kafka_ssl_keyfile": directory / "rflow.key",
        }
    )
    # CN=rflow is principal User:rflow: it may create (and see) its topics.
    result = await topics.apply(with_cert)
    declared = len(topics.Catalog.from_settings(with_cert).specs)
    assert (len(result.created), len(result.unchanged)) == (0, declared)
    without = with_cert.model_copy(update={"kafka_ssl_certfile": None, "kafka_ssl_keyfile": None})
    # The broker hangs up on a TLS alert: the handshake failed, and the message says
    # which settings give the certificate it asked for.
    with pytest.raises(topics.TopicsError, match="the TLS handshake with Kafka at") as said:
        await topics.describe(without, [])
    assert "RFLOW_KAFKA_SSL_CERTFILE" in str(said.value)
