"""scripts/stack's cluster of three, as far as it can be checked without starting one:
what it refuses, and what `env` and the brokers' configuration say. (The cluster itself
runs in tests/integration/test_cluster.py and the soak, on `scripts/stack up --brokers 3`.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO


def stack(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RFLOW_STACK_DIR": str(tmp_path / "stack"),
        "RFLOW_STACK_KAFKA_LIBS": str(tmp_path / "unused-libs"),
        "RFLOW_STACK_KAFKA_PORT": "19400",
        "RFLOW_STACK_KAFKA_CONTROLLER_PORT": "19401",
    }
    return subprocess.run(
        [str(REPO / "scripts" / "stack"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("up", "--secure", "--brokers", "3"),
            "[stack] error: the secured Kafka runs one broker: `scripts/stack up --secure "
            "--brokers 1`, or a plain cluster with `--plain --brokers 3` (docs/cluster.md)\n",
        ),
        (("up", "--brokers", "2"), "[stack] error: up: --brokers takes 1 or 3 (got 2)\n"),
        (("up", "--brokers"), "[stack] error: up: --brokers takes 1 or 3 (got nothing)\n"),
        (("kill", "kafka"), "usage: scripts/stack kill kafka-N\n"),
    ],
)
def test_what_the_stack_refuses_before_it_starts_anything(tmp_path, args, message):
    refused = stack(tmp_path, *args)
    assert refused.returncode != 0
    assert refused.stderr == message
    assert not (tmp_path / "stack" / "run").exists()  # nothing was started


def test_env_points_at_every_node_and_asks_for_three_copies(tmp_path):
    (tmp_path / "stack").mkdir()
    (tmp_path / "stack" / "kafka.brokers").write_text("3\n")
    lines = stack(tmp_path, "env").stdout.splitlines()
    assert "export RFLOW_KAFKA_BROKERS=127.0.0.1:19400,127.0.0.1:19406,127.0.0.1:19407" in lines
    assert "export RFLOW_TOPIC_REPLICATION_FACTOR=3" in lines
    # Back on one broker, the variable is unset again (an `eval` in the same shell).
    (tmp_path / "stack" / "kafka.brokers").write_text("1\n")
    lines = stack(tmp_path, "env").stdout.splitlines()
    assert "export RFLOW_KAFKA_BROKERS=127.0.0.1:19400" in lines
    assert "unset RFLOW_TOPIC_REPLICATION_FACTOR" in lines


def test_a_node_that_does_not_exist_is_named(tmp_path):
    (tmp_path / "stack").mkdir()
    (tmp_path / "stack" / "kafka.brokers").write_text("3\n")
    refused = stack(tmp_path, "kill", "kafka-4")
    assert refused.returncode != 0
    assert refused.stderr == "[stack] error: kill: the cluster has no node 4\n"
    refused = stack(tmp_path, "kill", "kafka-2")
    assert refused.stderr == "[stack] error: kill: kafka-2 is not running\n"
