"""Process settings: the one place that reads environment variables.

Every endpoint and tunable reaches the code through :class:`Settings`; its defaults
match the local stack that ``scripts/stack up`` starts on 127.0.0.1.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

_PREFIX = "RFLOW_"
_RPC_PREFIX = "RFLOW_RPC_URL_"
# Variable suffix -> field, for every scalar setting.
_VARIABLES = {
    "KAFKA_BROKERS": "kafka_brokers",
    "DATABASE_URL": "database_url",
    "DATABASE_SCHEMA": "database_schema",
    "APP_ID": "app_id",
    "TOPIC_PREFIX": "topic_prefix",
    "TOPICS_FILE": "topics_file",
    "TOPIC_REPLICATION_FACTOR": "topic_replication_factor",
    "TOPIC_MIN_INSYNC_REPLICAS": "topic_min_insync_replicas",
    "PROJECT": "project_path",
    "DATA_DIR": "data_dir",
    "TABLE_STORE": "table_store",
    "KAFKA_TRANSACTIONS": "kafka_transactions",
    "WEB_PORT": "web_port",
    "BROKER_SESSION_TIMEOUT": "broker_session_timeout",
    "BROKER_HEARTBEAT_INTERVAL": "broker_heartbeat_interval",
    "STREAM_PROCESSING_TIMEOUT": "stream_processing_timeout",
    "EVENT_LOOP": "event_loop",
    "SEND_BUMP_AFTER": "send_bump_after",
    "SEND_EXPIRE_AFTER": "send_expire_after",
    "SEND_POLL_INTERVAL": "send_poll_interval",
    "API_TOKEN": "api_token",
    "CLI_TOKEN": "cli_token",
    "PUBLIC_URL": "public_url",
    "TRUST_PROXY": "trust_proxy",
    "CONSOLE_SESSION_TTL": "console_session_ttl",
    "CONSOLE_IDLE_TIMEOUT": "console_idle_timeout",
    "KAFKA_SECURITY_PROTOCOL": "kafka_security_protocol",
    "KAFKA_SASL_MECHANISM": "kafka_sasl_mechanism",
    "KAFKA_SASL_USERNAME": "kafka_sasl_username",
    "KAFKA_SASL_PASSWORD": "kafka_sasl_password",
    "KAFKA_SASL_OAUTH_TOKEN_FILE": "kafka_sasl_oauth_token_file",
    "KAFKA_SSL_CAFILE": "kafka_ssl_cafile",
    "KAFKA_SSL_CERTFILE": "kafka_ssl_certfile",
    "KAFKA_SSL_KEYFILE": "kafka_ssl_keyfile",
    "KAFKA_SSL_KEY_PASSWORD": "kafka_ssl_key_password",
    "KAFKA_SSL_CHECK_HOSTNAME": "kafka_ssl_check_hostname",
    "INGRESS_KEYS": "ingress_keys",
    "METRICS_TARGETS_DIR": "metrics_targets_dir",
}
_FILE_SUFFIX = "_FILE"
# Secrets that may instead be read from a file named by RFLOW_<SUFFIX>_FILE (a mounted
# secret): the file's content, without a trailing newline, is the value.
_FROM_FILES = ("KAFKA_SASL_PASSWORD", "KAFKA_SSL_KEY_PASSWORD", "INGRESS_KEYS")
_REPO_ROOT = Path(__file__).resolve().parent.parent


class SettingsError(ValueError):
    """The ``RFLOW_*`` variables do not make valid settings: the message names each
    variable and why, never a secret's value."""


def environ() -> dict[str, str]:
    """A snapshot of the process environment.

    Workflow files may substitute ``${VAR}`` at load time and name secrets by
    variable; they receive this mapping rather than reading ``os.environ`` themselves.
    """
    return dict(os.environ)


class Settings(BaseModel):
    """Endpoints and tunables of one rflow process."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kafka_brokers: str = Field("127.0.0.1:9092", description="bootstrap servers, comma separated")
    database_url: SecretStr = Field(
        SecretStr("postgresql://rflow@127.0.0.1:55432/rflow"),
        description="libpq connection URL of the Postgres database",
    )
    database_schema: str = Field("rflow", description="Postgres schema holding rflow's tables")
    rpc_urls: dict[str, str] = Field(
        default_factory=lambda: {"local": "http://127.0.0.1:8545"},
        repr=False,  # an RPC URL may carry an API key
        description="JSON-RPC URL per network name (RFLOW_RPC_URL_<NETWORK>)",
    )
    app_id: str = Field(
        "rflow", description="Faust app id: workers with the same id share partitions"
    )
    topic_prefix: str = Field("", description="prefix for every topic name (isolates test runs)")
    topics_file: Path = Field(
        _REPO_ROOT / "topics.yaml",
        description="the topic catalog: names, partition counts and configs (topics.yaml)",
    )
    topic_replication_factor: int | None = Field(
        None,
        ge=1,
        description="copies of every topic rflow creates, on as many brokers (topics.yaml's "
        "replication_factor when unset): 3 on a cluster of three brokers",
    )
    topic_min_insync_replicas: int | None = Field(
        None,
        ge=1,
        description="min.insync.replicas of the topics rflow creates: the copies a write "
        "needs before it is acknowledged (acks=all); unset, one less than the replication "
        "factor (2 of 3), and 1 for a single copy",
    )
    project_path: Path | None = Field(
        None, description="the workflow files a worker runs (a file or a folder)"
    )
    data_dir: Path = Field(
        Path(".rflow"),
        description="the worker's local state: its tables' RocksDB databases (one data "
        "directory per worker; a worker restarted with its own reads only the changelog "
        "records it has not seen)",
    )
    table_store: Literal["auto", "rocksdb", "memory"] = Field(
        "auto",
        description="where a worker keeps its tables: rocksdb (on disk, in the data "
        "directory), memory (rebuilt from the changelogs at every start), or auto "
        "(rocksdb where the rocksdict package imports, else memory)",
    )
    web_port: int = Field(6066, description="Faust web server port of a worker")
    api_token: SecretStr | None = Field(
        None,
        description="bearer token of the built-in principal `operator`, for the worker's "
        "HTTP API (every route but webhooks), signing in to its console, and the CLI",
    )
    cli_token: SecretStr | None = Field(
        None,
        description="the token the CLI acts with (a principal's); default: RFLOW_API_TOKEN",
    )
    public_url: str | None = Field(
        None,
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="the address people and senders reach the workers at (behind a proxy, "
        "the proxy's: https://rflow.example.com): resume URLs of webhook waits start with "
        "it (default http://127.0.0.1:<RFLOW_WEB_PORT>), an https one makes the console's "
        "cookie Secure, and the console takes forms from its origin",
    )
    trust_proxy: bool = Field(
        False,
        description="1: the worker is behind a proxy that sets X-Forwarded-Proto, which is "
        "then believed (https makes the console's cookie Secure); leave it off when clients "
        "reach the worker directly, or any of them could say https",
    )
    console_session_ttl: float = Field(
        12 * 3600.0,
        gt=0,
        description="seconds a console session lasts after its sign-in, however active",
    )
    console_idle_timeout: float = Field(
        1800.0,
        gt=0,
        description="seconds without a page asked for (live refreshes do not count) after "
        "which a console session ends",
    )
    metrics_targets_dir: Path | None = Field(
        None,
        description="where a worker writes its Prometheus file-SD target while it runs "
        "(scripts/stack env: .stack/prometheus/targets, which the shipped prometheus.yml "
        "reads); unset: none is written",
    )
    kafka_transactions: bool = Field(
        True,
        description="write each checkpoint (table changes, run journals, consumed offsets) "
        "in Kafka transactions, one per partition, so that a worker that lost a partition "
        "is fenced by the broker; off only to measure what transactions cost",
    )
    broker_session_timeout: float = Field(
        30.0,
        gt=0,
        description="seconds without a heartbeat before Kafka takes a worker's partitions "
        "away (a killed worker's partitions move after this long)",
    )
    broker_heartbeat_interval: float = Field(
        3.0, gt=0, description="seconds between a worker's heartbeats to the consumer group"
    )
    stream_processing_timeout: float = Field(
        300.0,
        gt=0,
        description="seconds a partition with records waiting may go unprocessed before the "
        "worker logs it as stalled (Faust's stream_processing_timeout)",
    )
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        "auto",
        description="the worker's event loop: uvloop (less CPU per run), the standard "
        "library's asyncio, or auto (uvloop where it is installed: rflow depends on it on "
        "Linux and macOS)",
    )
    send_bump_after: float = Field(
        30.0, gt=0, description="seconds a transaction may wait unmined before its fee is bumped"
    )
    send_expire_after: float = Field(
        900.0, gt=0, description="seconds after which an unmined send is given up (expired)"
    )
    send_poll_interval: float = Field(
        0.05, gt=0, description="seconds between receipt checks of pending transactions"
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT",
        description="how every Kafka client of this process connects: PLAINTEXT, SSL (TLS), "
        "SASL_PLAINTEXT or SASL_SSL (SASL over TLS)",
    )
    kafka_sasl_mechanism: (
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None
    ) = Field(None, description="the SASL mechanism, with SASL_PLAINTEXT or SASL_SSL")
    kafka_sasl_username: str | None = Field(
        None, description="the SASL user (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
    )
    kafka_sasl_password: SecretStr | None = Field(
        None,
        description="the SASL user's password (or RFLOW_KAFKA_SASL_PASSWORD_FILE: a file "
        "holding it)",
    )
    kafka_sasl_oauth_token_file: Path | None = Field(
        None,
        description="OAUTHBEARER: a file holding the bearer token, read again each time a "
        "client authenticates (so whatever renews the token can rewrite the file)",
    )
    kafka_ssl_cafile: Path | None = Field(
        None,
        description="PEM file of the certificate authorities that sign the brokers' "
        "certificates (default: the system's)",
    )
    kafka_ssl_certfile: Path | None = Field(
        None, description="PEM file of this process's client certificate (mutual TLS)"
    )
    kafka_ssl_keyfile: Path | None = Field(
        None, description="PEM file of the client certificate's private key"
    )
    kafka_ssl_key_password: SecretStr | None = Field(
        None,
        description="the client key's password, if it is encrypted (or "
        "RFLOW_KAFKA_SSL_KEY_PASSWORD_FILE)",
    )
    kafka_ssl_check_hostname: bool = Field(
        True, description="whether a broker's certificate must name the host connected to"
    )
    ingress_keys: SecretStr | None = Field(
        None,
        description="the keys rflow's ingresses vouch for their firings with: "
        "`id:secret[,id:secret...]`, the first signs and all verify, the same on every "
        "worker (or RFLOW_INGRESS_KEYS_FILE: a file holding them, one per line)",
    )

    @model_validator(mode="after")
    def _kafka_security_fits(self) -> Settings:
        problems = kafka_security_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Each setting's environment variable -> the field it sets (``rpc_urls`` is set
        by ``RFLOW_RPC_URL_<NETWORK>``, one variable per network)."""
        found = {_PREFIX + suffix: field for suffix, field in _VARIABLES.items()}
        for suffix in _FROM_FILES:
            found[_PREFIX + suffix + _FILE_SUFFIX] = _VARIABLES[suffix]
        found[_RPC_PREFIX + "<NETWORK>"] = "rpc_urls"
        return found

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``RFLOW_*`` variables, then apply ``overrides``."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for suffix, field in _VARIABLES.items():
            if value := env.get(_PREFIX + suffix):  # an empty variable counts as unset
                values[field] = value
        for suffix in _FROM_FILES:
            if path := env.get(_PREFIX + suffix + _FILE_SUFFIX):
                if _PREFIX + suffix in env and env[_PREFIX + suffix]:
                    raise SettingsError(
                        f"{_PREFIX}{suffix} and {_PREFIX}{suffix}{_FILE_SUFFIX} are both set: "
                        "give the value or the file, not both"
                    )
                values[_VARIABLES[suffix]] = _read_secret(_PREFIX + suffix + _FILE_SUFFIX, path)
        rpc = {
            key[len(_RPC_PREFIX) :].lower(): value
            for key, value in env.items()
            if key.startswith(_RPC_PREFIX) and value
        }
        if rpc:
            values["rpc_urls"] = {"local": "http://127.0.0.1:8545", **rpc}
        values.update(overrides)
        try:
            return cls(**values)
        except ValidationError as exc:
            raise SettingsError(_described(exc)) from None

    def to_env(self) -> dict[str, str]:
        """The ``RFLOW_*`` variables that rebuild these settings in another process."""
        env = {}
        for suffix, field in _VARIABLES.items():
            value = getattr(self, field)
            if value is None:
                continue
            env[_PREFIX + suffix] = (
                value.get_secret_value() if isinstance(value, SecretStr) else str(value)
            )
        for suffix in _FROM_FILES:
            if _PREFIX + suffix in env:  # the value itself: a file variable must not contend
                env[_PREFIX + suffix + _FILE_SUFFIX] = ""
        for network, url in self.rpc_urls.items():
            env[_RPC_PREFIX + network.upper()] = url
        return env

    @property
    def database_display(self) -> str:
        """The database URL as messages show it: its scheme and host only."""
        from rflow.secrets import redact_url

        return redact_url(self.database_url.get_secret_value())

    @property
    def base_url(self) -> str:
        """Where the workers are reached: ``RFLOW_PUBLIC_URL``, else this worker's own
        address on 127.0.0.1 (no trailing slash)."""
        if self.public_url:
            return self.public_url.rstrip("/")
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def kafka_display(self) -> str:
        """How messages name the Kafka cluster: the brokers, the protocol and the SASL
        user, never a secret."""
        shown = self.kafka_brokers
        if self.kafka_security_protocol != "PLAINTEXT":
            shown += f" ({self.kafka_security_protocol}"
            if self.kafka_sasl_mechanism is not None:
                who = f" as {self.kafka_sasl_username}" if self.kafka_sasl_username else ""
                shown += f" {self.kafka_sasl_mechanism}{who}"
            shown += ")"
        return shown

    @property
    def ingress_keyring(self) -> Any:
        """The parsed :attr:`ingress_keys` (a :class:`~rflow.engine.provenance.Keyring`,
        empty when unset); :class:`SettingsError` names a malformed entry."""
        from rflow.engine.provenance import Keyring, KeyringError

        if self.ingress_keys is None:
            return Keyring()
        try:
            return Keyring.parse(self.ingress_keys.get_secret_value())
        except KeyringError as exc:
            raise SettingsError(str(exc)) from None

    def require_ingress_keys(self) -> None:
        """:class:`SettingsError` unless ingress keys are set: a worker needs them."""
        if not self.ingress_keyring.keys:
            raise SettingsError(
                "RFLOW_INGRESS_KEYS is not set: rflow's ingresses (chain events, webhooks, "
                "schedules, manual runs, retries) vouch for their firings with it, and a "
                "worker believes nothing they claim without it. Give every worker (and every "
                "host that runs rflow run or rflow runs retry) the same keys, e.g. "
                "RFLOW_INGRESS_KEYS=k1:$(openssl rand -hex 32), or a file of them in "
                "RFLOW_INGRESS_KEYS_FILE"
            )

    @property
    def acting_token(self) -> SecretStr | None:
        """The token the CLI presents: ``RFLOW_CLI_TOKEN``, else ``RFLOW_API_TOKEN``."""
        return self.cli_token or self.api_token

    def rpc_url(self, network: str) -> str:
        """The JSON-RPC URL of ``network``; a clear error names the variable to set."""
        try:
            return self.rpc_urls[network.lower()]
        except KeyError:
            raise LookupError(
                f"no RPC URL for network {network!r}: set {_RPC_PREFIX}{network.upper()}"
            ) from None


def _described(exc: ValidationError) -> str:
    """A validation error as lines naming the variables (the input is left out: it may
    be a secret)."""
    by_field = {field: variable for variable, field in Settings.variables().items()}
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        where = by_field.get(field, field or "settings")
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"{where} ({field}): {message}" if field else message)
    return "; ".join(lines)


def _read_secret(variable: str, path: str) -> str:
    """The content of the secret file ``path`` that ``variable`` names, without its
    trailing newline; the error names the variable and the file, never the content."""
    try:
        return Path(path).read_text().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(
            f"{variable}={path}: cannot read it ({exc.__class__.__name__})"
        ) from None


def kafka_security_problems(settings: Settings) -> list[str]:
    """Why the Kafka security settings do not fit together (empty when they do), each
    naming the variables to set."""
    protocol = settings.kafka_security_protocol
    mechanism = settings.kafka_sasl_mechanism
    problems = []
    sasl = protocol.startswith("SASL_")
    if sasl and mechanism is None:
        problems.append(
            f"RFLOW_KAFKA_SECURITY_PROTOCOL={protocol} needs RFLOW_KAFKA_SASL_MECHANISM "
            "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)"
        )
    if not sasl and mechanism is not None:
        problems.append(
            f"RFLOW_KAFKA_SASL_MECHANISM={mechanism} needs RFLOW_KAFKA_SECURITY_PROTOCOL="
            f"SASL_SSL or SASL_PLAINTEXT (it is {protocol})"
        )
    if sasl and mechanism == "OAUTHBEARER":
        if settings.kafka_sasl_oauth_token_file is None:
            problems.append("OAUTHBEARER needs RFLOW_KAFKA_SASL_OAUTH_TOKEN_FILE")
    elif sasl and mechanism is not None:
        if not settings.kafka_sasl_username:
            problems.append(f"{mechanism} needs RFLOW_KAFKA_SASL_USERNAME")
        if settings.kafka_sasl_password is None:
            problems.append(
                f"{mechanism} needs RFLOW_KAFKA_SASL_PASSWORD (or RFLOW_KAFKA_SASL_PASSWORD_FILE)"
            )
    tls = protocol in ("SSL", "SASL_SSL")
    tls_files = {
        "RFLOW_KAFKA_SSL_CAFILE": settings.kafka_ssl_cafile,
        "RFLOW_KAFKA_SSL_CERTFILE": settings.kafka_ssl_certfile,
        "RFLOW_KAFKA_SSL_KEYFILE": settings.kafka_ssl_keyfile,
    }
    given = [name for name, value in tls_files.items() if value is not None]
    if given and not tls:
        problems.append(
            f"{', '.join(given)} set, but RFLOW_KAFKA_SECURITY_PROTOCOL={protocol} does not "
            "use TLS (SSL or SASL_SSL)"
        )
    if (settings.kafka_ssl_certfile is None) != (settings.kafka_ssl_keyfile is None):
        problems.append(
            "a client certificate needs both RFLOW_KAFKA_SSL_CERTFILE and RFLOW_KAFKA_SSL_KEYFILE"
        )
    return problems
