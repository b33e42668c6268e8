"""Rate limits: run starts beyond the limit are deferred, never dropped; the durable window
holds across processes and restarts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from rflow import storage
from rflow.storage import rate_limits
from tests.integration.harness import wait_until
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("schema")

CLAIMER = """
import asyncio, json, sys
from datetime import UTC, datetime, timedelta
from rflow import storage
from rflow.settings import Settings
from rflow.storage import rate_limits

async def one(settings, now):
    conn = await storage.connect(settings)
    async with conn:
        return await rate_limits.claim(conn, "w", max=7, per=timedelta(hours=1), now=now)

async def main():
    settings = Settings.from_env()
    now = datetime.fromisoformat(sys.argv[1])
    results = await asyncio.gather(*(one(settings, now) for _ in range(15)))
    print(json.dumps(sum(r is None for r in results)))

asyncio.run(main())
"""


def claimer(settings, now: datetime) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CLAIMER, now.isoformat()],
        env={**os.environ, **settings.to_env()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_two_processes_racing_for_a_durable_window_never_exceed_max(settings):
    now = datetime.now(UTC)
    processes = [claimer(settings, now), claimer(settings, now)]
    outputs = [await asyncio.to_thread(p.communicate, timeout=60) for p in processes]
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err
    granted = sum(json.loads(out) for out, _ in outputs)
    assert granted == 7  # 30 claims raced for a window of 7

    # A restart forgets nothing: the window is in Postgres, full until an hour after it
    # was anchored, and then re-anchored by the next claim.
    conn = await storage.connect(settings)
    async with conn:
        later = now + timedelta(minutes=59)
        refused = await rate_limits.claim(conn, "w", max=7, per=timedelta(hours=1), now=later)
        assert refused is not None and refused - now <= timedelta(hours=1)
        assert refused > later
        free = await rate_limits.claim(conn, "w", max=7, per=timedelta(hours=1), now=refused)
        assert free is None


async def test_a_claim_refused_behind_the_first_claim_of_a_window_says_when_it_frees(settings):
    """The first claim of a new window is still open when a second one, refused, starts:
    the refusal must still say when the window frees (not fail on a row it cannot see)."""
    now, hour = datetime.now(UTC), timedelta(hours=1)
    first, second, watcher = [await storage.connect(settings) for _ in range(3)]
    async with first, second, watcher:
        async with first.transaction():
            assert await rate_limits.claim(first, "w", max=1, per=hour, now=now) is None
            refused = asyncio.create_task(rate_limits.claim(second, "w", max=1, per=hour, now=now))

            async def blocked() -> bool:
                cur = await watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
                    " AND wait_event_type = 'Lock'",
                    (second.info.backend_pid,),
                )
                return (await cur.fetchone())[0] == 1

            await wait_until(blocked, timeout=10, what="the second claim to wait for the first")
        assert await refused == now + hour


PROJECT = """
workflows:
  limited:
    trigger: {{ manual: {{}} }}
    rate_limit: {{ max: 2, per: {per}s{durable} }}
    steps:
      - id: hit
        http_call: {{ url: "{url}/hit", method: POST, body: {{ n: "${{{{ trigger.n }}}}" }} }}
"""


@pytest.mark.usefixtures("applied_topics")
@pytest.mark.parametrize("durable", [True, False], ids=["durable", "in-process"])
async def test_starts_over_the_limit_wait_for_room_and_none_is_dropped(
    settings, worker_factory, tmp_path, sink, durable
):
    per = 2
    path = tmp_path / "project.yaml"
    path.write_text(
        PROJECT.format(per=per, url=sink.url, durable=", durable: true" if durable else "")
    )
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    rids = [
        await fire(settings, path, "limited", f"manual:limited:{n}", {"n": n}) for n in range(6)
    ]
    runs = [await settled_run(settings, rid, timeout=60) for rid in rids]
    assert {run["status"] for run in runs} == {"succeeded"}
    assert len(sink.keys("/hit")) == 6
    started = sorted(run["started_at"] for run in runs)
    # At most two starts in any window of `per` seconds. A run's recorded start is when
    # the runner applied it, a little after its claim: allow for that delay.
    for first, third in zip(started, started[2:], strict=False):
        assert third - first >= timedelta(seconds=per) - timedelta(milliseconds=250), started
