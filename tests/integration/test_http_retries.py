"""HTTP retries on the real stack against a local server: Retry-After honoured up to
max_delay, retryable_status_codes per http_call, and notify's Idempotency-Key."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from tests.integration.harness import free_port
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")


@dataclass
class Scripted:
    """Answers each path from its script of (status, headers), then 200; records when
    each request came and its Idempotency-Key."""

    scripts: dict[str, list[tuple[int, dict[str, str]]]]
    port: int = field(default_factory=free_port)
    seen: dict[str, list[tuple[float, str | None]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.seen[request.path].append((time.monotonic(), request.headers.get("Idempotency-Key")))
        script = self.scripts.get(request.path) or []
        if script:
            status, headers = script.pop(0)
            return web.json_response({"status": status}, status=status, headers=headers)
        return web.json_response({"ok": True})

    async def __aenter__(self) -> Scripted:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


PROJECT = """
channels:
  hook: {{ type: webhook, url: "{url}/notify" }}
workflows:
  polite:
    trigger: {{ manual: {{}} }}
    steps:
      - id: call
        http_call: {{ url: "{url}/limited", method: POST, body: {{ n: 1 }} }}
        retry:
          max_attempts: 3
          backoff: {{ strategy: fixed, delay: 100ms, max_delay: 10s, jitter: false }}
  capped:
    trigger: {{ manual: {{}} }}
    steps:
      - id: call
        http_call: {{ url: "{url}/far", method: POST, body: {{ n: 1 }} }}
        retry:
          max_attempts: 2
          backoff: {{ strategy: fixed, delay: 100ms, max_delay: 1s, jitter: false }}
  strict:
    trigger: {{ manual: {{}} }}
    steps:
      - id: call
        http_call:
          url: "{url}/strict"
          method: POST
          body: {{ n: 1 }}
          retryable_status_codes: [409, 503]
        retry: {{ max_attempts: 3, backoff: 100ms }}
  announce:
    trigger: {{ manual: {{}} }}
    steps:
      - id: tell
        notify: {{ channel: hook, message: hi }}
"""


async def test_retry_after_on_a_429_is_honoured_up_to_max_delay(settings, worker_factory, tmp_path):
    scripts = {
        "/limited": [(429, {"Retry-After": "2"})],
        "/far": [(503, {"Retry-After": "3600"})],
        "/strict": [(409, {}), (429, {"Retry-After": "1"})],
    }
    async with Scripted(scripts) as server:
        path = tmp_path / "project.yaml"
        path.write_text(PROJECT.format(url=server.url))
        worker = worker_factory(project_path=path)
        await worker.wait_ready()

        polite = await fire(settings, path, "polite", "manual:polite:1", {})
        capped = await fire(settings, path, "capped", "manual:capped:1", {})
        strict = await fire(settings, path, "strict", "manual:strict:1", {})
        run = await settled_run(settings, polite)
        assert run["status"] == "succeeded", (run, worker.tail())
        [step] = [s for s in run["steps"] if s["path"] == "call"]
        assert step["attempt"] == 2
        (first, key1), (second, key2) = server.seen["/limited"]
        # The server asked for 2 s; the backoff alone would have waited 100 ms.
        assert second - first >= 2.0, second - first
        assert key1 == key2 == "polite:manual:polite:1:call"

        # Asked to come back in an hour, the step retries at its max_delay (1 s).
        run = await settled_run(settings, capped)
        assert run["status"] == "succeeded", (run, worker.tail())
        (first, _), (second, _) = server.seen["/far"]
        assert 1.0 <= second - first < 60, second - first

        # 409 is listed, so it is retried; 429 is not, so it fails at once, retries left.
        run = await settled_run(settings, strict)
        assert (run["status"], run["error_kind"]) == ("failed", "rate_limited"), run
        assert len(server.seen["/strict"]) == 2
        [step] = [s for s in run["steps"] if s["path"] == "call"]
        assert step["attempt"] == 2 and step["error_message"].startswith("HTTP 429 from")


async def test_notify_sends_an_idempotency_key_a_header_can_carry(
    settings, worker_factory, tmp_path
):
    async with Scripted({}) as server:
        path = tmp_path / "project.yaml"
        path.write_text(PROJECT.format(url=server.url))
        worker = worker_factory(project_path=path)
        await worker.wait_ready()
        # A trigger key with characters a header cannot carry (a manual run's key is the
        # caller's).
        rid = await fire(settings, path, "announce", "manual:announce:café\nnext", {})
        run = await settled_run(settings, rid)
        assert run["status"] == "succeeded", (run, worker.tail())
        [(_, key)] = server.seen["/notify"]
        assert key is not None and key.startswith("sha256:") and len(key) == 7 + 64, key
