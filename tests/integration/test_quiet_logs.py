"""An idle, healthy worker logs no ERROR for five minutes, and no WARNING once it is idle,
with Faust's livelock check made to fire often."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.integration.harness import wait_until
from tests.integration.test_worker import send_trigger, table_entry, trigger

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

# Faust's livelock check runs every commit interval x 2.5 (7 s) and reports a partition
# once it has gone stream_processing_timeout seconds without progress. With the timeout
# at 1 s every check past the first second reports whatever it finds, over five minutes
# of idling: about forty checks on each worker.
TIMEOUT = 1.0
IDLE = 300.0


@pytest.fixture
def worker_factory(worker_factory, tmp_path):
    project = tmp_path / "project.yaml"
    project.write_text(
        "channels:\n  ops: { type: log }\nworkflows:\n  sweep:\n    trigger: { manual: {} }\n"
        "    steps:\n      - id: note\n        notify: { channel: ops, message: sweeping }\n"
    )

    def start(**overrides):
        return worker_factory(
            **{"project_path": project, "stream_processing_timeout": TIMEOUT, **overrides}
        )

    return start


async def settled(first, second, count: int) -> bool:
    """Every firing is in the triggers table of one of the two workers."""
    for i in range(count):
        statuses = [
            (await w.get(f"/rflow/triggers/sweep:manual:sweep:q{i}/"))[0] for w in (first, second)
        ]
        if 200 not in statuses:
            return False
    return True


@pytest.mark.timeout(600)
async def test_an_idle_worker_logs_no_error(settings, worker_factory):
    first = worker_factory()
    await first.wait_ready()
    # Runs leave records in every changelog (triggers, runs, lanes) that a successor
    # recovers from; a second worker keeps standby copies of the first one's tables,
    # reading their changelogs as they grow: the partitions the livelock check looks at.
    for i in range(5):
        await send_trigger(settings, trigger(f"manual:sweep:q{i}", i=i))
    await table_entry(first, "manual:sweep:q4")
    second = worker_factory(data_dir=settings.data_dir.parent / "second")
    await second.wait_ready()
    for i in range(5, 30):
        await send_trigger(settings, trigger(f"manual:sweep:q{i}", i=i))
    await wait_until(lambda: settled(first, second, 30), timeout=60, what="30 firings recorded")
    # Once both are ready and the firings recorded, the workers are idle.
    await wait_until(lambda: both_ready(first, second), timeout=60, what="both workers ready")
    idle_from = [len(w.log_path.read_text(errors="replace").splitlines()) for w in (first, second)]
    await asyncio.sleep(IDLE)  # idling is the behaviour under test: nothing to await
    idle_until = [len(w.log_path.read_text(errors="replace").splitlines()) for w in (first, second)]
    for worker in (first, second):
        assert worker.proc is not None and worker.proc.poll() is None, worker.tail()
        worker.stop()

    logs = (first.log_path, second.log_path)
    for log, start, end in zip(logs, idle_from, idle_until, strict=True):
        lines = log.read_text(errors="replace").splitlines()
        errors = [line for line in lines if re.search(r"\[ERROR\]", line)]
        assert errors == [], f"{log.name}:\n" + "\n".join(errors[:20])
        idle = lines[start:end]  # stopping the first worker rebalances the second
        warnings = [line for line in idle if re.search(r"\[WARNING\]", line)]
        assert warnings == [], f"{log.name}, idle:\n" + "\n".join(warnings[:20])


async def both_ready(first, second) -> bool:
    return all([(await w.get("/rflow/ready/"))[0] == 200 for w in (first, second)])
