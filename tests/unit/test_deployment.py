"""Deployments as values: what one changes, loading one, reading the current project."""

from __future__ import annotations

import pytest

from rflow.deployment import Changes, Deployment, Derived, load, project_reader
from rflow.engine.keys import workflow_version
from rflow.lang import ConfigError, ProjectSource, validate_text

TEXT = """\
workflows:
  a:
    description: "${GREETING}"
    trigger: { manual: {} }
    steps:
      - id: note
        command: { name: log, args: { message: "${NOTE}" } }
"""


def test_changes_between_two_sets_of_versions():
    changes = Changes.between({"a": "v1", "b": "v2", "c": "v3"}, {"a": "v1", "b": "v9", "d": "v4"})
    assert changes == Changes(added=("d",), changed=("b",), removed=("c",), unchanged=("a",))
    assert changes.any
    assert changes.summary() == "added d; changed b; removed c; 1 unchanged"
    same = Changes.between({"a": "v1"}, {"a": "v1"})
    assert not same.any and same.summary() == "1 unchanged"
    assert Changes.between({}, {}).summary() == "no workflows"


def test_a_deployment_loads_with_the_environment_it_is_given():
    source = ProjectSource((("p.yaml", TEXT),))
    here = load(source, {"GREETING": "hello", "NOTE": "n"}, 7)
    assert (here.id, here.digest, here.label) == (7, source.digest, "deployment 7")
    workflow = here.project.workflows["a"]
    assert here.versions == {"a": workflow_version(workflow)}
    # Outside the steps a variable is filled in when the source loads; a step keeps it
    # as written, for its effect to fill in (and it makes no version of its own).
    assert workflow.description == "hello"
    assert workflow.steps[0].command.args.message == "${NOTE}"
    elsewhere = load(source, {"GREETING": "bonjour", "NOTE": "other"}, 7)
    assert elsewhere.versions != here.versions
    assert load(source, {"GREETING": "hello", "NOTE": "other"}, 7).versions == here.versions
    with pytest.raises(ConfigError) as refused:
        load(source, {"NOTE": "n"}, 8)
    assert "environment variable GREETING is not set" in str(refused.value)


def test_a_deployment_not_stored_yet():
    project = validate_text(TEXT, {"GREETING": "hi", "NOTE": "n"}).project
    unstored = Deployment.of(project)
    assert unstored.id is None and unstored.label == "an unstored project"
    stored = unstored.stored_as(3)
    assert (stored.id, stored.project, stored.versions) == (3, project, unstored.versions)
    assert Deployment.of(None).versions == {}


def test_derived_values_follow_the_current_project():
    first = validate_text(TEXT, {"GREETING": "hi", "NOTE": "n"}).project
    second = validate_text(TEXT, {"GREETING": "ho", "NOTE": "n"}).project
    current = {"project": first}
    built = []

    def names(project):
        built.append(project)
        return sorted(project.workflows)

    derived = Derived(lambda: current["project"], names)
    assert derived() == ["a"] and derived() == ["a"]
    assert built == [first]  # built once per project
    current["project"] = second
    assert derived() == ["a"] and built == [first, second]
    assert project_reader(first)() is first
    assert project_reader(lambda: second)() is second
