"""The files in examples/: each validates with the shared declarations and round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rflow.lang import Project, validate_path, validate_sources

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SCHEMA_LINE = "# yaml-language-server: $schema=../schemas/rflow.schema.json"
WORKFLOW_FILES = sorted(p.name for p in EXAMPLES.glob("*.yaml") if p.name != "project.yaml")
CALLS = {"invoice-run.yaml": ["settle-invoice.yaml"]}
"""Examples whose workflow calls another's (call_workflow): validated with it."""


def test_the_examples_folder_is_a_valid_project() -> None:
    report = validate_path(EXAMPLES, {})
    assert report.errors == ()
    # Without the environment only the secrets are missing.
    assert {d.message.split(" is not set")[0] for d in report.warnings} == {
        "environment variable RELAYER_PAYOUT_KEY",
        "environment variable RELAYER_TREASURY_KEY",
        "environment variable RELAYER_DEV_KEY",
        "environment variable SLACK_OPS_WEBHOOK_URL",
        "environment variable PAGERDUTY_ROUTING_KEY",
        "environment variable WITHDRAWALS_WEBHOOK_SECRET",
        "environment variable TREASURY_OPS_TOKEN",
        "environment variable TREASURY_LEAD_TOKEN",
        "environment variable PROMETHEUS_SCRAPE_TOKEN",
    }
    assert report.project is not None
    assert len(report.project.workflows) == len(WORKFLOW_FILES) == 16


@pytest.mark.parametrize("name", WORKFLOW_FILES)
def test_each_example_validates_with_the_shared_declarations(name: str) -> None:
    names = ("project.yaml", name, *CALLS.get(name, ()))
    sources = [(str(EXAMPLES / n), (EXAMPLES / n).read_text()) for n in names]
    report = validate_sources(sources, {})
    assert report.errors == ()
    assert report.project is not None
    assert len(report.project.workflows) == 1 + len(CALLS.get(name, ()))


@pytest.mark.parametrize("mode", ["python", "json"])
def test_examples_round_trip(mode: str) -> None:
    project = validate_path(EXAMPLES, {}).project
    assert project is not None
    dumped = project.model_dump(mode=mode)
    assert Project.model_validate(dumped) == project
    if mode == "json":
        assert Project.model_validate(json.loads(json.dumps(dumped))) == project


@pytest.mark.parametrize("name", ["project.yaml", *WORKFLOW_FILES])
def test_examples_point_editors_at_the_schema(name: str) -> None:
    assert (EXAMPLES / name).read_text().splitlines()[0] == SCHEMA_LINE


@pytest.mark.parametrize("name", ["project.yaml", *WORKFLOW_FILES])
def test_examples_satisfy_the_json_schema(name: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((REPO / "schemas" / "rflow.schema.json").read_text())
    data = yaml.safe_load((EXAMPLES / name).read_text())
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(data)]
    assert errors == []
