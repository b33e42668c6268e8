"""Every Kafka client is built from the settings in one place (rflow.streams.kafka)."""

from __future__ import annotations

import ast
import asyncio
import logging
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from rflow.settings import Settings, SettingsError
from rflow.streams import kafka
from tests.conftest import REPO

CLIENTS = {"AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient"}
FAUST_APPS = {"App", "RflowApp"}
# The peers benchmark's driver runs in a virtualenv of its own, without rflow: it
# refuses a secured stack instead (bench/peers/engines.py).
OUTSIDE = {REPO / "bench" / "peers"}


def python_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return [
        REPO / name
        for name in listed
        if not any((REPO / name).is_relative_to(outside) for outside in OUTSIDE)
    ]


def called(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def test_no_kafka_client_is_built_anywhere_else():
    found = []
    for path in python_files():
        if path == REPO / "streams" / "kafka.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and called(node) in CLIENTS:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {called(node)}(")
    assert found == [], "build it with rflow.streams.kafka instead:\n" + "\n".join(found)


def test_every_faust_app_takes_its_broker_and_credentials_from_the_settings():
    apps = []
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and called(node) in FAUST_APPS:
                spread = [
                    kw.value
                    for kw in node.keywords
                    if kw.arg is None and isinstance(kw.value, ast.Call)
                ]
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                assert any(called(value) == "faust_options" for value in spread), where
                assert not any(kw.arg == "broker" for kw in node.keywords), where
                apps.append(where)
    assert len(apps) >= 2  # the worker's app and the pipeline benchmark's baseline


def plain() -> Settings:
    return Settings.from_env({"RFLOW_KAFKA_BROKERS": "k1:9092,k2:9092"})


def test_plaintext_is_the_default_and_carries_no_credentials():
    options = kafka.client_options(plain())
    assert options == {"bootstrap_servers": "k1:9092,k2:9092", "security_protocol": "PLAINTEXT"}
    assert kafka.faust_options(plain()) == {"broker": ["kafka://k1:9092", "kafka://k2:9092"]}


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """A certificate authority, and a client certificate it signed (openssl)."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "1", "-subj", "/CN=test CA")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr",
        "-subj", "/CN=rflow")  # fmt: skip
    run("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "client.pem", "-days", "1")  # fmt: skip
    return {name: tmp_path / f"{name}" for name in ("ca.pem", "client.pem", "client.key")}


def sasl_ssl(pki: dict[str, Path], **env: str) -> Settings:
    return Settings.from_env(
        {
            "RFLOW_KAFKA_BROKERS": "127.0.0.1:9093",
            "RFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "RFLOW_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "RFLOW_KAFKA_SASL_USERNAME": "rflow",
            "RFLOW_KAFKA_SASL_PASSWORD": "pw-5eb2d0",
            "RFLOW_KAFKA_SSL_CAFILE": str(pki["ca.pem"]),
            **env,
        }
    )


def test_sasl_ssl_gives_every_client_the_same_credentials_and_tls(pki):
    settings = sasl_ssl(pki)
    options = kafka.client_options(settings)
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == (
        "rflow",
        "pw-5eb2d0",
    )
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert any(ca["subject"] == ((("commonName", "test CA"),),) for ca in context.get_ca_certs())

    credentials = kafka.faust_options(settings)["broker_credentials"]
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.protocol.value == "SASL_SSL"
    assert credentials.mechanism.value == "SCRAM-SHA-512"
    assert (credentials.username, credentials.password) == ("rflow", "pw-5eb2d0")

    # What Faust hands its own consumers and producers.
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    auth = credentials_to_aiokafka_auth(credentials)
    assert auth["security_protocol"] == "SASL_SSL"
    assert auth["sasl_plain_password"] == "pw-5eb2d0"
    assert auth["ssl_context"] is not None


def test_a_client_certificate_and_tls_only(pki):
    settings = Settings.from_env(
        {
            "RFLOW_KAFKA_SECURITY_PROTOCOL": "SSL",
            "RFLOW_KAFKA_SSL_CAFILE": str(pki["ca.pem"]),
            "RFLOW_KAFKA_SSL_CERTFILE": str(pki["client.pem"]),
            "RFLOW_KAFKA_SSL_KEYFILE": str(pki["client.key"]),
            "RFLOW_KAFKA_SSL_CHECK_HOSTNAME": "false",
        }
    )
    options = kafka.client_options(settings)
    assert options["security_protocol"] == "SSL" and "sasl_mechanism" not in options
    assert options["ssl_context"].check_hostname is False
    credentials = kafka.faust_options(settings)["broker_credentials"]
    assert isinstance(credentials, faust.SSLCredentials)
    config = kafka.librdkafka_config(settings)
    assert config["security.protocol"] == "ssl"
    assert config["ssl.certificate.location"] == str(pki["client.pem"])
    assert config["ssl.endpoint.identification.algorithm"] == "none"


def test_oauthbearer_reads_its_token_file_at_every_authentication(tmp_path):
    token = tmp_path / "token"
    token.write_text("first\n")
    settings = Settings.from_env(
        {
            "RFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "RFLOW_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            "RFLOW_KAFKA_SASL_OAUTH_TOKEN_FILE": str(token),
        }
    )
    provider = kafka.client_options(settings)["sasl_oauth_token_provider"]
    assert asyncio.run(provider.token()) == "first"
    token.write_text("renewed")
    assert asyncio.run(provider.token()) == "renewed"
    credentials = kafka.faust_options(settings)["broker_credentials"]
    assert isinstance(credentials, faust.OAuthCredentials)
    assert credentials.protocol.value == "SASL_PLAINTEXT"
    token.unlink()
    with pytest.raises(kafka.KafkaSettingsError, match="RFLOW_KAFKA_SASL_OAUTH_TOKEN_FILE="):
        asyncio.run(provider.token())


def test_a_password_from_a_file(pki, tmp_path):
    secret = tmp_path / "password"
    secret.write_text("pw-from-file\n")
    settings = sasl_ssl(
        pki, RFLOW_KAFKA_SASL_PASSWORD="", RFLOW_KAFKA_SASL_PASSWORD_FILE=str(secret)
    )
    assert kafka.client_options(settings)["sasl_plain_password"] == "pw-from-file"
    with pytest.raises(ValueError, match="both set"):
        sasl_ssl(pki, RFLOW_KAFKA_SASL_PASSWORD_FILE=str(secret))
    with pytest.raises(ValueError, match=r"RFLOW_KAFKA_SASL_PASSWORD_FILE=.*cannot read it"):
        sasl_ssl(
            pki, RFLOW_KAFKA_SASL_PASSWORD="", RFLOW_KAFKA_SASL_PASSWORD_FILE=str(tmp_path / "no")
        )


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"RFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "needs RFLOW_KAFKA_SASL_MECHANISM"),
        ({"RFLOW_KAFKA_SASL_MECHANISM": "PLAIN"}, "needs RFLOW_KAFKA_SECURITY_PROTOCOL=SASL_SSL"),
        (
            {"RFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "RFLOW_KAFKA_SASL_MECHANISM": "PLAIN"},
            "PLAIN needs RFLOW_KAFKA_SASL_USERNAME",
        ),
        (
            {
                "RFLOW_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "RFLOW_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            },
            "OAUTHBEARER needs RFLOW_KAFKA_SASL_OAUTH_TOKEN_FILE",
        ),
        ({"RFLOW_KAFKA_SSL_CAFILE": "/ca.pem"}, "does not use TLS"),
        (
            {"RFLOW_KAFKA_SECURITY_PROTOCOL": "SSL", "RFLOW_KAFKA_SSL_CERTFILE": "/c.pem"},
            "needs both RFLOW_KAFKA_SSL_CERTFILE and RFLOW_KAFKA_SSL_KEYFILE",
        ),
        ({"RFLOW_KAFKA_SECURITY_PROTOCOL": "TLS"}, "kafka_security_protocol"),
    ],
)
def test_settings_that_do_not_fit_together_say_what_to_set(env, said):
    with pytest.raises(SettingsError, match=said):
        Settings.from_env(env)


def test_an_unreadable_ca_file_names_the_variable(tmp_path):
    missing = tmp_path / "missing.pem"
    settings = Settings.from_env(
        {"RFLOW_KAFKA_SECURITY_PROTOCOL": "SSL", "RFLOW_KAFKA_SSL_CAFILE": str(missing)}
    )
    with pytest.raises(kafka.KafkaSettingsError, match=f"RFLOW_KAFKA_SSL_CAFILE={missing}"):
        kafka.client_options(settings)


def test_no_secret_shows_in_the_settings_or_in_messages(pki):
    settings = sasl_ssl(pki, RFLOW_KAFKA_SSL_KEY_PASSWORD="kp-81c2")
    for shown in (repr(settings), str(settings.model_dump()), settings.kafka_display):
        assert "pw-5eb2d0" not in shown and "kp-81c2" not in shown
    assert settings.kafka_display == "127.0.0.1:9093 (SASL_SSL SCRAM-SHA-512 as rflow)"
    assert Settings.from_env(settings.to_env()) == settings  # a child process gets them
    assert set(kafka.environment(settings)) >= {
        "RFLOW_KAFKA_BROKERS",
        "RFLOW_KAFKA_SASL_PASSWORD",
        "RFLOW_KAFKA_SSL_CAFILE",
    }


# --- why a client could not start -------------------------------------------------------


@pytest.fixture
async def stranger_tls(tmp_path: Path):
    """A TLS server on 127.0.0.1 whose certificate no CA of the settings signed."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "s.key",
         "-out", "s.pem", "-days", "1", "-subj", "/CN=127.0.0.1"],
        cwd=tmp_path, check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "s.pem", tmp_path / "s.key")

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0, ssl=context)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def refusal(client: Any, settings: Settings) -> str:
    """What :func:`kafka.start` says of ``client``, which cannot start."""
    with pytest.raises(kafka.KafkaUnavailable) as said:
        await kafka.start(client, settings)
    return str(said.value)


async def test_a_tls_handshake_refused_says_so_and_what_to_check(pki, stranger_tls):
    settings = sasl_ssl(pki, RFLOW_KAFKA_BROKERS=f"127.0.0.1:{stranger_tls}")
    message = await refusal(kafka.admin(settings, request_timeout_ms=5000), settings)
    assert message.startswith(f"the TLS handshake with Kafka at 127.0.0.1:{stranger_tls} ")
    assert "CERTIFICATE_VERIFY_FAILED" in message and "RFLOW_KAFKA_SSL_CAFILE" in message
    assert "pw-5eb2d0" not in message


async def test_plaintext_spoken_to_a_tls_listener_names_the_protocol_to_check(stranger_tls):
    settings = Settings.from_env({"RFLOW_KAFKA_BROKERS": f"127.0.0.1:{stranger_tls}"})
    message = await refusal(kafka.producer(settings, request_timeout_ms=5000), settings)
    assert message.startswith(
        f"Kafka at 127.0.0.1:{stranger_tls}: a broker took the connection and closed it when "
        f"rflow spoke PLAINTEXT to it: KafkaConnectionError: Connection at 127.0.0.1:{stranger_tls} "
        "closed ("
    ), message
    assert "RFLOW_KAFKA_SECURITY_PROTOCOL: SSL or SASL_SSL for a TLS listener" in message
    assert "or no broker answers behind it (a proxy or port forward" in message


async def serving(handler: Any) -> Any:
    return await asyncio.start_server(handler, "127.0.0.1", 0)


async def test_a_listener_that_hangs_up_is_named_and_one_that_never_answers_is_out_of_reach():
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    held: list[asyncio.StreamWriter] = []

    async def say_nothing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    closing, silent = await serving(hang_up), await serving(say_nothing)
    try:
        port = closing.sockets[0].getsockname()[1]
        settings = Settings.from_env({"RFLOW_KAFKA_BROKERS": f"127.0.0.1:{port}"})
        message = await refusal(kafka.admin(settings, request_timeout_ms=2000), settings)
        assert message.startswith(f"Kafka at 127.0.0.1:{port}: a broker took the connection")
        port = silent.sockets[0].getsockname()[1]
        settings = Settings.from_env({"RFLOW_KAFKA_BROKERS": f"127.0.0.1:{port}"})
        message = await refusal(kafka.admin(settings, request_timeout_ms=1000), settings)
        assert message.startswith(f"cannot reach Kafka at 127.0.0.1:{port}: "), message
    finally:
        for writer in held:
            writer.close()
        for server in (closing, silent):
            server.close()
            await server.wait_closed()


def test_the_broker_that_closed_is_the_reason_given_beside_one_that_refused():
    settings = Settings.from_env({"RFLOW_KAFKA_BROKERS": "a:9092,b:9092"})
    refused = ConnectionRefusedError(111, "Connect call failed a:9092")
    closed = KafkaConnectionError("Connection at b:9092 closed")
    message = kafka.unavailable(settings, KafkaConnectionError("Unable"), [refused, closed])
    assert "spoke PLAINTEXT to it: KafkaConnectionError: Connection at b:9092 closed" in message


def test_a_connection_closed_on_a_tls_alert_is_a_failed_handshake(pki):
    settings = sasl_ssl(pki)
    closed = KafkaConnectionError("Connection at 127.0.0.1:9093 closed")
    closed.__cause__ = ssl.SSLError("[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] certificate required")
    message = kafka.unavailable(settings, KafkaConnectionError("Unable to bootstrap"), [closed])
    assert message.startswith("the TLS handshake with Kafka at 127.0.0.1:9093 ")
    assert "certificate required" in message and "RFLOW_KAFKA_SSL_CERTFILE" in message


async def test_a_cluster_nobody_answers_at_cannot_be_reached_and_the_reason_is_said():
    with socket.socket() as bound:  # bound, never listening: a connection is refused
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        settings = Settings.from_env({"RFLOW_KAFKA_BROKERS": f"127.0.0.1:{port}"})
        message = await refusal(kafka.producer(settings, request_timeout_ms=5000), settings)
    assert message.startswith(f"cannot reach Kafka at 127.0.0.1:{port}: ")
    assert "Connect call failed" in message and "Unable to bootstrap" in message


class Failing:
    """A client whose start fails while another client's task, started before it, logs
    a TLS error to aiokafka."""

    def __init__(self) -> None:
        self.stopped = False
        self.starting = asyncio.Event()
        self.logged = asyncio.Event()
        self.other = asyncio.create_task(self.other_client())

    async def other_client(self) -> None:
        await self.starting.wait()
        logging.getLogger("aiokafka").error(
            'Unable connect to "%s:%s": %s', "h", 1, ssl.SSLError("not ours")
        )
        self.logged.set()

    async def start(self) -> None:
        self.starting.set()
        await self.logged.wait()
        raise KafkaConnectionError("Unable to bootstrap")

    async def stop(self) -> None:
        self.stopped = True


async def test_what_other_tasks_log_is_not_why_this_client_failed():
    settings = Settings.from_env({"RFLOW_KAFKA_BROKERS": "127.0.0.1:9"})
    client = Failing()
    message = await refusal(client, settings)
    assert message.startswith("cannot reach Kafka at 127.0.0.1:9: ")
    assert client.stopped
    assert not any(isinstance(h, kafka._Refusals) for h in logging.getLogger("aiokafka").handlers)


@pytest.mark.parametrize(
    ("mechanism", "check"),
    [
        ("SCRAM-SHA-512", "RFLOW_KAFKA_SASL_PASSWORD or RFLOW_KAFKA_SASL_PASSWORD_FILE"),
        ("OAUTHBEARER", "RFLOW_KAFKA_SASL_OAUTH_TOKEN_FILE"),
    ],
)
def test_refused_credentials_name_the_settings_to_check(pki, tmp_path, mechanism, check):
    token = tmp_path / "token"
    token.write_text("t\n")
    env = {"RFLOW_KAFKA_SASL_MECHANISM": mechanism}
    if mechanism == "OAUTHBEARER":
        env |= {"RFLOW_KAFKA_SASL_PASSWORD": "", "RFLOW_KAFKA_SASL_OAUTH_TOKEN_FILE": str(token)}
    settings = sasl_ssl(pki, **env)
    refused = SaslAuthenticationFailed("invalid credentials")
    message = kafka.unavailable(settings, KafkaConnectionError("Unable to bootstrap"), [refused])
    assert message.startswith("Kafka at 127.0.0.1:9093 (SASL_SSL ") and "refused" in message
    assert "invalid credentials" in message and check in message
    unoffered = UnsupportedSaslMechanismError("Enabled mechanisms are: ['PLAIN']")
    message = kafka.unavailable(settings, KafkaConnectionError("Unable"), [unoffered])
    assert f"does not offer SASL {mechanism}" in message
    assert "check RFLOW_KAFKA_SASL_MECHANISM" in message
    # without a cause seen on the way, the error itself decides
    assert kafka.unavailable(settings, KafkaConnectionError("gone"), []).startswith(
        "cannot reach Kafka at 127.0.0.1:9093"
    )
