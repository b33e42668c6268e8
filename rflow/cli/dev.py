"""``rflow dev``: helpers for the local development chain (anvil).

``rflow dev emit`` asks the examples' PayoutDesk contract for a payout, from one of
anvil's development accounts: the contract emits ``PayoutRequested``, which starts the
example workflow ``event-payout``. anvil signs for its own development accounts
(``eth_sendTransaction``), so no key is needed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from rflow.cli import main
from rflow.cli.common import fail
from rflow.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
"""The examples' project: where ``PayoutDesk`` is declared, unless --project says."""

DEFAULT_TO = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
"""anvil's development account 3: the default recipient."""

RECEIPT_TIMEOUT = 30.0


@main.group()
def dev() -> None:
    """Helpers for the local development chain (anvil, `scripts/stack up`)."""


@dev.command("emit")
@click.option(
    "--to",
    "to",
    default=DEFAULT_TO,
    show_default=True,
    help="Who the payout is for (default: anvil's account 3).",
)
@click.option(
    "--amount",
    default="0.01 ether",
    show_default=True,
    help="How much to ask for: an amount such as '0.01 ether', '5 gwei' or wei.",
)
@click.option("--memo", default="asked with rflow dev emit", show_default=True)
@click.option(
    "--from",
    "sender",
    default="1",
    show_default=True,
    help="Who asks: an index of anvil's development accounts (1-9; 0 is the dev relayer's "
    "signer), or an address the node signs for. Runs are serialized per requester.",
)
@click.option(
    "--contract",
    default="PayoutDesk",
    show_default=True,
    help="The contract, as the project declares it (it must have request(address,uint256,string)).",
)
@click.option("--network", default="local", show_default=True)
@click.option(
    "--project",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Where the contract is declared. Default: $RFLOW_PROJECT, else examples/.",
)
@click.option("--json", "as_json", is_flag=True)
def emit(
    to: str,
    amount: str,
    memo: str,
    sender: str,
    contract: str,
    network: str,
    project: Path | None,
    as_json: bool,
) -> None:
    """Ask the local PayoutDesk contract for a payout: it emits PayoutRequested(requester,
    to, amount, id, memo), which starts the example workflow event-payout. Prints the
    event as the workflow's trigger will see it."""
    from web3 import Web3

    from rflow.lang.units import UnitError, parse_amount
    from rflow.secrets import Secrets

    settings = Settings.from_env()
    try:
        wei = parse_amount(amount)
    except UnitError as exc:
        fail(f"--amount: {exc}")
    if not Web3.is_address(to):
        fail(f"--to {to!r} is not an address (0x and 40 hex digits)")
    loaded, address, abi = _contract(
        project or settings.project_path or EXAMPLES, contract, network
    )
    try:
        url = settings.rpc_url(network)
    except LookupError as exc:
        fail(str(exc))
    # The URL may carry a provider's key, and the library's messages may quote it.
    scrub = Secrets({}).hide_urls(url).scrub
    w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 10}))
    try:
        chain_id = w3.eth.chain_id
        accounts = w3.eth.accounts
    except Exception as exc:  # whatever the failure, the node is not usable
        fail(scrub(f"no node answers at {url} (RFLOW_RPC_URL_{network.upper()}): {exc}"))
    requester = _sender(sender, accounts)
    if w3.eth.get_code(address) in (b"", b"\x00"):
        fail(
            f"no contract at {address} on network {network} (chain {chain_id}): "
            "`scripts/stack up` deploys the examples' PayoutDesk there on a fresh anvil"
        )
    desk = w3.eth.contract(address=address, abi=abi)
    try:
        tx_hash = desk.functions.request(Web3.to_checksum_address(to), wei, memo).transact(
            {"from": requester}
        )
    except Exception as exc:  # the node refused it: say so, in its words
        fail(scrub(f"the node refused the request from {requester}: {exc}"))
    receipt = _receipt(w3, tx_hash)
    if receipt["status"] != 1:
        fail(f"the request transaction {tx_hash.hex()} reverted (block {receipt['blockNumber']})")
    [event] = desk.events.PayoutRequested().process_receipt(receipt)
    args = dict(event["args"])
    block = w3.eth.get_block(receipt["blockNumber"])
    found = {
        "network": network,
        "chain_id": chain_id,
        "contract": contract,
        "address": address,
        "event": "PayoutRequested",
        "args": {
            "requester": args["requester"],
            "to": args["to"],
            "amount": args["amount"],
            "id": args["id"],
            "memo": args["memo"],
        },
        "block": {
            "number": receipt["blockNumber"],
            "hash": "0x" + receipt["blockHash"].hex().removeprefix("0x"),
            "timestamp": block["timestamp"],
        },
        "tx": {
            "hash": "0x" + tx_hash.hex().removeprefix("0x"),
            "index": receipt["transactionIndex"],
        },
        "log_index": event["logIndex"],
    }
    found["runs"] = _runs(loaded, found)
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    click.echo(
        f"PayoutRequested #{args['id']}: {args['requester']} asks {amount.strip()} "
        f"({args['amount']} wei) for {args['to']} ({memo!r})"
    )
    click.echo(
        f"  in block {found['block']['number']}, tx {found['tx']['hash']}, log index "
        f"{found['log_index']}, on {network} (chain {chain_id})"
    )
    for run in found["runs"]:
        click.echo(
            f"  starts {run['workflow']} as run {run['run_id']} (trigger key "
            f"{run['trigger_key']}) on a worker running {project or settings.project_path or 'examples/'}:"
        )
        click.echo(f"  rflow runs show {run['run_id']}")
    if not found["runs"]:
        click.echo("  no workflow of the project is triggered by this event")


def _runs(project: Any, firing: dict[str, Any]) -> list[dict[str, str]]:
    """The runs ``firing`` starts: each workflow of ``project`` with an event trigger on
    it (its filter matching), under that trigger's key, one run per matrix combination."""
    from rflow.engine.keys import firing_runs
    from rflow.lang.model.triggers import key_prefix

    found = []
    for name, workflow in project.workflows.items():
        for trigger_id, trigger in workflow.triggers_of("event"):
            spec = trigger.event
            if (spec.contract, spec.name, spec.network) != (
                firing["contract"],
                firing["event"],
                firing["network"],
            ):
                continue
            if not _filter_matches(project, spec, firing["args"]):
                continue
            key = (
                f"{key_prefix('event', trigger_id)}:{firing['chain_id']}:"
                f"{firing['block']['hash']}:{firing['log_index']}"
            )
            matrix = workflow.strategy.matrix if workflow.strategy else None
            for _, run_id in firing_runs(name, key, matrix):
                found.append({"workflow": name, "trigger_key": key, "run_id": run_id})
    return found


def _filter_matches(project: Any, spec: Any, args: dict[str, Any]) -> bool:
    """Whether the event's arguments pass the trigger's ``filter``, compared as the chain
    listener compares them (addresses whatever their case, integers as numbers)."""
    from rflow.ingress.logs import find_events, matches

    if not spec.filter:
        return True
    abi = project.contracts[spec.contract].abi or []
    params = {p.name: p for event in find_events(abi, spec.name) for p in event.inputs}
    return all(
        name in params and matches(params[name], args.get(name), wanted)
        for name, wanted in spec.filter.items()
    )


def _contract(project_path: Path, name: str, network: str) -> tuple[Any, str, list[Any]]:
    """The project, and the address on ``network`` and the ABI of its contract ``name``."""
    from web3 import Web3

    from rflow.lang import ConfigError, load_project
    from rflow.settings import environ

    try:
        project = load_project(project_path, environ())
    except (ConfigError, FileNotFoundError) as exc:
        fail(f"{project_path}: {exc}")
    declared = project.contracts.get(name)
    if declared is None:
        known = ", ".join(sorted(project.contracts)) or "none"
        fail(f"{project_path} declares no contract {name!r} (it declares: {known})")
    address = declared.address.get(network)
    if address is None or not isinstance(declared.abi, list):
        fail(f"contract {name!r} of {project_path} has no address on {network!r}, or no ABI")
    return project, Web3.to_checksum_address(address), declared.abi


def _sender(given: str, accounts: list[str]) -> str:
    """Account ``given``: an index of the node's development accounts, or an address."""
    from web3 import Web3

    if given.isdigit():
        index = int(given)
        if not 0 <= index < len(accounts):
            fail(f"--from {given}: the node has development accounts 0 to {len(accounts) - 1}")
        return accounts[index]
    if not Web3.is_address(given):
        fail(f"--from {given!r} is neither an account index nor an address")
    return Web3.to_checksum_address(given)


def _receipt(w3: Any, tx_hash: Any) -> Any:
    from web3.exceptions import TransactionNotFound

    deadline = time.monotonic() + RECEIPT_TIMEOUT
    while True:
        try:
            return w3.eth.get_transaction_receipt(tx_hash)
        except TransactionNotFound:
            if time.monotonic() > deadline:
                fail(f"transaction {tx_hash.hex()} was not mined within {RECEIPT_TIMEOUT:.0f}s")
            time.sleep(0.05)
