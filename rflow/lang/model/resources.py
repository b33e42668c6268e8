"""Project-level declarations that workflows refer to by name."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, SecretStr, field_validator, model_validator

from rflow.lang.model.common import (
    Address,
    Amount,
    DedupWindow,
    Duration,
    EnvVar,
    Model,
    Name,
    TokenAmount,
    invalid,
)


class Network(Model):
    """An EVM chain the project talks to."""

    chain_id: int = Field(ge=1)
    """The chain id (1 for Ethereum mainnet, 31337 for a local anvil)."""
    rpc_url_env: EnvVar | None = None
    """Environment variable holding the JSON-RPC URL; default RFLOW_RPC_URL_<NAME>."""
    confirmations: int = Field(1, ge=0, le=1000)
    """Blocks to wait before an event counts (triggers may override)."""

    def rpc_env_name(self, name: str) -> str:
        """The variable that holds this network's RPC URL, given the network's name."""
        return self.rpc_url_env or "RFLOW_RPC_URL_" + name.upper().replace("-", "_")


class Contract(Model):
    """A contract known by name: its address on each network and, optionally, its ABI."""

    address: dict[Name, Address] = {}
    """Address per network. A contract with no address on a network matches events from
    any emitter there (an "any pool" listener), but cannot be called there."""
    abi: str | list[dict[str, Any]] | None = None
    """A JSON ABI file (relative to this YAML file; a bare ABI list or an artifact with an
    "abi" key), or the ABI inline as a list. Needed for event triggers and waits."""

    @field_validator("abi")
    @classmethod
    def _abi_entries(cls, value: Any) -> Any:
        if isinstance(value, list):
            for entry in value:
                if "type" not in entry:
                    raise invalid("every inline ABI entry needs a 'type' (function, event, ...)")
        return value


class Relayer(Model):
    """A signer that sends transactions; its key lives in an environment variable."""

    key_env: EnvVar
    """Environment variable holding the private key (never written in YAML)."""
    networks: list[Name] = Field(min_length=1)
    """Networks this relayer may send on."""
    address: Address | None = None
    """The signer's address, when known, so `rflow doctor` can check the key matches."""

    def signer_key(self, env: Mapping[str, str]) -> SecretStr:
        """The private key from ``env``; ``LookupError`` names the variable when unset."""
        value = env.get(self.key_env)
        if not value:
            raise LookupError(f"environment variable {self.key_env} (a relayer key) is not set")
        return SecretStr(value)


class WebhookChannel(Model):
    """POST a JSON message to a URL."""

    type: Literal["webhook"]
    """`webhook`."""
    url: str
    """The URL; use ${VAR} to keep it out of the file."""
    headers: dict[str, str] = {}
    """Headers sent with each message (${VAR} allowed)."""


class SlackChannel(Model):
    """A Slack-style incoming webhook (Slack, Mattermost, Discord's /slack endpoint)."""

    type: Literal["slack"]
    """`slack`."""
    webhook_url_env: EnvVar
    """Environment variable holding the incoming-webhook URL (it is a secret)."""


class PagerDutyChannel(Model):
    """PagerDuty Events API v2; circuit-breaker trips arrive as critical."""

    type: Literal["pagerduty"]
    """`pagerduty`."""
    routing_key_env: EnvVar
    """Environment variable holding the integration routing key."""


class LogChannel(Model):
    """Write the message to the worker's log."""

    type: Literal["log"]
    """`log`."""
    level: Literal["debug", "info", "warning", "error"] = "info"
    """The log level of the messages: debug, info, warning or error."""


Channel = Annotated[
    WebhookChannel | SlackChannel | PagerDutyChannel | LogChannel, Discriminator("type")
]
"""Where ``notify`` messages go."""


class Principal(Model):
    """Someone who calls the HTTP API (and acts through the CLI): a bearer token with a
    name, which is what approvals record as their approver."""

    token_env: EnvVar
    """Environment variable holding the principal's bearer token (never written in YAML,
    never stored or logged)."""


class CommandSpec(Model):
    """An executable that `command` steps may run: no shell, JSON in on stdin, JSON out
    on stdout, a time limit, and only the environment variables listed."""

    path: str
    """The executable: an absolute path, or a name looked up on PATH."""
    args: list[str] = []
    """Fixed arguments (never built from run data, so a run cannot inject any)."""
    env: list[EnvVar] = []
    """Environment variables passed through; the command sees no others."""
    timeout: Duration = timedelta(seconds=30)
    """Kill the command and fail the step with kind timeout after this long."""


class BudgetScope(Model):
    """Which sends charge a budget; an omitted list means every one."""

    relayers: list[Name] | None = None
    """Only sends from these relayers charge the budget; unset: every relayer."""
    networks: list[Name] | None = None
    """Only sends on these networks charge the budget; unset: every network."""


class Budget(Model):
    """A cap on cumulative spend inside a rolling window, shared by every attached workflow."""

    window: Duration
    """The rolling window, e.g. 24h."""
    max_native_value: Amount | None = None
    """Cap on cumulative native value sent in the window."""
    max_token_value: dict[str, TokenAmount] = {}
    """Cap per ERC20 symbol, in raw token units; the symbol must match a contract name."""
    max_gas_spend: Amount | None = None
    """Cap on gas paid (gas_used x effective_gas_price of settled sends) in the window."""
    scope: BudgetScope = BudgetScope()
    """Which sends charge the budget (default: every send of an attached workflow)."""

    @model_validator(mode="after")
    def _has_a_cap(self) -> Budget:
        if (
            self.max_native_value is None
            and not self.max_token_value
            and self.max_gas_spend is None
        ):
            raise invalid(
                "a budget needs at least one cap: max_native_value, max_token_value or max_gas_spend"
            )
        return self


class Config(Model):
    """Engine-wide settings."""

    max_concurrent_runs: int = Field(100, ge=1, le=100_000)
    """Runs executing at once across all concurrency groups."""
    approval_timeout: Duration = timedelta(hours=24)
    """Default timeout of a human approval wait that sets none."""
    dedup_window: DedupWindow = timedelta(days=7)
    """How long a worker remembers a firing's trigger key (a repeat inside it starts
    nothing; one after it is admitted again) and a settled run (an event for it after
    that is dropped). A workflow may set its own (`dedup_window`). A run that has not
    settled is remembered however long it takes."""
