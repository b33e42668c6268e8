"""The worker's HTTP API and webhook endpoint fuzzed from the committed OpenAPI document.

Schemathesis generates requests for every operation (valid ones from the schemas, and
ones that break them), with and without the token. Every answer must be one the document
describes, JSON where it says JSON, never a server error; and the worker must still be
running a workflow at the end.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import checks

from tests.integration.test_api import PROJECT
from tests.integration.test_runs import fire, settled_run

pytestmark = pytest.mark.usefixtures("applied_topics", "schema")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = 25


def fuzz(base_url: str, auth: dict[str, str]) -> dict[str, int]:
    """Run every operation's examples; the count of requests made, by operation."""
    schema = schemathesis.openapi.from_path(ROOT / "schemas" / "openapi.json")
    made: dict[str, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path == "/metrics":
            continue  # Prometheus text, checked by the metrics test
        label = f"{operation.method.upper()} {operation.path}"
        made[label] = fuzz_one(operation, base_url, auth)
    return made


def fuzz_one(operation, base_url: str, auth: dict[str, str]) -> int:
    made = 0

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(), token=st.booleans())
    def check(case, token: bool) -> None:
        nonlocal made
        headers = dict(auth) if token else {}
        response = case.call(base_url=base_url, headers=headers, timeout=30)
        made += 1
        where = f"{case.method} {case.formatted_path}"
        assert response.status_code < 500, (where, response.text)
        if not token and case.operation.path.startswith("/api/"):
            assert response.status_code == 401, (where, response.status_code)
        # Not "schema-valid data is accepted": the document does not spell out every rule
        # (a NUL in a string, for one, is refused with a 400 that says so).
        case.validate_response(
            response, headers=headers, excluded_checks=[checks.positive_data_acceptance]
        )

    check()
    return made


async def test_every_operation_answers_fuzzed_requests_as_documented(
    settings, worker_factory, tmp_path
):
    project = tmp_path / "project.yaml"
    project.write_text(PROJECT)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()
    made = await asyncio.to_thread(fuzz, worker.url, worker.auth)
    assert sum(made.values()) >= 100, made
    sends = {
        "GET /api/sends",
        "POST /api/sends/{send_id}/speedup",
        "POST /api/sends/{send_id}/cancel",
    }
    assert all(made.get(operation) for operation in sends), made
    assert worker.proc.poll() is None, worker.tail()
    rid = await fire(settings, project, "picky", "manual:picky:after-fuzz", {})
    assert (await settled_run(settings, rid))["status"] == "failed"


async def test_what_the_fuzzer_found_stays_fixed(settings, worker_factory, tmp_path):
    """A NUL in a request was answered 503 (the database "unavailable"), and a path the
    router cannot match was answered in plain text."""
    project = tmp_path / "project.yaml"
    project.write_text(PROJECT)
    worker = worker_factory(project_path=project)
    await worker.wait_ready()

    def call(method: str, path: str, body: bytes | None = None) -> tuple[int, str, dict]:
        request = urllib.request.Request(
            worker.url + path,
            data=body,
            method=method,
            headers={**worker.auth, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                return resp.status, resp.headers.get_content_type(), json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get_content_type(), json.loads(exc.read())

    status, kind, reply = await asyncio.to_thread(call, "GET", "/api/runs?workflow=a%00b")
    assert (status, kind) == (400, "application/json"), reply
    assert "NUL" in reply["error"]
    body = json.dumps({"step": "a\u0000b", "text": "me"}).encode()
    status, _, reply = await asyncio.to_thread(call, "POST", "/api/runs/nope/approve", body)
    assert status in (400, 404), reply
    for path in ("/hooks/a%0Ab", "/api/runs/a%0Ab/cancel/more", "/no/such/route"):
        status, kind, reply = await asyncio.to_thread(call, "POST", path, b"{}")
        assert (status, kind) == (404, "application/json"), (path, reply)
        assert reply["error"]
