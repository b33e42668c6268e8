"""Process settings: the one place that reads environment variables.

Every endpoint and tunable reaches the code through :class:`Settings`; its defaults
match the local stack that ``scripts/stack up`` starts on 127.0.0.1.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

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
    "PROJECT": "project_path",
    "DATA_DIR": "data_dir",
    "TABLE_STORE": "table_store",
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
}
_REPO_ROOT = Path(__file__).resolve().parent.parent


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

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Each setting's environment variable -> the field it sets (``rpc_urls`` is set
        by ``RFLOW_RPC_URL_<NETWORK>``, one variable per network)."""
        found = {_PREFIX + suffix: field for suffix, field in _VARIABLES.items()}
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
        rpc = {
            key[len(_RPC_PREFIX) :].lower(): value
            for key, value in env.items()
            if key.startswith(_RPC_PREFIX) and value
        }
        if rpc:
            values["rpc_urls"] = {"local": "http://127.0.0.1:8545", **rpc}
        values.update(overrides)
        return cls(**values)

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
        for network, url in self.rpc_urls.items():
            env[_RPC_PREFIX + network.upper()] = url
        return env

    @property
    def database_display(self) -> str:
        """The database URL without its password, for messages."""
        url = self.database_url.get_secret_value()
        scheme, sep, rest = url.partition("://")
        if "@" in rest:
            creds, _, host = rest.rpartition("@")
            user = creds.split(":", 1)[0]
            rest = f"{user}@{host}"
        return f"{scheme}{sep}{rest}"

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
