"""Helpers for the workflow-language tests: a shared project and compact diagnostics."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

from rflow.lang import ValidationReport, validate_sources

BASE = textwrap.dedent(
    """\
    networks:
      ethereum: { chain_id: 1 }
      base: { chain_id: 8453 }
      local: { chain_id: 31337, rpc_url_env: RFLOW_RPC_URL_LOCAL }
    contracts:
      USDC:
        address: { ethereum: "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48" }
        abi:
          - { type: function, name: transfer, inputs: [{ name: to, type: address }, { name: amount, type: uint256 }] }
          - { type: function, name: balanceOf, inputs: [{ name: owner, type: address }] }
          - { type: event, name: Transfer, inputs: [{ name: from, type: address, indexed: true }, { name: to, type: address, indexed: true }, { name: value, type: uint256 }] }
      AnyPool:
        abi:
          - { type: event, name: Swap, inputs: [{ name: sender, type: address, indexed: true }, { name: to, type: address, indexed: true }] }
    relayers:
      payout: { key_env: RELAYER_PAYOUT_KEY, networks: [ethereum] }
      treasury: { key_env: RELAYER_TREASURY_KEY, networks: [ethereum, base] }
    channels:
      ops: { type: log }
    budgets:
      treasury-daily: { window: 24h, max_native_value: 10 ether, scope: { relayers: [treasury] } }
    """
)
"""Declarations every test workflow may use (file ``project.yaml``)."""

ENV: dict[str, str] = {
    "RELAYER_PAYOUT_KEY": "0x" + "11" * 32,
    "RELAYER_TREASURY_KEY": "0x" + "22" * 32,
}


def check(
    workflow_yaml: str, env: Mapping[str, str] | None = None, base: str = BASE
) -> ValidationReport:
    """Validate ``workflow_yaml`` (file ``wf.yaml``, dedented) together with :data:`BASE`."""
    sources = [("project.yaml", base), ("wf.yaml", textwrap.dedent(workflow_yaml))]
    return validate_sources(sources, ENV if env is None else env)


def lines(report: ValidationReport) -> list[str]:
    """Every diagnostic rendered as ``file:line:col: severity: path: message``."""
    return [str(d) for d in report.diagnostics]


def findings(workflow_yaml: str, env: Mapping[str, str] | None = None) -> list[str]:
    """:func:`lines` of :func:`check`."""
    return lines(check(workflow_yaml, env))
