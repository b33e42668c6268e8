"""``rflow doctor``: check the live world a project depends on, one finding per check.

Static validation first; then Kafka (reachable, every declared topic present with its
declared partition count), Postgres (reachable, migrated), the ingress keys (set and
well formed), each network's RPC (answers, with the declared chain id), each relayer (its
signer answers: a key set and valid, an HSM or KMS that gives its public key; the address
it signs for, the declared one; its balance on each of its networks) and each contract
(code at its address on each network).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from web3 import AsyncHTTPProvider, AsyncWeb3

from rflow import storage
from rflow.failures import RflowError
from rflow.lang import Project
from rflow.lang.model import Relayer as RelayerSpec
from rflow.relayer import signing
from rflow.secrets import Secrets, process_secrets, redact_url
from rflow.settings import Settings
from rflow.streams import topics

Status = Literal["pass", "fail", "warn"]
RPC_TIMEOUT = 5.0


@dataclass(frozen=True)
class Finding:
    """The outcome of one check."""

    check: str
    status: Status
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


async def _guard(check: str, work: Awaitable[Finding], timeout: float = 20.0) -> Finding:
    """Run one check; an exception or a time-out is that check's failure, not the doctor's."""
    try:
        return await asyncio.wait_for(work, timeout)
    except TimeoutError:
        return Finding(check, "fail", f"no answer within {timeout:.0f}s")
    except Exception as exc:  # every failure of a live check is reported, whatever its type
        return Finding(check, "fail", f"{type(exc).__name__}: {exc}")


async def check_kafka(settings: Settings) -> Finding:
    catalog = topics.Catalog.from_settings(settings)
    names = {catalog.prefix + spec.name: spec.partitions for spec in catalog}
    try:
        counts = await topics.describe(settings, names)
    except topics.TopicsError as exc:
        return Finding("kafka", "fail", str(exc))
    missing = sorted(set(names) - set(counts))
    wrong = [
        f"{n} has {counts[n]} partitions, topics.yaml declares {p}"
        for n, p in names.items()
        if n in counts and counts[n] != p
    ]
    if missing or wrong:
        parts = (
            [f"missing: {', '.join(missing)} (run rflow topics apply)"] if missing else []
        ) + wrong
        return Finding("kafka", "fail", f"{settings.kafka_display}: " + "; ".join(parts))
    return Finding(
        "kafka",
        "pass",
        f"{settings.kafka_display}: {len(names)} topics with their declared partitions",
    )


async def check_ingress_keys(settings: Settings) -> Finding:
    """Whether this process holds the keys rflow's ingresses vouch for firings with."""
    from rflow.settings import SettingsError

    try:
        settings.require_ingress_keys()
    except SettingsError as exc:
        return Finding("ingress keys", "fail", str(exc))
    ids = settings.ingress_keyring.ids
    return Finding(
        "ingress keys",
        "pass",
        f"{len(ids)} key(s): {ids[0]!r} signs, {', '.join(map(repr, ids))} verify "
        "(the same on every worker)",
    )


async def check_postgres(settings: Settings) -> Finding:
    try:
        conn = await storage.connect(settings)
    except storage.StorageError as exc:
        return Finding("postgres", "fail", str(exc))
    async with conn:
        todo = await storage.pending(conn, settings.database_schema)
    where = f"{settings.database_display} schema {settings.database_schema}"
    if todo:
        return Finding(
            "postgres",
            "fail",
            f"{where}: not migrated, pending {', '.join(todo)} (run rflow migrate)",
        )
    return Finding("postgres", "pass", f"{where}: reachable and migrated")


def _web3(url: str) -> AsyncWeb3:
    return AsyncWeb3(AsyncHTTPProvider(url, request_kwargs={"timeout": RPC_TIMEOUT}))


def _rpc_urls(project: Project, env: Mapping[str, str]) -> dict[str, list[str]]:
    """Each network's endpoint URLs that are set, in the order the network lists them."""
    return {
        name: [url for _, variable in network.rpc_env_names(name) if (url := env.get(variable))]
        for name, network in project.networks.items()
    }


async def _first_answer(urls: list[str], ask: Callable[[AsyncWeb3], Awaitable[Any]]) -> Any:
    """``ask`` each endpoint in turn, as the worker fails over: the first answer, else the
    last endpoint's failure."""
    failure: Exception | None = None
    for url in urls:
        w3 = _web3(url)
        try:
            return await ask(w3)
        except Exception as exc:  # the next endpoint may answer
            failure = exc
        finally:
            await w3.provider.disconnect()
    assert failure is not None
    raise failure


async def check_network(name: str, chain_id: int, url: str | None, variable: str) -> Finding:
    check = f"network {name}"
    if not url:
        return Finding(check, "fail", f"no RPC URL: set {variable}")
    w3 = _web3(url)
    try:
        actual = await w3.eth.chain_id
    except Exception as exc:  # whatever the failure, it is this endpoint's: name it
        return Finding(check, "fail", f"{redact_url(url)}: {type(exc).__name__}: {exc}")
    finally:
        await w3.provider.disconnect()
    if actual != chain_id:
        return Finding(
            check,
            "fail",
            f"{redact_url(url)} answers chain id {actual}, the project declares {chain_id}",
        )
    return Finding(check, "pass", f"{redact_url(url)} answers with chain id {chain_id}")


async def check_relayer(
    name: str,
    declared: RelayerSpec,
    networks: dict[str, list[str]],
    env: Mapping[str, str],
) -> Finding:
    """The relayer's signer answers (its key is set and valid, its HSM or KMS gives its
    public key), signs for the declared address, and has a balance on its networks."""
    check = f"relayer {name}"
    try:
        address = await signing.ask_address(name, declared, env)
    except RflowError as exc:
        return Finding(check, "fail", exc.message.removeprefix(f"relayer {name}: "))
    if declared.address and declared.address.lower() != address.lower():
        return Finding(
            check,
            "fail",
            f"{signing.where(declared)} signs for {address}, the project declares "
            f"{declared.address}",
        )
    balances = []
    for network, urls in networks.items():
        if not urls:
            balances.append(f"{network}: no RPC URL")
            continue
        balance = await _first_answer(urls, lambda w3: w3.eth.get_balance(address))
        balances.append(f"{network}: {balance} wei")
    zero = [b for b in balances if b.endswith(": 0 wei") or "no RPC" in b]
    return Finding(
        check,
        "warn" if zero else "pass",
        f"{address} ({declared.kind}); " + ", ".join(balances),
    )


async def check_contract(name: str, network: str, address: str, urls: list[str]) -> Finding:
    check = f"contract {name} on {network}"
    if not urls:
        return Finding(check, "fail", f"no RPC URL for network {network}")
    where = AsyncWeb3.to_checksum_address(address)
    code = await _first_answer(urls, lambda w3: w3.eth.get_code(where))
    if not code:
        return Finding(check, "fail", f"no contract code at {address}")
    return Finding(check, "pass", f"{len(code)} bytes of code at {address}")


async def live_checks(
    settings: Settings, project: Project | None, env: Mapping[str, str]
) -> list[Finding]:
    """Every live check, run concurrently, in a stable order; a secret-bearing setting
    (an RPC URL with its key) appears in a finding as scheme and host only, whatever a
    library quoted."""
    checks: list[tuple[str, Awaitable[Finding]]] = [
        ("kafka", check_kafka(settings)),
        ("postgres", check_postgres(settings)),
        ("ingress keys", check_ingress_keys(settings)),
    ]
    if project is not None:
        urls = _rpc_urls(project, env)
        for name, network in project.networks.items():
            # Each endpoint of a network that lists several is checked on its own.
            for endpoint, variable in network.rpc_env_names(name):
                label = name if not network.endpoints else f"{name} endpoint {endpoint}"
                checks.append(
                    (
                        f"network {label}",
                        check_network(label, network.chain_id, env.get(variable), variable),
                    )
                )
        for name, relayer in project.relayers.items():
            nets = {n: urls.get(n, []) for n in relayer.networks}
            checks.append(
                (
                    f"relayer {name}",
                    check_relayer(name, relayer, nets, env),
                )
            )
        for name, contract in project.contracts.items():
            for network, address in contract.address.items():
                checks.append(
                    (
                        f"contract {name} on {network}",
                        check_contract(name, network, address, urls.get(network, [])),
                    )
                )
    found = await asyncio.gather(*(_guard(check, work) for check, work in checks))
    return scrubbed(found, process_secrets(settings, project, env))


def scrubbed(findings: list[Finding], secrets: Secrets) -> list[Finding]:
    """``findings`` with their details scrubbed of ``secrets``."""
    return [Finding(f.check, f.status, secrets.scrub(f.detail)) for f in findings]
