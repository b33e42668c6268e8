"""Durable workflow state: once per key, and no lost list elements under races."""

from __future__ import annotations

import asyncio

import pytest

from rflow import storage
from rflow.storage import workflow_state

pytestmark = pytest.mark.usefixtures("schema")


async def apply(settings, op_key: str, kind: str, action: dict, workflow: str = "w"):
    conn = await storage.connect(settings)
    async with conn:
        return await workflow_state.apply(
            conn, workflow=workflow, op_key=op_key, kind=kind, action=action
        )


async def test_each_operation_applies_once_per_key(settings):
    assert await apply(settings, "k1", "state_set", {"a": 1, "b": [1, 2]}) == {
        "state": {"a": 1, "b": [1, 2]}
    }
    assert await apply(settings, "k1", "state_set", {"a": 99}) == {"state": {"a": 1, "b": [1, 2]}}
    conn = await storage.connect(settings)
    async with conn:
        assert await workflow_state.load(conn, "w") == {"a": 1, "b": [1, 2]}  # not re-applied
    assert await apply(settings, "k2", "list_add", {"list": "b", "value": 3}) == {
        "state": {"b": [1, 2, 3]}
    }
    assert await apply(settings, "k2", "list_add", {"list": "b", "value": 3}) == {
        "state": {"b": [1, 2, 3]}
    }
    assert await apply(settings, "k3", "list_remove", {"list": "b", "value": 1}) == {
        "state": {"b": [2, 3]}
    }
    assert await apply(settings, "k4", "list_add", {"list": "a", "value": "x"}) == {
        "state": {"a": ["x"]}
    }
    conn = await storage.connect(settings)
    async with conn:
        assert await workflow_state.load(conn, "w") == {"a": ["x"], "b": [2, 3]}


async def test_racing_list_additions_lose_nothing(settings):
    await asyncio.gather(
        *(apply(settings, f"add{i}", "list_add", {"list": "seen", "value": i}) for i in range(40))
    )
    conn = await storage.connect(settings)
    async with conn:
        state = await workflow_state.load(conn, "w")
    assert sorted(state["seen"]) == list(range(40))


COUNTER = """
workflows:
  counter:
    trigger: { manual: {} }
    steps:
      - id: check
        command:
          name: assert
          args: { that: "${{ state['count'] == 41 }}", message: "the run did not see the state" }
      - id: bump
        state_set: { count: "${{ state['count'] + 1 }}" }
"""


@pytest.mark.usefixtures("applied_topics")
async def test_a_run_reading_state_by_index_sees_the_state(settings, worker_factory, tmp_path):
    from tests.integration.test_runs import fire, settled_run

    assert await apply(settings, "seed", "state_set", {"count": 41}, workflow="counter")
    path = tmp_path / "project.yaml"
    path.write_text(COUNTER)
    worker = worker_factory(project_path=path)
    await worker.wait_ready()
    rid = await fire(settings, path, "counter", "manual:counter:1", {})
    run = await settled_run(settings, rid)
    assert run["status"] == "succeeded", (run, worker.tail())
    steps = {s["path"]: s for s in run["steps"]}
    assert steps["bump"]["output"] == {"state": {"count": 42}}
