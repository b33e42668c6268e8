"""Every Kafka client rflow has is built here, from :class:`~rflow.settings.Settings`.

The worker's Faust app (:func:`faust_options`), the producers of the CLI and the
ingresses, the admin client that applies ``topics.yaml``, the benchmarks and the test
fixtures all take their broker list and their security (TLS, SASL, a client certificate)
from the same settings through the functions below; nothing else constructs an
``AIOKafkaProducer``, ``AIOKafkaConsumer``, ``AIOKafkaAdminClient`` or ``faust.App``
(``tests/unit/streams/test_kafka.py`` checks the whole repository).

Secrets stay in the settings' ``SecretStr`` fields until a client is built: no function
here logs or returns them in a message (:attr:`Settings.kafka_display` names a cluster).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.abc import AbstractTokenProvider
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from rflow.settings import Settings


class KafkaSettingsError(Exception):
    """A file the Kafka security settings name cannot be used (the message says which
    variable, which file and why)."""


class FileTokenProvider(AbstractTokenProvider):
    """OAUTHBEARER: the token in a file, read again at every authentication, so whatever
    renews the token (a sidecar, a cron job) only has to rewrite the file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def token(self) -> str:
        try:
            token = self.path.read_text().strip()
        except OSError as exc:
            raise KafkaSettingsError(
                f"RFLOW_KAFKA_SASL_OAUTH_TOKEN_FILE={self.path}: cannot read it "
                f"({exc.__class__.__name__})"
            ) from None
        if not token:
            raise KafkaSettingsError(f"RFLOW_KAFKA_SASL_OAUTH_TOKEN_FILE={self.path} is empty")
        return token


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of ``settings`` (``None`` without TLS): the brokers' certificate
    authorities (the system's by default), a client certificate if one is given, and host
    name checking unless turned off."""
    if settings.kafka_security_protocol not in ("SSL", "SASL_SSL"):
        return None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if settings.kafka_ssl_cafile is not None:
        try:
            context.load_verify_locations(cafile=str(settings.kafka_ssl_cafile))
        except (OSError, ssl.SSLError) as exc:
            raise KafkaSettingsError(
                f"RFLOW_KAFKA_SSL_CAFILE={settings.kafka_ssl_cafile}: not a readable PEM file "
                f"of certificates ({exc.__class__.__name__}: {exc.strerror or exc})"
            ) from None
    if settings.kafka_ssl_certfile is not None and settings.kafka_ssl_keyfile is not None:
        password = settings.kafka_ssl_key_password
        try:
            context.load_cert_chain(
                str(settings.kafka_ssl_certfile),
                str(settings.kafka_ssl_keyfile),
                password.get_secret_value() if password is not None else None,
            )
        except (OSError, ssl.SSLError) as exc:
            raise KafkaSettingsError(
                f"RFLOW_KAFKA_SSL_CERTFILE={settings.kafka_ssl_certfile} with "
                f"RFLOW_KAFKA_SSL_KEYFILE={settings.kafka_ssl_keyfile}: not a certificate and "
                f"its key (or the key's password is wrong) ({exc.__class__.__name__})"
            ) from None
    context.check_hostname = settings.kafka_ssl_check_hostname
    return context


def client_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments every aiokafka client of ``settings`` takes: the brokers and
    the security protocol, with the SASL credentials and the TLS context it needs."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_brokers,
        "security_protocol": settings.kafka_security_protocol,
    }
    context = ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    mechanism = settings.kafka_sasl_mechanism
    if mechanism is not None:
        options["sasl_mechanism"] = mechanism
        if mechanism == "OAUTHBEARER":
            assert settings.kafka_sasl_oauth_token_file is not None  # checked by Settings
            options["sasl_oauth_token_provider"] = FileTokenProvider(
                settings.kafka_sasl_oauth_token_file
            )
        else:
            assert settings.kafka_sasl_password is not None  # checked by Settings
            options["sasl_plain_username"] = settings.kafka_sasl_username
            options["sasl_plain_password"] = settings.kafka_sasl_password.get_secret_value()
    return options


def producer(settings: Settings, **options: Any) -> AIOKafkaProducer:
    """An aiokafka producer of ``settings`` (not started), with ``options`` on top.

    ``acks="all"`` unless ``options`` say otherwise: a record counts as written once
    every in-sync replica has it (at least the topic's ``min.insync.replicas``), so a
    broker lost right after the acknowledgement loses nothing."""
    options.setdefault("acks", "all")
    return AIOKafkaProducer(**client_options(settings), **options)


TRANSACTION_TIMEOUT_MS = 30_000
"""How long a checkpoint's transaction may stay open before the broker aborts it (and
fences its producer): a checkpoint takes milliseconds; a worker stopped in the middle of
one holds back every ``read_committed`` reader of its partitions this long at most,
unless the partition's next owner fences it sooner."""


def transactional_producer(settings: Settings, transactional_id: str) -> AIOKafkaProducer:
    """A transactional aiokafka producer of ``settings`` (not started): starting it
    fences every earlier producer of ``transactional_id`` (its open transaction is
    aborted, its later writes refused by the broker)."""
    return AIOKafkaProducer(
        **client_options(settings),
        transactional_id=transactional_id,
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        acks="all",
        enable_idempotence=True,
        linger_ms=0,
    )


def consumer(settings: Settings, *topics: str, **options: Any) -> AIOKafkaConsumer:
    """An aiokafka consumer of ``settings`` (not started), with ``options`` on top. It
    reads ``read_committed`` unless told otherwise: what an aborted checkpoint wrote
    (a fenced worker's) is never seen."""
    options.setdefault("isolation_level", "read_committed")
    return AIOKafkaConsumer(*topics, **client_options(settings), **options)


def admin(settings: Settings, **options: Any) -> AIOKafkaAdminClient:
    """An aiokafka admin client of ``settings`` (not started), with ``options`` on top."""
    return AIOKafkaAdminClient(**client_options(settings), **options)


class KafkaUnavailable(Exception):
    """A client could not start: the message says which cluster, and why when the
    brokers said so (credentials refused, a TLS handshake failed)."""


class _Refusals(logging.Handler):
    """The errors aiokafka logs while one client starts, in the task starting it: its
    bootstrap logs each broker's error to the ``aiokafka`` logger (``Unable connect to
    "host:port": <error>``, the error the record's last argument) and then raises only
    that it could not bootstrap (listed in ``consumption.INTERNALS``). Records of other
    tasks (the worker's other clients) are not this client's; none is kept when the
    ``aiokafka`` logger is set above ERROR, and the message then says less."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.errors: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if _starting.get() is not self:
            return
        args = record.args if isinstance(record.args, tuple) else ()
        if args and isinstance(args[-1], BaseException):
            self.errors.append(args[-1])


_starting: ContextVar[_Refusals | None] = ContextVar("rflow_kafka_starting", default=None)


@contextmanager
def _refusals() -> Iterator[list[BaseException]]:
    handler = _Refusals()
    logger = logging.getLogger("aiokafka")
    token = _starting.set(handler)
    logger.addHandler(handler)
    try:
        yield handler.errors
    finally:
        logger.removeHandler(handler)
        _starting.reset(token)


def unavailable(settings: Settings, error: BaseException, seen: list[BaseException]) -> str:
    """Why a client of ``settings`` could not start, from its ``error`` and the errors
    ``seen`` on the way (and what each was raised from): refused credentials, a SASL
    mechanism the brokers do not offer, a failed TLS handshake and a broker that hangs up
    on the protocol rflow speaks name the settings to check; anything else is a cluster
    rflow cannot reach, with the first broker's reason."""
    cluster = settings.kafka_display
    for cause in _with_causes([*seen, error]):
        if isinstance(cause, SaslAuthenticationFailed):
            if settings.kafka_sasl_mechanism == "OAUTHBEARER":
                check = "RFLOW_KAFKA_SASL_OAUTH_TOKEN_FILE"
            else:
                check = (
                    "RFLOW_KAFKA_SASL_USERNAME, and RFLOW_KAFKA_SASL_PASSWORD or "
                    "RFLOW_KAFKA_SASL_PASSWORD_FILE"
                )
            return f"Kafka at {cluster} refused rflow's credentials: {cause} (check {check})"
        if isinstance(cause, UnsupportedSaslMechanismError):
            return (
                f"Kafka at {cluster} does not offer SASL {settings.kafka_sasl_mechanism}: "
                f"{cause} (check RFLOW_KAFKA_SASL_MECHANISM)"
            )
        if isinstance(cause, ssl.SSLError):
            return (
                f"the TLS handshake with Kafka at {cluster} failed: {cause} (check "
                "RFLOW_KAFKA_SSL_CAFILE, RFLOW_KAFKA_SSL_CHECK_HOSTNAME, a client certificate "
                "the brokers may ask for (RFLOW_KAFKA_SSL_CERTFILE, RFLOW_KAFKA_SSL_KEYFILE) "
                "and RFLOW_KAFKA_SECURITY_PROTOCOL)"
            )
    reason = f"{seen[0]} ({error})" if seen else str(error)
    closed = next((cause for cause in seen if isinstance(cause, KafkaConnectionError)), None)
    if closed is not None:
        # aiokafka logs an error of its own kind for a broker only once a connection to
        # it was made: a refused or timed-out one is an OSError or a TimeoutError. A
        # listener that closes it as the first request arrives speaks another protocol
        # (a TLS listener reading a plaintext request, a SASL one a request before the
        # handshake), or nothing is behind it yet.
        protocol = settings.kafka_security_protocol
        return (
            f"Kafka at {cluster}: a broker took the connection and closed it when rflow "
            f"spoke {protocol} to it: {closed} ({error}); its listener may expect another "
            "protocol (check RFLOW_KAFKA_SECURITY_PROTOCOL: SSL or SASL_SSL for a TLS "
            "listener, SASL_PLAINTEXT or SASL_SSL with RFLOW_KAFKA_SASL_MECHANISM for a SASL "
            "one), or no broker answers behind it (a proxy or port forward with no broker "
            "yet, a broker starting, stopping or at its connection limit)"
        )
    return f"cannot reach Kafka at {cluster}: {reason}"


def _with_causes(errors: list[BaseException]) -> Iterator[BaseException]:
    """Each of ``errors``, each followed by what it was raised from (a connection closed
    on a TLS alert carries the alert's ``SSLError`` there)."""
    for error in errors:
        seen: set[int] = set()
        cause: BaseException | None = error
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            yield cause
            cause = cause.__cause__


async def start(
    client: AIOKafkaProducer | AIOKafkaConsumer | AIOKafkaAdminClient, settings: Settings
) -> None:
    """Start ``client``, made from ``settings`` here; if it cannot start, close it and
    raise :class:`KafkaUnavailable` saying why."""
    with _refusals() as seen:
        try:
            await client.start()
        except KafkaError as exc:
            if isinstance(client, AIOKafkaAdminClient):
                await client.close()
            else:
                await client.stop()
            raise KafkaUnavailable(unavailable(settings, exc, seen)) from None


def faust_options(settings: Settings) -> dict[str, Any]:
    """The Faust app settings that say where the brokers are and how to connect:
    ``broker`` and ``broker_credentials`` (Faust hands them to every consumer and
    producer it makes, the worker's consumer and its topic creation included)."""
    import faust

    options: dict[str, Any] = {
        "broker": [f"kafka://{host.strip()}" for host in settings.kafka_brokers.split(",")],
    }
    context = ssl_context(settings)
    mechanism = settings.kafka_sasl_mechanism
    if mechanism == "OAUTHBEARER":
        assert settings.kafka_sasl_oauth_token_file is not None
        options["broker_credentials"] = faust.OAuthCredentials(
            oauth_cb=FileTokenProvider(settings.kafka_sasl_oauth_token_file),
            ssl_context=context,
        )
    elif mechanism is not None:
        assert settings.kafka_sasl_password is not None
        options["broker_credentials"] = faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password.get_secret_value(),
            ssl_context=context,
            mechanism=mechanism,
        )
    elif context is not None:
        options["broker_credentials"] = faust.SSLCredentials(context)
    return options


def environment(settings: Settings) -> dict[str, str]:
    """The ``RFLOW_KAFKA_*`` variables of ``settings``: what a child process needs to
    connect as this one does (a benchmark's worker, a Faust process of its own)."""
    return {name: value for name, value in settings.to_env().items() if "_KAFKA_" in name}


def librdkafka_config(settings: Settings) -> dict[str, str]:
    """The same connection as librdkafka properties (``kcat -X key=value``,
    confluent-kafka's config), secrets included: for a producer's own configuration."""
    config = {
        "bootstrap.servers": settings.kafka_brokers,
        "security.protocol": settings.kafka_security_protocol.lower(),
    }
    if settings.kafka_ssl_cafile is not None:
        config["ssl.ca.location"] = str(settings.kafka_ssl_cafile)
    if settings.kafka_ssl_certfile is not None and settings.kafka_ssl_keyfile is not None:
        config["ssl.certificate.location"] = str(settings.kafka_ssl_certfile)
        config["ssl.key.location"] = str(settings.kafka_ssl_keyfile)
        if settings.kafka_ssl_key_password is not None:
            config["ssl.key.password"] = settings.kafka_ssl_key_password.get_secret_value()
    if not settings.kafka_ssl_check_hostname:
        config["ssl.endpoint.identification.algorithm"] = "none"
    mechanism = settings.kafka_sasl_mechanism
    if mechanism is not None and mechanism != "OAUTHBEARER":
        assert settings.kafka_sasl_password is not None
        config["sasl.mechanisms"] = mechanism
        config["sasl.username"] = settings.kafka_sasl_username or ""
        config["sasl.password"] = settings.kafka_sasl_password.get_secret_value()
    return config


# --- ACLs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Acl:
    """What one principal may do on one resource pattern, and why rflow needs it."""

    resource: Literal["topic", "group", "transactional-id", "cluster"]
    name: str
    pattern: Literal["literal", "prefixed"]
    operations: tuple[str, ...]
    why: str

    def command(self, principal: str, bootstrap: str, command_config: str) -> str:
        """The ``kafka-acls`` command that grants it to ``principal``."""
        words = [
            "kafka-acls",
            f"--bootstrap-server {bootstrap}",
            f"--command-config {command_config}",
            "--add",
            f"--allow-principal {principal}",
            *(f"--operation {operation}" for operation in self.operations),
        ]
        if self.resource == "cluster":
            words.append("--cluster")
        else:
            words.append(f"--{self.resource} {self.name}")
            words.append(f"--resource-pattern-type {self.pattern}")
        return " ".join(words)


def worker_acls(settings: Settings) -> list[Acl]:
    """The ACLs rflow's workers (and its CLI, which acts on the same topics) need, for
    ``settings``' topic prefix and app id: no more than these. (Kafka lets a principal
    that may read or write a resource describe it too.)"""
    prefix = settings.topic_prefix
    app = settings.app_id
    return [
        Acl(
            "topic",
            f"{prefix}rflow.",
            "prefixed",
            ("Read", "Write", "Create"),
            "every topic of topics.yaml: the workers read and write them all, and "
            "`rflow topics apply` (run by `rflow worker` as it starts) creates the missing "
            "ones (drop Create when your platform creates them: start workers with "
            "`--no-setup`)",
        ),
        Acl(
            "topic",
            f"{app}-",
            "prefixed",
            ("Read", "Write", "Create"),
            "the topics Faust makes for the app itself (its partition assignor's "
            f"`{app}-__assignor-__leader`)",
        ),
        Acl(
            "group",
            app,
            "literal",
            ("Read",),
            "the consumer group the workers share (the app id, RFLOW_APP_ID)",
        ),
        Acl(
            "transactional-id",
            app,
            "prefixed",
            ("Write",),
            "the checkpoints' transactional producers, one per partition of the runs "
            "topic, `<app id>-rflow-<n>`: a partition's table changes, journals and "
            "offsets in one transaction, so that a worker that lost the partition is "
            "fenced",
        ),
    ]


def producer_acls(settings: Settings) -> list[Acl]:
    """The ACLs of an outside producer: writing to the triggers topic, nothing else."""
    return [
        Acl(
            "topic",
            f"{settings.topic_prefix}rflow.triggers",
            "literal",
            ("Write",),
            "producing trigger records (an idempotent producer needs no more)",
        )
    ]
