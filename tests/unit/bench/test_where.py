"""The peers benchmark's account of where the rflow worker's time goes (bench/peers/where.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
WHERE = BENCH / "peers" / "where.py"


@pytest.fixture(scope="module")
def where():
    if str(BENCH) not in sys.path:  # where.py imports bench/_profile.py, as the driver has it
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_where", WHERE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


MAIN = "<module> (rflow:8);worker (rflow/cli/ops.py:40);Worker.execute_from_commandline (mode/worker.py:10);BaseEventLoop._run_once (asyncio/base_events.py:1)"
AGENT = (
    MAIN
    + ";Handle._run (asyncio/events.py:80);Agent._execute_actor (faust/agents/agent.py:1);run_events (agents/runner.py:700)"
)


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        # An advance that admission started is the engine's time.
        (
            AGENT
            + ";Runner.admit (agents/runner.py:1);Runner.start_run (agents/runner.py:2);advance (rflow/engine/advance.py:3)",
            "engine: advance",
        ),
        (AGENT + ";Runner.admit (agents/runner.py:1);gate_of (agents/runner.py:9)", "admission:"),
        # A table read while admitting is admission's; writing the changes is the checkpoint's.
        (
            AGENT + ";Runner.admit (agents/runner.py:1);Staged.get (streams/tables.py:60)",
            "admission:",
        ),
        (
            MAIN
            + ";Handle._run (asyncio/events.py:80);Staged.flush.<locals>.write (streams/tables.py:99)",
            "checkpoint:",
        ),
        # The effect runner is not the runner: its producing is the Kafka client's.
        (
            AGENT
            + ";EffectRunner.carry_out (agents/effects.py:1);Sender._sender_routine (aiokafka/producer/sender.py:1)",
            "Kafka client:",
        ),
        # A state_set counts with the psycopg calls it makes.
        (
            MAIN
            + ";Handle._run (asyncio/events.py:80);Executors.state (agents/executors.py:5);AsyncCursor.execute (psycopg/cursor_async.py:1)",
            "state_set:",
        ),
        (
            "Thread._bootstrap (threading.py:1);WorkerThread.run (mode/threads.py:2);Fetcher._proc_fetch_request (aiokafka/consumer/fetcher.py:3)",
            "Kafka consumer:",
        ),
        # The consumer runs on the worker's loop: its fetches are the consumer's.
        (
            MAIN
            + ";Handle._run (asyncio/events.py:80);Fetcher._proc_fetch_request (aiokafka/consumer/fetcher.py:3)",
            "Kafka consumer:",
        ),
        # Else the deepest frame of a known package in the callback the loop ran.
        (
            AGENT
            + ";decide (agents/runner.py:1);decode (codecs/envelope.py:2);loads (codecs/json.py:3)",
            "Faust streams and codecs:",
        ),
        (
            MAIN
            + ";Handle._run (asyncio/events.py:80);Sender._sender_routine (aiokafka/producer/sender.py:1)",
            "Kafka client:",
        ),
        # The worker and the loop around a callback are not what it did.
        (MAIN + ";EpollSelector.select (selectors.py:1)", "event loop and the rest"),
    ],
)
def test_a_sample_goes_to_what_the_worker_was_doing(where, stack, expected):
    assert where.category(stack).startswith(expected)


def test_shares_are_of_all_samples_in_the_order_of_the_categories(where):
    raw = "\n".join(
        [
            AGENT + ";advance (rflow/engine/advance.py:3) 30",
            MAIN + ";EpollSelector.select (selectors.py:1) 10",
            AGENT + ";Runner.admit (agents/runner.py:1) 60",
            "a line py-spy did not write",
        ]
    )
    found = where.breakdown(raw)
    assert found.samples == 100
    assert [(label.split(":")[0], share) for label, share in found.shares] == [
        ("engine", 0.3),
        ("admission", 0.6),
        ("event loop and the rest", 0.1),
    ]
