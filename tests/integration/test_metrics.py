"""Metrics and dashboards: Prometheus, run with the shipped ``scripts/compose/prometheus.yml``
unchanged, finds the workers by the targets they leave and scrapes them with the token
file, and every PromQL expression of the shipped Grafana dashboards is valid and returns
series from a worker under load."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from rflow import workers
from tests.integration import chain
from tests.integration.harness import free_port, wait_until
from tests.integration.test_runs import fire, settled_run
from tests.integration.test_sends import chain_resources, token_for

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "scripts" / "compose" / "grafana" / "provisioning" / "dashboards" / "rflow"

PROJECT = """
budgets:
  daily:
    window: 24h
    max_token_value: {{ Token: "1000000" }}
workflows:
  busy:
    trigger: {{ manual: {{}} }}
    concurrency: {{ group: "${{{{ trigger.account }}}}" }}
    rate_limit: {{ max: 2, per: 5s }}
    circuit_breaker: {{ max_failures: 50, window: 1m }}
    steps:
      - id: hit
        http_call: {{ url: "{url}/hit", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
  flaky:
    trigger: {{ manual: {{}} }}
    steps:
      - id: refused
        http_call: {{ url: "http://127.0.0.1:{closed}/", method: POST, timeout: 2s }}
        retry: {{ max_attempts: 2, backoff: 1s }}
  pay:
    trigger: {{ manual: {{}} }}
    permissions: {{ relayers: [payout] }}
    budgets: [daily]
    steps:
      - id: pay
        send_transaction:
          network: local
          relayer: payout
          contract: Token
          function: "transfer(address,uint256)"
          args: ["${{{{ trigger.to }}}}", 7]
"""


def expressions() -> list[tuple[str, str]]:
    """(dashboard/panel, PromQL) of every panel target; ``$workflow`` means every one."""
    found = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                expr = target["expr"].replace("$workflow", ".*")
                found.append((f"{path.stem}: {panel['title']}", expr))
    return found


def query(url: str, expr: str) -> dict:
    """Prometheus's answer to ``expr`` (a refused query answers with its error)."""
    try:
        with urllib.request.urlopen(
            f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=5
        ) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return json.loads(body)
        except ValueError:  # not up yet: "Service Unavailable"
            return {"status": f"HTTP {exc.code}: {body[:100]!r}", "data": {"result": []}}
    except (urllib.error.URLError, ConnectionError):
        return {"status": "unreachable", "data": {"result": []}}


async def test_every_dashboard_query_is_valid_and_returns_series_from_a_loaded_worker(
    settings, worker_factory, tmp_path, sink
):
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus is not installed: scripts/stack install puts it there"
    assert len(expressions()) >= 15

    w3 = chain.connect(settings.rpc_url("local"))
    try:
        relayer = await chain.funded_account(w3)
        token = await token_for(w3, relayer)
    finally:
        await w3.provider.disconnect()
    project = tmp_path / "project.yaml"
    project.write_text(chain_resources(token) + PROJECT.format(url=sink.url, closed=free_port()))
    # The shipped configuration, byte for byte, in a tree of the test's own: what it finds
    # at ../../.stack/prometheus is this test's targets and token, not the stack's.
    shipped = ROOT / "scripts" / "compose" / "prometheus.yml"
    config = tmp_path / "checkout" / "scripts" / "compose" / "prometheus.yml"
    config.parent.mkdir(parents=True)
    config.write_bytes(shipped.read_bytes())
    stack = tmp_path / "checkout" / ".stack" / "prometheus"
    stack.mkdir(parents=True)
    (stack / "scrape-token").write_text(settings.api_token.get_secret_value())
    targets = stack / "targets"
    env = {"PAYOUT_KEY": relayer.key.hex()}
    worker = worker_factory(project_path=project, env=env, metrics_targets_dir=targets)
    other = worker_factory(project_path=project, env=env, metrics_targets_dir=targets)
    await worker.wait_ready()
    await other.wait_ready()

    # Load: a lane with a queue and a rate limit, a run that retries and is dead-lettered,
    # and a send charged to a budget.
    sink.held.add("/hit")
    # Fired together: five lanes start within the rate limit's window on two workers (the
    # window is each worker's own), so one worker starts three and defers one however the
    # groups are shared and however slowly a busy machine produces.
    busy = list(
        await asyncio.gather(
            *(
                fire(settings, project, "busy", f"manual:busy:{n}", {"account": "a", "n": n})
                for n in range(4)
            ),
            *(
                fire(settings, project, "busy", f"manual:busy:b{n}", {"account": f"b{n}", "n": n})
                for n in range(4)
            ),
        )
    )
    flaky = await fire(settings, project, "flaky", "manual:flaky:1", {})
    to = chain.Account.create().address
    pay = await fire(settings, project, "pay", "manual:pay:1", {"to": to})

    port = free_port()
    process = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        expected = {
            workers.worker_name(socket.gethostname(), w.settings.web_port) for w in (worker, other)
        }

        async def both_scraped():
            answer = await asyncio.to_thread(query, url, 'up{job="rflow-worker"} == 1')
            found = {r["metric"]["rflow_worker"] for r in answer["data"]["result"]}
            return found if found == expected else None

        await wait_until(both_scraped, timeout=60, what="Prometheus to scrape both workers")

        async def lane_waits():
            # The lane's queue and the deferrals show while the first runs are held.
            answer = await asyncio.to_thread(query, url, "max(rflow_lane_waiting) > 0")
            return answer["data"]["result"]

        await wait_until(lane_waits, timeout=60, what="Prometheus to see a lane queue")

        def quiet_owner(expr: str):
            async def seen():
                answer = await asyncio.to_thread(query, url, expr)
                return answer["data"]["result"]

            return seen

        # The lane's owner is held by the sink: it goes without a change while others wait.
        await wait_until(
            quiet_owner('max(rflow_lane_owner_quiet_seconds{workflow="busy"}) > 0'),
            timeout=60,
            what="Prometheus to see the lane's owner quiet",
        )
        sink.release()
        for rid in busy:
            assert (await settled_run(settings, rid, timeout=60))["status"] == "succeeded"
        # Nothing waits any more: no lane has a quiet owner to show.
        await wait_until(
            quiet_owner('max(rflow_lane_owner_quiet_seconds{workflow="busy"}) == 0'),
            timeout=60,
            what="the lane's owner gauge back to 0",
        )
        assert (await settled_run(settings, flaky, timeout=60))["status"] == "failed"
        assert (await settled_run(settings, pay, timeout=60))["status"] == "succeeded"

        results: dict[str, str] = {}

        async def every_query_answers():
            for name, expr in expressions():
                answer = await asyncio.to_thread(query, url, expr)
                if answer["status"] != "success":
                    results[name] = f"{expr}: {answer}"
                elif not answer["data"]["result"]:
                    results[name] = f"{expr}: no series"
                else:
                    results.pop(name, None)
            return not results

        try:
            await wait_until(every_query_answers, timeout=60, what="every dashboard query")
        except AssertionError:
            pytest.fail("dashboard queries without an answer:\n" + "\n".join(results.values()))
        # A worker that stops takes its target with it; the other's stays.
        assert len(list(targets.glob("*.json"))) == 2
        other.stop()
        assert [p.name for p in targets.glob("*.json")] == [
            f"{workers.client_id(socket.gethostname(), worker.settings.web_port)}.json"
        ]
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 30)


def test_dashboards_refer_only_to_metrics_the_worker_exports():
    exported = set(re.findall(r'"(rflow_[a-z_]+)"', (ROOT / "streams" / "metrics.py").read_text()))
    for name, expr in expressions():
        for metric in re.findall(r"\brflow_[a-z_]+", expr):
            base = re.sub(r"_(total|bucket|sum|count)$", "", metric)
            assert base in exported, f"{name}: {metric} is not exported"
