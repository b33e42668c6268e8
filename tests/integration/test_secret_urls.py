"""An RPC URL that carries a provider's key (``http://USER:KEY@host/v3/KEY2``) is shown as
scheme and host only, everywhere: with the node down, failing (quoting the key back) and
up, through a chain follower, a read, a send retried until the node answers and a send
an operator speeds up while the node fails, beside a webhook channel with a token header
and an http_call with a secret header that fail. Then every Kafka topic (changelogs
included), every table, the worker's log, the CLI's output for every command, the API's
answers, the metrics and the console's pages in a browser are searched for the key, the
password, the user and the other secrets: none of them is anywhere."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import click
import pytest
from playwright.async_api import expect

from rflow import storage
from rflow.cli import main as cli_main
from rflow.engine.keys import run_id
from tests.integration import chain
from tests.integration.browser import chromium, sign_in
from tests.integration.harness import wait_until
from tests.integration.keyed_rpc import KeyedRpc
from tests.integration.test_api import call
from tests.integration.test_runs import settled_run
from tests.integration.test_secrets import assert_nowhere, places_to_search
from tests.integration.test_sends import pending_sends, private_node, token_for, transfers_from

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

EXAMPLES = str(Path(__file__).resolve().parents[2] / "examples")
USER = "rpcuser-5c1e"
KEY = "SECRETKEY"
PATH_KEY = "SECRETKEY2"
ALERT_TOKEN = "alert-token-7d0b2f"
CALL_SECRET = "call-secret-91ae44"

PROJECT = """
networks:
  local: { chain_id: 31337, confirmations: 0 }
contracts:
  Token:
    address: { local: "@TOKEN@" }
    abi: "@ABI@"
relayers:
  payout: { key_env: PAYOUT_KEY, networks: [local] }
channels:
  alert:
    type: webhook
    url: "@SINK@/alert"
    headers: { X-Token: "${ALERT_TOKEN}" }
budgets:
  daily:
    window: 24h
    max_native_value: 1 ether
    max_token_value: { Token: "1000000" }
    scope: { relayers: [payout] }
workflows:
  probe:
    trigger: { manual: {} }
    steps:
      - id: balance
        read:
          network: local
          contract: Token
          function: "balanceOf(address)(uint256)"
          args: ["@RELAYER@"]
  pay:
    trigger: { manual: { inputs: [to, amount] } }
    permissions: { relayers: [payout], max_value_per_tx: 0 wei }
    budgets: [daily]
    steps:
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "transfer(address,uint256)"
          args: ["${{ inputs.to }}", "${{ inputs.amount }}"]
        retry: { max_attempts: 50, backoff: 1s }
      - id: tell
        continue_on_error: true
        notify: { channel: alert, message: "paid ${{ inputs.amount }}" }
      - id: call
        continue_on_error: true
        http_call:
          url: "@SINK@/call"
          headers: { Authorization: "Bearer ${CALL_SECRET}", X-Api-Key: "${CALL_SECRET}" }
          expect_status: 201
  watch:
    trigger: { event: { network: local, contract: Token, name: Transfer } }
    steps:
      - id: note
        command: { name: log, args: { message: "transfer of ${{ trigger.args.value }}" } }
"""


def write_project(folder: Path, token: str, relayer: str, sink: str) -> Path:
    path = folder / "project.yaml"
    path.write_text(
        PROJECT.replace("@TOKEN@", token)
        .replace("@ABI@", str(chain.artifact_path("TestToken")))
        .replace("@RELAYER@", relayer)
        .replace("@SINK@", sink)
    )
    return path


def secrets_of(rpc: KeyedRpc) -> list[str]:
    """Every value that must appear nowhere: the URL's user, password and path key, the
    Basic credentials they make, and the channel's and the call's secrets."""
    basic = base64.b64encode(f"{rpc.user}:{rpc.password}".encode()).decode()
    return [rpc.user, rpc.password, rpc.path_key, basic, ALERT_TOKEN, CALL_SECRET]


async def rflow(worker, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``rflow ARGS`` in a process of its own, with the worker's settings and ``env``."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "rflow.cli", *args],
        env={**worker.settings.to_env(), **env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        input="",
    )


async def start(worker, workflow: str, inputs: dict[str, Any] | None = None) -> str:
    """Start a run of ``workflow`` through the API; its run id."""
    status, started = await call(worker, "POST", f"/api/workflows/{workflow}/runs", inputs or {})
    assert status == 202, started
    return run_id(workflow, started["trigger_key"])


async def metrics_text(worker) -> str:
    """What the worker's ``/metrics`` serves: every metric with its labels."""

    def fetch() -> str:
        request = urllib.request.Request(worker.url + "/metrics", headers=worker.auth)
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.read().decode()

    text = await asyncio.to_thread(fetch)
    assert 'network="local"' in text  # the labels are there to search
    return text


def error_of(run: dict[str, Any], path: str) -> str:
    step = next(s for s in run["steps"] if s["path"] == path)
    return f"{step['error_kind']}: {step['error_message']}"


async def test_an_rpc_key_appears_nowhere_with_the_node_down_failing_and_up(
    settings, worker_factory, tmp_path, sink
):
    sink.echo_headers = True
    sink.statuses = {"/alert": 500}  # the channel's endpoint fails, echoing its token
    async with contextlib.AsyncExitStack() as stack:
        anvil, w3 = await private_node(stack)
        relayer = await chain.funded_account(w3)
        token = await token_for(w3, relayer)
        rpc = KeyedRpc(anvil, USER, KEY, PATH_KEY)
        stack.push_async_callback(rpc.close)
        project = write_project(tmp_path, token, relayer.address, sink.url)
        env = {
            "PAYOUT_KEY": relayer.key.hex(),
            "ALERT_TOKEN": ALERT_TOKEN,
            "CALL_SECRET": CALL_SECRET,
            "RFLOW_RPC_URL_LOCAL": rpc.url,
        }
        worker = worker_factory(
            project_path=project, env=env, rpc_urls={"local": rpc.url}, send_bump_after=600.0
        )
        await worker.wait_ready()

        # The node down: the follower, a read and a send meet a refused connection.
        probe_down = await start(worker, "probe", {})
        to = chain.Account.create().address
        paid = await start(worker, "pay", {"to": to, "amount": 7})
        run = await settled_run(settings, probe_down)
        assert run["status"] == "failed", run

        async def logged_shown() -> bool:
            return rpc.shown in worker.log_path.read_text(errors="replace")

        await wait_until(logged_shown, what="the worker to log the node as unavailable")

        # The node failing, quoting its path and the Authorization header back.
        await rpc.set("failing")
        probe_failing = await start(worker, "probe", {})
        run = await settled_run(settings, probe_failing)
        assert run["status"] == "failed", run
        assert rpc.shown in error_of(run, "balance"), run

        # The node up: the retried send goes out, the follower sees its Transfer.
        await rpc.set("up")
        run = await settled_run(settings, paid, timeout=120)
        assert run["status"] == "succeeded", (run, worker.tail())
        assert [s["status"] for s in run["steps"]] == ["succeeded", "failed", "failed"], run
        # The endpoints echoed the headers: scrubbed, their placeholders stand in the errors.
        assert '"X-Token": "${ALERT_T' in error_of(run, "tell"), run
        assert "${CALL_SECRET}" in error_of(run, "call"), run
        assert len(await transfers_from(w3, token, relayer.address)) == 1

        async def following() -> bool:
            conn = await storage.connect(settings)
            async with conn:
                cur = await conn.execute("SELECT 1 FROM chain_cursors WHERE network = 'local'")
                return await cur.fetchone() is not None

        await wait_until(following, timeout=60, what="the follower to reach the node")
        minter = await chain.funded_account(w3)
        await chain.transact(w3, "TestToken", token, "mint", minter.address, 5, account=minter)

        async def watched() -> bool:
            status, found = await call(worker, "GET", "/api/runs?workflow=watch")
            return status == 200 and any(r["status"] == "succeeded" for r in found["runs"])

        await wait_until(watched, timeout=60, what="the follower to fire on the Transfer")

        # A send held in the pool, sped up by an operator while the node fails.
        await chain.rpc(w3, "evm_setAutomine", False)
        held = await start(worker, "pay", {"to": to, "amount": 8})
        [send] = await wait_until(lambda: pending_sends(settings, 1), what="the send to be out")
        await rpc.set("failing")
        outputs: list[str] = []
        status, answer = await call(worker, "POST", f"/api/sends/{send.send_id}/speedup", {})
        outputs.append(json.dumps(answer, ensure_ascii=False))
        assert status == 200, answer
        # What the node said, without the key: its URL as scheme and host, or (once its
        # failures have opened the endpoint's breaker) the endpoint's name.
        said = json.dumps(answer, ensure_ascii=False)
        assert rpc.shown in said or "endpoint default: its breaker is open" in said, answer
        pages = await console_pages(worker, settings, send, [probe_down, probe_failing, paid])
        await rpc.set("up")
        await chain.rpc(w3, "evm_setAutomine", True)
        await chain.rpc(w3, "evm_mine")
        assert (await settled_run(settings, held, timeout=90))["status"] == "succeeded"

        for rid in (probe_down, probe_failing, paid, held):
            outputs.append(
                json.dumps(await call(worker, "GET", f"/api/runs/{rid}"), ensure_ascii=False)
            )
        for path in ("/api/runs", "/api/workflows", "/api/budgets", "/api/sends"):
            outputs.append(json.dumps(await worker.get(path), ensure_ascii=False))
        outputs.append(await metrics_text(worker))
        for args in (
            ("runs", "list", "--json"),
            ("runs", "show", paid, "--json"),
            ("runs", "show", probe_failing),
            ("sends", "ls", "--json"),
            ("doctor", str(project), "--json"),
            ("doctor", str(project)),
        ):
            result = await rflow(worker, *args, env=env)
            outputs += [result.stdout, result.stderr]
        places = await places_to_search(settings, worker, outputs)
        places["console"] = pages
        # The scan sees what these places hold: the URL as scheme and host is in each.
        for place in ("worker log", "topics", "database", "CLI and API", "console"):
            assert any(rpc.shown in t for t in places[place]), place
        assert_nowhere(secrets_of(rpc), places)


async def console_pages(worker, settings, send, runs: list[str]) -> list[str]:
    """The console's pages in a browser, with a speed-up from the sends page while the
    node fails: the text of each page and of the answer to the speed-up."""
    texts = []
    async with chromium(Path(worker.log_path).parent / "chromium") as browser:
        page = await browser.new_page()
        base = worker.url
        await sign_in(page, base, settings.api_token.get_secret_value())
        await page.goto(f"{base}/console/sends")
        card = page.locator(f"article[data-send='{send.send_id}']")
        await card.locator("button:has-text('Speed up')").click()
        flash = page.locator(".flash")
        await expect(flash).to_contain_text(f"Send {send.send_id} sped up")
        texts.append(await page.content())
        for path in (
            "/console/runs",
            *(f"/console/runs/{rid}" for rid in runs),
            "/console/workflows",
            "/console/workflows/pay",
            "/console/budgets",
            "/console/approvals",
            "/console/dead-letters",
        ):
            await page.goto(base + path)
            await expect(page.locator("main")).to_be_visible()
            texts.append(await page.content())
    return texts


# --- every command --------------------------------------------------------------------


def every_command() -> list[str]:
    """The names of every ``rflow`` command, subcommands with their group's name."""
    context = click.Context(cli_main)
    found = []

    def walk(command: click.Command, prefix: tuple[str, ...]) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(context):
                walk(command.get_command(context, name), (*prefix, name))
        else:
            found.append(" ".join(prefix))

    walk(cli_main, ())
    return found


async def test_no_command_shows_the_rpc_key_with_the_node_up(
    settings, worker_factory, tmp_path, sink, w3
):
    relayer = await chain.funded_account(w3)
    token = await token_for(w3, relayer)
    rpc = KeyedRpc(settings.rpc_url("local"), USER, KEY, PATH_KEY)
    await rpc.set("up")
    try:
        project = write_project(tmp_path, token, relayer.address, sink.url)
        env = {
            "PAYOUT_KEY": relayer.key.hex(),
            "ALERT_TOKEN": ALERT_TOKEN,
            "CALL_SECRET": CALL_SECRET,
            "RFLOW_RPC_URL_LOCAL": rpc.url,
        }
        worker = worker_factory(project_path=project, env=env, rpc_urls={"local": rpc.url})
        await worker.wait_ready()
        to = chain.Account.create().address
        paid = await start(worker, "pay", {"to": to, "amount": 7})
        assert (await settled_run(settings, paid, timeout=90))["status"] == "succeeded"
        probe = await start(worker, "probe", {})
        assert (await settled_run(settings, probe))["status"] == "succeeded"
        await rpc.set("failing")  # a read the node refuses, quoting the key back
        refused = await start(worker, "probe", {})
        assert (await settled_run(settings, refused))["status"] == "failed"
        await rpc.set("up")

        p = str(project)
        commands: dict[str, list[tuple[str, ...]]] = {
            "approvals approve": [("approvals", "approve", paid, "--project", p)],
            "approvals ls": [("approvals", "ls", "--project", p, "--json")],
            "approvals reject": [("approvals", "reject", paid, "--project", p)],
            "approvals show": [("approvals", "show", paid)],
            "audit ls": [("audit", "ls"), ("audit", "ls", "--json")],
            "budgets ls": [("budgets", "ls", "--project", p), ("budgets", "ls", "--json")],
            "dead-letters ls": [("dead-letters", "ls", "--json")],
            "dead-letters replay": [("dead-letters", "replay", "1")],
            "dead-letters show": [("dead-letters", "show", "1")],
            "deploy": [("deploy", p, "--json")],
            # After deploy: the candidate is replayed beside the deployed project, reading
            # the chain through the network's endpoint (and a fork of a keyed URL).
            "backtest": [
                ("backtest", p, "--since", "1h", "--json"),
                ("backtest", p, "--since", "1h", "--fork-url", rpc.url),
            ],
            "deployments": [("deployments", "--json"), ("deployments",)],
            "dev emit": [("dev", "emit", "--project", EXAMPLES, "--json")],
            "doctor": [("doctor", p), ("doctor", p, "--json")],
            "kafka acls": [("kafka", "acls", "--producer", "User:outside", "--json")],
            "keys address": [("keys", "address", p, "payout")],
            "keys generate": [
                (
                    *("keys", "generate", "--module", "/nonexistent/p11.so"),
                    *("--token", "t", "--label", "l", "--pin-env", "NO_PIN"),
                )
            ],
            "migrate": [("migrate", "--json")],
            "run": [("run", "probe", "--project", p, "--json", "--wait")],
            "runs approve": [("runs", "approve", paid, "--project", p)],
            "runs cancel": [("runs", "cancel", paid)],
            "runs list": [("runs", "list"), ("runs", "list", "--json")],
            "runs reject": [("runs", "reject", paid, "--project", p)],
            "runs retry": [("runs", "retry", refused, "--yes", "--project", p, "--json")],
            "runs signal": [("runs", "signal", paid, "go", "--json")],
            "runs show": [
                ("runs", "show", refused),
                ("runs", "show", refused, "--json", "--full"),
                ("runs", "show", paid, "--json"),
            ],
            "schedules disable": [("schedules", "disable", "pay")],
            "schedules enable": [("schedules", "enable", "pay")],
            "schedules ls": [("schedules", "ls", "--json")],
            "schema": [("schema",)],
            "sends cancel": [("sends", "cancel", "s0000", "--wait", "1")],
            "sends ls": [("sends", "ls"), ("sends", "ls", "--json")],
            "sends speedup": [("sends", "speedup", "s0000", "--wait", "1")],
            "spend": [("spend",), ("spend", "--json")],
            "state": [("state", "probe", "--json")],
            "topics apply": [("topics", "apply", "--dry-run", "--json")],
            "trigger": [("trigger", "probe", "--project", p, "--json")],
            "validate": [("validate", p), ("validate", p, "--json")],
            "worker": [],  # running: its log is searched below
            "workers": [("workers",), ("workers", "--json")],
            "workflow ls": [("workflow", "ls", "--project", p, "--json")],
            "workflow pause": [("workflow", "pause", "probe", "--reason", "check")],
            "workflow resume": [("workflow", "resume", "probe")],
        }
        assert sorted(commands) == sorted(every_command())
        outputs = []
        for invocations in commands.values():
            for args in invocations:
                result = await rflow(worker, *args, env=env)
                outputs += [result.stdout, result.stderr]
        # With the node failing, quoting the key back, the commands that read it directly.
        await rpc.set("failing")
        for args in (("dev", "emit", "--project", EXAMPLES, "--json"), ("doctor", p, "--json")):
            result = await rflow(worker, *args, env=env)
            assert result.returncode != 0, (args, result.stdout, result.stderr)
            outputs += [result.stdout, result.stderr]
        await rpc.set("up")
        doctor = await rflow(worker, "doctor", p, "--json", env=env)
        [network] = [
            f for f in json.loads(doctor.stdout)["findings"] if f["check"] == "network local"
        ]
        assert network == {
            "check": "network local",
            "status": "pass",
            "detail": f"{rpc.shown} answers with chain id 31337",
        }
        places = await places_to_search(settings, worker, outputs)
        assert any(rpc.shown in t for t in places["CLI and API"])
        assert_nowhere(secrets_of(rpc), places)
    finally:
        await rpc.close()


async def test_no_endpoint_of_a_pool_shows_its_key(settings, worker_factory, tmp_path, sink, w3):
    """A network of three endpoints, each with its own user, password and path key: one
    down, one failing (quoting its key back), one up. Reads and a send fail over to the
    one that answers; the worker's log, its metrics (labelled by endpoint name), the
    topics, the tables, the API, the run's errors and doctor (which checks each endpoint)
    show each endpoint by its name, or its URL as scheme and host, and no key of any."""
    relayer = await chain.funded_account(w3)
    token = await token_for(w3, relayer)
    upstream = settings.rpc_url("local")
    gone = KeyedRpc(upstream, "gone-user-4a1", "GONEPASS41", "GONEPATHKEY41")
    failing = KeyedRpc(upstream, "fail-user-7b2", "FAILPASS72", "FAILPATHKEY72")
    good = KeyedRpc(upstream, "good-user-9c3", "GOODPASS93", "GOODPATHKEY93")
    await failing.set("failing")
    await good.set("up")
    try:
        project = write_project(tmp_path, token, relayer.address, sink.url)
        text = project.read_text().replace(
            "local: { chain_id: 31337, confirmations: 0 }",
            "local:\n    chain_id: 31337\n    confirmations: 0\n    endpoints:\n"
            "      - { name: gone, url_env: URL_GONE, weight: 100 }\n"
            "      - { name: failing, url_env: URL_FAILING, weight: 100 }\n"
            "      - { name: good, url_env: URL_GOOD }",
        )
        project.write_text(text)
        env = {
            "PAYOUT_KEY": relayer.key.hex(),
            "ALERT_TOKEN": ALERT_TOKEN,
            "CALL_SECRET": CALL_SECRET,
            "URL_GONE": gone.url,
            "URL_FAILING": failing.url,
            "URL_GOOD": good.url,
        }
        worker = worker_factory(project_path=project, env=env)
        await worker.wait_ready()
        probe = await start(worker, "probe", {})
        assert (await settled_run(settings, probe, timeout=90))["status"] == "succeeded"
        to = chain.Account.create().address
        paid = await start(worker, "pay", {"to": to, "amount": 3})
        assert (await settled_run(settings, paid, timeout=120))["status"] == "succeeded"
        assert len(await transfers_from(w3, token, relayer.address)) == 1
        assert good.forwarded > 0 and failing.failed > 0

        metrics = await metrics_text(worker)
        for name in ("gone", "failing", "good"):
            assert f'endpoint="{name}"' in metrics, name
        outputs = [metrics]
        for rid in (probe, paid):
            outputs.append(
                json.dumps(await call(worker, "GET", f"/api/runs/{rid}"), ensure_ascii=False)
            )
        for path in ("/api/runs", "/api/sends"):
            outputs.append(json.dumps(await worker.get(path), ensure_ascii=False))
        p = str(project)
        for args in (("doctor", p), ("runs", "show", paid, "--json", "--full"), ("sends", "ls")):
            result = await rflow(worker, *args, env=env)
            outputs += [result.stdout, result.stderr]
        doctor = await rflow(worker, "doctor", p, "--json", env=env)
        outputs += [doctor.stdout, doctor.stderr]
        findings = {f["check"]: f for f in json.loads(doctor.stdout)["findings"]}
        assert findings["network local endpoint good"] == {
            "check": "network local endpoint good",
            "status": "pass",
            "detail": f"{good.shown} answers with chain id 31337",
        }
        for rpc, name in ((gone, "gone"), (failing, "failing")):
            finding = findings[f"network local endpoint {name}"]
            assert finding["status"] == "fail" and rpc.shown in finding["detail"], finding

        places = await places_to_search(settings, worker, outputs)
        log = places["worker log"][0]
        assert "endpoint gone" in log or "gone:" in log, worker.tail()
        assert_nowhere([s for rpc in (gone, failing, good) for s in secrets_of(rpc)[:4]], places)
    finally:
        for rpc in (gone, failing, good):
            await rpc.close()


async def test_a_fork_of_a_keyed_url_that_fails_shows_no_key():
    """anvil, asked to fork a keyed URL whose node fails (quoting the key back), quotes
    the URL in its error: the backtest's reason shows it as scheme and host only."""
    from rflow.backtest.chain import ChainError, Fork, anvil_binary

    assert anvil_binary() is not None, "the local stack's anvil (scripts/stack install)"
    rpc = KeyedRpc("http://127.0.0.1:1", USER, KEY, PATH_KEY)
    await rpc.set("failing")
    try:
        with pytest.raises(ChainError) as caught:
            await Fork(rpc.url).start()
    finally:
        await rpc.close()
    message = str(caught.value)
    assert message.startswith("anvil could not fork --fork-url: "), message
    for secret in secrets_of(rpc)[:4]:
        assert secret.lower() not in message.lower(), (secret, message)
