"""Project-level declarations that workflows refer to by name."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, SecretStr, field_validator, model_validator

from rflow.authz import ACTION_NAMES, DEFAULT_ROLE, ROLES
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


class Endpoint(Model):
    """One JSON-RPC provider of a network."""

    name: Name
    """How logs, metrics and errors name this endpoint (its URL is never shown)."""
    url_env: EnvVar
    """Environment variable holding the endpoint's JSON-RPC URL (it may carry an API key)."""
    weight: int = Field(1, ge=1, le=1000)
    """How often this endpoint is picked to read from, against the others' weights, when
    a worker picks one (at start, and when the one it reads from fails or lags)."""


class Network(Model):
    """An EVM chain the project talks to."""

    chain_id: int = Field(ge=1)
    """The chain id (1 for Ethereum mainnet, 31337 for a local anvil)."""
    rpc_url_env: EnvVar | None = None
    """Environment variable holding the JSON-RPC URL; default RFLOW_RPC_URL_<NAME>. For
    several providers, list ``endpoints`` instead."""
    endpoints: list[Endpoint] = []
    """Several JSON-RPC providers of this network: reads go to a healthy one and fail
    over; a send's receipt and a transaction's absence are asked of every one."""
    max_lag_blocks: int = Field(5, ge=0, le=100_000)
    """An endpoint whose head is more blocks than this behind the best endpoint's is
    read from only when no other answers."""
    confirmations: int = Field(1, ge=0, le=1000)
    """Blocks to wait before an event counts (triggers may override)."""

    @model_validator(mode="after")
    def _one_way_to_name_endpoints(self) -> Network:
        if self.endpoints and self.rpc_url_env:
            raise invalid("give either rpc_url_env (one endpoint) or endpoints (several), not both")
        names = [endpoint.name for endpoint in self.endpoints]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise invalid(f"endpoint names must be unique: {', '.join(twice)} is listed twice")
        return self

    def rpc_env_name(self, name: str) -> str:
        """The variable that holds this network's RPC URL (its first endpoint's, when it
        lists several), given the network's name."""
        if self.endpoints:
            return self.endpoints[0].url_env
        return self.rpc_url_env or "RFLOW_RPC_URL_" + name.upper().replace("-", "_")

    def rpc_env_names(self, name: str) -> list[tuple[str, str]]:
        """Each endpoint's name and the variable that holds its URL; a network without
        ``endpoints`` has one, named ``default``."""
        if self.endpoints:
            return [(endpoint.name, endpoint.url_env) for endpoint in self.endpoints]
        return [("default", self.rpc_env_name(name))]


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


class Pkcs11Key(Model):
    """A secp256k1 key inside a PKCS#11 token (an HSM: Thales, YubiHSM, AWS CloudHSM,
    SoftHSM): the token signs, and the private key never leaves it."""

    module: str = Field(min_length=1)
    """The token's PKCS#11 library, an absolute path (SoftHSM:
    /usr/lib/softhsm/libsofthsm2.so)."""
    token: str = Field(min_length=1, max_length=32)
    """The label of the token that holds the key (the one given to softhsm2-util
    --init-token --label)."""
    key_label: str = Field(min_length=1)
    """The label (CKA_LABEL) of the private key; its public key, when the token keeps one,
    has the same label."""
    pin_env: EnvVar
    """Environment variable holding the user PIN that opens the token (never written in
    YAML, never logged)."""

    @field_validator("module")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise invalid(
                f"the PKCS#11 module must be an absolute path to a shared library, not {value!r}"
            )
        return value


class AwsKmsKey(Model):
    """An AWS KMS key of spec ECC_SECG_P256K1 and usage SIGN_VERIFY: KMS signs, and the
    private key never leaves it. Requests are signed with the credentials in the
    environment variables named here."""

    key_id: str = Field(min_length=1)
    """The key: its id, its ARN, ``alias/NAME`` or an alias ARN."""
    region: str
    """The key's region, e.g. us-east-1."""
    endpoint_env: EnvVar | None = None
    """Environment variable holding the KMS endpoint URL (a VPC endpoint, or a local KMS
    in tests); default https://kms.REGION.amazonaws.com."""
    access_key_id_env: EnvVar = "AWS_ACCESS_KEY_ID"
    """Environment variable holding the access key id."""
    secret_access_key_env: EnvVar = "AWS_SECRET_ACCESS_KEY"
    """Environment variable holding the secret access key (never logged)."""
    session_token_env: EnvVar = "AWS_SESSION_TOKEN"
    """Environment variable holding the session token of temporary credentials, when
    there is one."""

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not _REGION.fullmatch(value):
            raise invalid(f"{value!r} is not an AWS region name (like us-east-1 or eu-west-2)")
        return value


_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")


SignerKind = Literal["key_env", "pkcs11", "aws_kms"]
"""Where a relayer's key is: an environment variable, a PKCS#11 token, AWS KMS."""


class Relayer(Model):
    """An account that sends transactions. It declares where its key is, exactly one of:
    ``key_env`` (a raw key in an environment variable, for development), ``pkcs11`` (an
    HSM) or ``aws_kms``. The relayer signs the same way whichever it is."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [{"required": [kind]} for kind in ("key_env", "pkcs11", "aws_kms")]
        }
    )

    key_env: EnvVar | None = None
    """Environment variable holding the private key as hex (never written in YAML). For
    development: the key is in the worker's memory."""
    pkcs11: Pkcs11Key | None = None
    """The key is in a PKCS#11 token (an HSM), which signs."""
    aws_kms: AwsKmsKey | None = None
    """The key is in AWS KMS, which signs."""
    networks: list[Name] = Field(min_length=1)
    """Networks this relayer may send on."""
    address: Address | None = None
    """The signer's address. The signer computes its address from its public key;
    `rflow validate` and `rflow doctor` refuse a declared address that differs, and a
    worker refuses to sign with it."""

    @model_validator(mode="after")
    def _one_signer(self) -> Relayer:
        given = [k for k in ("key_env", "pkcs11", "aws_kms") if getattr(self, k) is not None]
        if len(given) != 1:
            raise invalid(
                "a relayer declares exactly one of key_env, pkcs11 or aws_kms"
                + (f" (got {' and '.join(given)})" if given else "")
            )
        return self

    @property
    def kind(self) -> SignerKind:
        """Which of ``key_env``, ``pkcs11`` and ``aws_kms`` this relayer declares."""
        if self.pkcs11 is not None:
            return "pkcs11"
        if self.aws_kms is not None:
            return "aws_kms"
        return "key_env"

    def signer_key(self, env: Mapping[str, str]) -> SecretStr:
        """The private key of a ``key_env`` relayer from ``env``; ``LookupError`` names the
        variable when unset."""
        if self.key_env is None:
            raise LookupError(f"this relayer's key is not in an environment variable ({self.kind})")
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
    """Someone who calls the HTTP API, signs in to the console and acts through the CLI:
    a bearer token with a name (what approvals and the audit trail record), a role, and
    the actions granted beyond the role."""

    token_env: EnvVar
    """Environment variable holding the principal's bearer token (never written in YAML,
    never stored or logged)."""
    role: Literal[ROLES] = DEFAULT_ROLE  # type: ignore[valid-type]
    """What it may do: viewer (read), approver (read and answer approvals), operator
    (everything), or none (only what `can` lists, such as a Prometheus scrape
    credential's metrics.read)."""
    can: list[Literal[ACTION_NAMES]] = []  # type: ignore[valid-type]
    """Actions it may take beyond its role, by name (the table of actions is in the
    reference's Principals and roles)."""


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
    strict: bool = False
    """Refuse (`budget_undecodable`, before anything is signed) a send to a token this
    budget caps whose amount cannot be decoded: a multicall calling the token, a call to
    its address through `to`, or any function but transfer, transferFrom and approve
    (increaseAllowance, permit...). Off: such a send charges only its native value."""

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
    uncapped_money: Literal["warn", "error"] = "warn"
    """What `rflow validate` and `rflow doctor` make of a send that can move money nothing
    caps (native value or a budgeted token without max_value_per_tx or an attached budget,
    a recipient or value straight from trigger data, a budget's scope not attached, a token
    call a budget cannot decode): warn, or error (the project does not validate, so no
    worker runs it and no deploy publishes it)."""
    dedup_window: DedupWindow = timedelta(days=7)
    """How long a worker remembers a firing's trigger key (a repeat inside it starts
    nothing; one after it is admitted again) and a settled run (an event for it after
    that is dropped). A workflow may set its own (`dedup_window`). A run that has not
    settled is remembered however long it takes."""
