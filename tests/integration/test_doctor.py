"""`rflow doctor` against the real stack: every check passes, then each one fails for its reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from eth_account import Account
from web3 import AsyncHTTPProvider, AsyncWeb3

from rflow.settings import Settings
from tests.integration.test_anvil import DEV_KEY

# Init code that deploys a 10-byte runtime (returns 42 from any call).
RUNTIME = "602a60005260206000f3"
INIT_CODE = "0x600a600c600039600a6000f3" + RUNTIME
EMPTY_ADDRESS = "0x000000000000000000000000000000000000dEaD"


@pytest.fixture
async def deployed(settings: Settings) -> str:
    """Deploy a tiny contract on anvil; returns its address."""
    w3 = AsyncWeb3(AsyncHTTPProvider(settings.rpc_url("local")))
    account = Account.from_key(DEV_KEY)
    block = await w3.eth.get_block("latest")
    tx = {
        "chainId": 31337,
        "nonce": await w3.eth.get_transaction_count(account.address, "pending"),
        "data": INIT_CODE,
        "gas": 100_000,
        "maxFeePerGas": block["baseFeePerGas"] * 2 + 10**9,
        "maxPriorityFeePerGas": 10**9,
        "type": 2,
    }
    tx_hash = await w3.eth.send_raw_transaction(account.sign_transaction(tx).raw_transaction)
    receipt = await w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30, poll_latency=0.01)
    await w3.provider.disconnect()
    return receipt["contractAddress"]


def project(tmp_path: Path, *, chain_id: int, contract: str) -> Path:
    path = tmp_path / "project.yaml"
    path.write_text(
        f"""
networks:
  local: {{ chain_id: {chain_id} }}
relayers:
  ops: {{ key_env: DOCTOR_TEST_KEY, networks: [local] }}
contracts:
  Thing:
    address: {{ local: "{contract}" }}
workflows:
  ping:
    trigger: {{ manual: {{}} }}
    steps:
      - id: wait
        delay: {{ duration: 1s }}
"""
    )
    return path


def doctor(path: Path, settings: Settings, **env: str) -> tuple[int, dict]:
    base = {k: v for k, v in os.environ.items() if k != "DOCTOR_TEST_KEY"}
    result = subprocess.run(
        [sys.executable, "-m", "rflow.cli", "doctor", str(path), "--json"],
        env={**base, **settings.to_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout, result.stderr
    document = json.loads(result.stdout)
    return result.returncode, {f["check"]: f for f in document["findings"]}


@pytest.mark.usefixtures("applied_topics", "schema")
async def test_every_check_passes_on_a_healthy_stack(tmp_path, settings, deployed):
    code, findings = doctor(
        project(tmp_path, chain_id=31337, contract=deployed), settings, DOCTOR_TEST_KEY=DEV_KEY
    )
    assert {name: f["status"] for name, f in findings.items()} == {
        "validate": "pass",
        "kafka": "pass",
        "postgres": "pass",
        "ingress keys": "pass",
        "network local": "pass",
        "relayer ops": "pass",
        "contract Thing on local": "pass",
    }, findings
    assert code == 0
    assert Account.from_key(DEV_KEY).address in findings["relayer ops"]["detail"]
    assert DEV_KEY.removeprefix("0x") not in json.dumps(findings)
    key = settings.ingress_keyring.signer
    assert findings["ingress keys"]["detail"].startswith(f"1 key(s): {key.id!r} signs")
    assert key.secret.decode() not in json.dumps(findings)


async def test_each_failure_is_reported_with_its_reason(tmp_path, settings):
    # No topics applied, no schema migrated, no ingress keys, wrong chain id, no key, no code.
    code, findings = doctor(
        project(tmp_path, chain_id=1, contract=EMPTY_ADDRESS),
        settings,
        RFLOW_INGRESS_KEYS="",
        RFLOW_INGRESS_KEYS_FILE="",
    )
    assert code == 1
    assert findings["validate"]["status"] == "pass"
    assert (
        "missing:" in findings["kafka"]["detail"]
        and "run rflow topics apply" in findings["kafka"]["detail"]
    )
    assert "not migrated" in findings["postgres"]["detail"]
    assert findings["ingress keys"]["detail"].startswith("RFLOW_INGRESS_KEYS is not set")
    assert "answers chain id 31337, the project declares 1" in findings["network local"]["detail"]
    assert findings["relayer ops"]["detail"] == (
        "environment variable DOCTOR_TEST_KEY (a relayer key) is not set"
    )
    assert findings["contract Thing on local"]["detail"] == f"no contract code at {EMPTY_ADDRESS}"
    assert all(f["status"] == "fail" for name, f in findings.items() if name != "validate")


@pytest.mark.usefixtures("applied_topics", "schema")
async def test_a_relayer_and_a_contract_are_asked_of_the_next_endpoint_when_the_first_is_down(
    tmp_path, settings, deployed
):
    # As the worker fails over: primary (nothing listens there) is down, backup answers.
    path = project(tmp_path, chain_id=31337, contract=deployed)
    path.write_text(
        path.read_text().replace(
            "local: { chain_id: 31337 }",
            "local:\n    chain_id: 31337\n    endpoints:\n"
            "      - { name: primary, url_env: DOCTOR_PRIMARY_RPC }\n"
            "      - { name: backup, url_env: DOCTOR_BACKUP_RPC }",
        )
    )
    code, findings = doctor(
        path,
        settings,
        DOCTOR_TEST_KEY=DEV_KEY,
        DOCTOR_PRIMARY_RPC="http://127.0.0.1:9/",
        DOCTOR_BACKUP_RPC=settings.rpc_url("local"),
    )
    assert findings["network local endpoint primary"]["status"] == "fail"
    assert findings["network local endpoint backup"]["status"] == "pass"
    assert findings["relayer ops"]["status"] == "pass", findings["relayer ops"]
    assert findings["contract Thing on local"]["status"] == "pass", findings
    assert code == 1  # the endpoint that is down is still a failure to fix
