"""The whole project: declarations and workflows, as loaded from one file or a folder."""

from __future__ import annotations

from pydantic import Field

from rflow.lang.model.common import Model, Name
from rflow.lang.model.resources import (
    Budget,
    Channel,
    CommandSpec,
    Config,
    Contract,
    Network,
    Principal,
    Relayer,
)
from rflow.lang.model.workflow import Workflow

SECTIONS = (
    "networks",
    "contracts",
    "relayers",
    "channels",
    "commands",
    "budgets",
    "principals",
    "config",
    "workflows",
)
"""Top-level keys, in the order the loader merges them."""


class Project(Model):
    """Everything an rflow deployment runs: networks, contracts, relayers, channels,
    budgets, principals, engine config and workflows."""

    model_config = Model.model_config | {"title": "rflow project"}

    networks: dict[Name, Network] = {}
    """Chains, by name."""
    contracts: dict[Name, Contract] = {}
    """Contracts, by name: address per network and ABI."""
    relayers: dict[Name, Relayer] = {}
    """Transaction signers, by name."""
    channels: dict[Name, Channel] = {}
    """Notification channels, by name."""
    commands: dict[Name, CommandSpec] = {}
    """Executables that `command` steps may run, by name."""
    budgets: dict[Name, Budget] = {}
    """Durable spend caps, by name."""
    principals: dict[Name, Principal] = {}
    """Who may call the API and answer approvals, by name; `operator` is built in (the
    holder of RFLOW_API_TOKEN)."""
    config: Config = Field(default_factory=Config)
    """Engine settings."""
    workflows: dict[Name, Workflow] = {}
    """Workflows, by name."""
