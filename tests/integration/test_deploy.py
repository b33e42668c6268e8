"""Versions: `rflow deploy` publishes a new version; a run in flight keeps its own."""

from __future__ import annotations

import json

import pytest

from rflow.engine.keys import workflow_version
from rflow.lang import load_project
from tests.integration.harness import wait_until
from tests.integration.test_api import call
from tests.integration.test_operations import parked, rflow
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

PROJECT = """
workflows:
  evolving:
    trigger: {{ manual: {{}} }}
    steps:
      - id: ok
        wait_for:
          approval: {{ prompt: "go?" }}
          timeout: 1h
      - id: call
        http_call: {{ url: "{url}/{tag}", method: POST, body: {{ n: 1 }} }}
"""


def version_of(path) -> str:
    return workflow_version(load_project(path, {}).workflows["evolving"])


async def test_a_deploy_during_a_run_leaves_that_run_on_its_version(
    settings, worker_factory, tmp_path, sink
):
    first, second = tmp_path / "v1", tmp_path / "v2"
    for folder, tag in ((first, "one"), (second, "two")):
        folder.mkdir()
        (folder / "project.yaml").write_text(PROJECT.format(url=sink.url, tag=tag))
    v1, v2 = version_of(first), version_of(second)
    assert v1 != v2
    worker = worker_factory(project_path=first)
    await worker.wait_ready()
    old = await fire(settings, first, "evolving", "manual:evolving:old", {})
    await parked(settings, old)

    deployed = rflow(settings, "deploy", str(second), "--json")
    assert deployed.returncode == 0, deployed.stderr
    assert json.loads(deployed.stdout) == [
        {"workflow": "evolving", "version": v2, "previous": v1, "changed": True}
    ]

    async def taken_up():
        _, listed = await call(worker, "GET", "/api/workflows")
        return listed["workflows"][0]["version"] == v2

    await wait_until(taken_up, what="the worker to take up the new version")
    new = await fire(settings, first, "evolving", "manual:evolving:new", {})
    await parked(settings, new)
    for rid in (old, new):
        assert (await call(worker, "POST", f"/api/runs/{rid}/approve", {}))[0] == 200
    old_run, new_run = await settled_run(settings, old), await settled_run(settings, new)
    assert (old_run["status"], old_run["version"]) == ("succeeded", v1)
    assert (new_run["status"], new_run["version"]) == ("succeeded", v2)
    assert [r.path for r in sink.requests] in (["/one", "/two"], ["/two", "/one"])

    again = rflow(settings, "deploy", str(second))
    assert again.returncode == 0 and "unchanged" in again.stdout

    broken = tmp_path / "broken.yaml"
    broken.write_text("workflows:\n  evolving:\n    steps: []\n")
    refused = rflow(settings, "deploy", str(broken))
    assert refused.returncode == 1
    assert "broken.yaml" in refused.stderr
    _, listed = await call(worker, "GET", "/api/workflows")
    assert listed["workflows"][0]["version"] == v2
