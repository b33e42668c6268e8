"""Durable workflow state: once per key, and no lost list elements under races."""

from __future__ import annotations

import asyncio

import pytest

from rflow import storage
from rflow.storage import workflow_state

pytestmark = pytest.mark.usefixtures("schema")


async def apply(settings, op_key: str, kind: str, action: dict):
    conn = await storage.connect(settings)
    async with conn:
        return await workflow_state.apply(
            conn, workflow="w", op_key=op_key, kind=kind, action=action
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
