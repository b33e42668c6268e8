"""Event triggers as listeners: queries, matching, payloads and records; endpoints."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from eth_abi import encode
from eth_utils import keccak

from rflow.ingress.blocks import BlockRef
from rflow.ingress.firings import distinct_queries, fire
from rflow.ingress.listeners import abi_dirs, event_networks, listeners_for
from rflow.ingress.logs import find_events
from rflow.ingress.rpc import endpoints
from rflow.lang import load_project
from rflow.settings import Settings
from tests.conftest import REPO

EMITTER_ABI = REPO / "tests" / "contracts" / "build" / "Emitter.json"
EMITTER = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
SENDER = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
NOW = datetime(2025, 1, 1, tzinfo=UTC)
BLOCK = BlockRef(7, "0x" + "aa" * 32, "0x" + "bb" * 32, 1_700_000_007)


def write_project(
    folder: Path,
    *,
    address: str | None = EMITTER,
    trigger: str = "{ contract: Emitter, name: Swap, network: local }",
    concurrency: str = "",
    abi: str | None = None,
) -> Path:
    address_line = f"    address: {{ local: '{address}' }}\n" if address else ""
    text = (
        "networks:\n"
        "  local: { chain_id: 31337, confirmations: 2 }\n"
        "contracts:\n"
        "  Emitter:\n"
        f"{address_line}"
        f"    abi: {abi or str(EMITTER_ABI)}\n"
        "workflows:\n"
        "  on-swap:\n"
        f"{concurrency}"
        f"    trigger:\n      event: {trigger}\n"
        "    steps:\n"
        "      - id: note\n"
        "        command: { name: log, args: { message: swapped } }\n"
    )
    path = folder / "project.yaml"
    path.write_text(text)
    return path


def listeners(path: Path):
    found, problems = listeners_for(load_project(path, {}), "local", abi_dirs=abi_dirs(path))
    assert problems == []
    return found


def swap_entry(amount_in: int = 5, amount_out: int = 7, *, sender: str = SENDER, **over) -> dict:
    (event,) = find_events(json.loads(EMITTER_ABI.read_text())["abi"], "Swap")
    entry = {
        "address": EMITTER.lower(),
        "topics": [event.topic0, "0x" + encode(["address"], [sender]).hex()],
        "data": "0x" + encode(["uint256", "uint256"], [amount_in, amount_out]).hex(),
        "blockNumber": hex(BLOCK.number),
        "blockHash": BLOCK.hash,
        "transactionHash": "0x" + "cc" * 32,
        "transactionIndex": "0x3",
        "logIndex": "0x4",
        "removed": False,
    }
    entry.update(over)
    return entry


def test_a_listener_asks_for_its_emitter_and_event(tmp_path):
    (listener,) = listeners(write_project(tmp_path))
    assert listener.workflow_name == "on-swap"
    assert listener.confirmations == 2  # the network's default
    assert listener.address == EMITTER
    swap_topic = "0x" + keccak(text="Swap(address,uint256,uint256)").hex()
    assert listener.query == {"address": EMITTER, "topics": [[swap_topic]]}


def test_indexed_filters_become_topics_and_the_rest_are_checked_locally(tmp_path):
    trigger = (
        "{ contract: Emitter, name: Swap, network: local, confirmations: 0, "
        f"filter: {{ sender: '{SENDER.lower()}', amountIn: 5 }} }}"
    )
    (listener,) = listeners(write_project(tmp_path, trigger=trigger, address=None))
    assert listener.confirmations == 0
    assert listener.address is None
    assert "address" not in listener.query
    assert listener.query["topics"][1] == ["0x" + encode(["address"], [SENDER]).hex()]
    assert listener.value_filters == {"amountIn": 5}
    assert listener.match(swap_entry(5)) is not None
    assert listener.match(swap_entry(6)) is None
    other = "0x" + "99" * 20
    assert listener.match(swap_entry(5, sender=other)) is None


def test_a_matching_log_fires_with_the_documented_payload_and_key(tmp_path):
    (listener,) = listeners(write_project(tmp_path))
    record = fire(listener, swap_entry(2**200, 7), BLOCK, NOW)
    assert record is not None
    assert record.workflow == "on-swap"
    assert record.source == "event"
    assert record.trigger_key == f"event:31337:{BLOCK.hash}:4"
    assert record.group is None and record.partition_key == record.trigger_key
    assert record.received_at == NOW
    assert record.payload == {
        "network": "local",
        "chain_id": 31337,
        "contract": "Emitter",
        "address": EMITTER,
        "event": "Swap",
        "args": {"sender": SENDER, "amountIn": 2**200, "amountOut": 7},
        "block": {"number": 7, "hash": BLOCK.hash, "timestamp": 1_700_000_007},
        "tx": {"hash": "0x" + "cc" * 32, "index": 3},
        "log_index": 4,
    }


def test_the_record_is_keyed_by_the_concurrency_group(tmp_path):
    group = '    concurrency: { group: "${{ trigger.args.sender }}" }\n'
    (listener,) = listeners(write_project(tmp_path, concurrency=group))
    record = fire(listener, swap_entry(), BLOCK, NOW)
    assert record is not None
    assert record.group == SENDER and record.partition_key == SENDER


def test_logs_of_other_emitters_or_events_do_not_fire(tmp_path):
    (listener,) = listeners(write_project(tmp_path))
    assert fire(listener, swap_entry(address="0x" + "12" * 20), BLOCK, NOW) is None
    assert fire(listener, swap_entry(topics=["0x" + "00" * 32]), BLOCK, NOW) is None
    assert fire(listener, swap_entry(topics=[]), BLOCK, NOW) is None


def test_a_malformed_log_is_logged_and_skipped(tmp_path, caplog):
    (listener,) = listeners(write_project(tmp_path))
    with caplog.at_level(logging.WARNING, logger="rflow.ingress.firings"):
        assert fire(listener, swap_entry(data="0x1234"), BLOCK, NOW) is None
        assert fire(listener, swap_entry(logIndex=None), BLOCK, NOW) is None
    assert "cannot decode Swap" in caplog.text
    assert "position fields" in caplog.text


def test_a_group_that_does_not_evaluate_drops_the_firing_loudly(tmp_path, caplog):
    group = "    concurrency: { group: \"${{ '' }}\" }\n"
    (listener,) = listeners(write_project(tmp_path, concurrency=group))
    with caplog.at_level(logging.ERROR, logger="rflow.ingress.firings"):
        assert fire(listener, swap_entry(), BLOCK, NOW) is None
    assert "dropping" in caplog.text


def test_triggers_that_cannot_be_followed_are_reported_not_fatal(tmp_path):
    project = load_project(write_project(tmp_path), {})
    missing = project.model_copy(
        update={
            "contracts": {
                "Emitter": project.contracts["Emitter"].model_copy(update={"abi": "missing.json"})
            }
        }
    )
    found, problems = listeners_for(missing, "local", abi_dirs=[tmp_path])
    assert found == []
    assert len(problems) == 1 and "missing.json" in problems[0] and "on-swap" in problems[0]
    assert listeners_for(project, "mainnet")[1] == ["network 'mainnet' is not declared"]
    assert event_networks(project) == ["local"]


def test_relative_abi_files_are_found_beside_the_project(tmp_path):
    (tmp_path / "abis").mkdir()
    (tmp_path / "abis" / "Emitter.json").write_text(EMITTER_ABI.read_text())
    path = write_project(tmp_path, abi="abis/Emitter.json")
    assert abi_dirs(path) == [tmp_path]
    assert abi_dirs(tmp_path)[0] == tmp_path
    assert len(listeners(path)) == 1


def test_identical_queries_are_asked_once(tmp_path):
    (listener,) = listeners(write_project(tmp_path))
    twin = listener.__class__(**{**listener.__dict__, "workflow_name": "twin"})
    groups = distinct_queries([listener, twin])
    assert len(groups) == 1 and [x.workflow_name for x in groups[0][1]] == ["on-swap", "twin"]


@pytest.mark.parametrize(
    ("url", "http", "ws"),
    [
        ("http://127.0.0.1:8545", "http://127.0.0.1:8545", "ws://127.0.0.1:8545"),
        ("https://node.example/v1", "https://node.example/v1", "wss://node.example/v1"),
        ("ws://127.0.0.1:8545", "http://127.0.0.1:8545", "ws://127.0.0.1:8545"),
    ],
)
def test_the_websocket_is_derived_from_the_rpc_url(tmp_path, url, http, ws):
    project = load_project(write_project(tmp_path), {})
    settings = Settings(rpc_urls={"local": url})
    found = endpoints(settings, project, "local")
    assert (found.http, found.ws) == (http, ws)
    assert endpoints(settings, project, "local", ws_url="ws://other").ws == "ws://other"


def test_a_network_rpc_variable_wins_over_the_settings(tmp_path):
    text = (
        write_project(tmp_path)
        .read_text()
        .replace("confirmations: 2 }", "confirmations: 2, rpc_url_env: MY_NODE }")
    )
    (tmp_path / "project.yaml").write_text(text)
    project = load_project(tmp_path / "project.yaml", {})
    found = endpoints(Settings(), project, "local", {"MY_NODE": "http://10.0.0.1:8545"})
    assert found.http == "http://10.0.0.1:8545"


def test_two_event_triggers_of_one_workflow_fire_under_keys_of_their_own(tmp_path):
    path = write_project(tmp_path)
    text = path.read_text().replace(
        "    trigger:\n      event: ",
        "    triggers:\n      - event: { contract: Emitter, name: Swap, network: local }\n"
        "      - id: big\n        event: ",
    )
    path.write_text(text)
    first, big = listeners(path)
    assert (first.trigger_id, big.trigger_id) == ("event", "big")
    keys = [fire(item, swap_entry(), BLOCK, NOW).trigger_key for item in (first, big)]
    assert keys == [f"event:31337:{BLOCK.hash}:4", f"event@big:31337:{BLOCK.hash}:4"]
