"""Loading a file or a folder: merging, duplicates across files, limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from rflow.lang import ConfigError, load_project, project_files, validate_path
from tests.unit.lang.conftest import BASE, ENV

WORKFLOW = """\
workflows:
  {name}:
    trigger: {{ manual: {{}} }}
    steps: [{{ id: a, notify: {{ channel: ops, message: hi }} }}]
"""


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def test_a_folder_is_one_project(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "project.yaml": BASE,
            "a.yaml": WORKFLOW.format(name="a"),
            "b.yml": WORKFLOW.format(name="b"),
        },
    )
    project = load_project(tmp_path, ENV)
    assert sorted(project.workflows) == ["a", "b"]
    assert "ethereum" in project.networks


def test_files_are_found_recursively_skipping_hidden_ones(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "b.yaml": "",
            "a/z.yml": "",
            "a/.hidden.yaml": "",
            ".git/x.yaml": "",
            "notes.txt": "",
            "abis/erc20.json": "[]",
        },
    )
    assert [p.relative_to(tmp_path).as_posix() for p in project_files(tmp_path)] == [
        "a/z.yml",
        "b.yaml",
    ]


def test_a_name_defined_in_two_files_names_both_places(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "project.yaml": BASE,
            "one.yaml": WORKFLOW.format(name="sweep"),
            "two.yaml": "# the same name again\n" + WORKFLOW.format(name="sweep"),
            "three.yaml": "networks:\n  base: { chain_id: 8453 }\nconfig:\n  max_concurrent_runs: 5\n",
            "four.yaml": "config:\n  max_concurrent_runs: 6\n",
        },
    )
    report = validate_path(tmp_path, ENV)
    # Files merge in sorted order (four, one, project, three, two): the later one is "here".
    assert [str(d) for d in report.errors] == [
        f"{tmp_path}/three.yaml:2:3: error: networks.base: network 'base' is defined twice: "
        f"here and at {tmp_path}/project.yaml:3:3",
        f"{tmp_path}/three.yaml:4:3: error: config.max_concurrent_runs: config setting "
        f"'max_concurrent_runs' is defined twice: here and at {tmp_path}/four.yaml:2:3",
        f"{tmp_path}/two.yaml:3:3: error: workflows.sweep: workflow 'sweep' is defined twice: "
        f"here and at {tmp_path}/one.yaml:2:3",
    ]


def test_problems_in_every_file_are_reported(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "a.yaml": "workflows: [not, a, mapping]\n",
            "b.yaml": "- a list at the top\n",
            "c.yaml": "workflows:\n  x: [\n",
        },
    )
    (tmp_path / "d.yaml").write_bytes(b"name: caf\xe9\n")
    report = validate_path(tmp_path, {})
    assert [str(d) for d in report.errors] == [
        f"{tmp_path}/a.yaml:1:12: error: workflows: expected a mapping, got a list",
        f"{tmp_path}/b.yaml:1:1: error: the top level of a workflow file must be a mapping of "
        "sections: networks, contracts, relayers, channels, commands, budgets, principals, config, "
        "workflows",
        f"{tmp_path}/c.yaml:3:1: error: YAML syntax error: did not find expected node content "
        "(while parsing a flow node)",
        f"{tmp_path}/d.yaml:1:1: error: the file is not UTF-8 text (byte 9)",
    ]
    assert report.project is None


def test_oversized_files_are_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:
        handle.truncate(4 * 1024 * 1024 + 1)
    report = validate_path(big, {})
    assert [str(d) for d in report.errors] == [f"{big}:1:1: error: the file is larger than 4 MiB"]


def test_missing_path_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        validate_path(tmp_path / "nope", {})
    report = validate_path(tmp_path, {})
    assert [d.message for d in report.errors] == [f"no .yaml or .yml files in {tmp_path}"]


def test_load_project_raises_with_every_error(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "p.yaml": BASE,
            "w.yaml": WORKFLOW.format(name="w").replace("ops", "opz") + "    on_failure: explode\n",
        },
    )
    with pytest.raises(ConfigError) as caught:
        load_project(tmp_path, ENV)
    assert [d.message for d in caught.value.diagnostics] == [
        "unknown channel 'opz' — did you mean 'ops'?",
        "expected 'dead_letter', 'drop' or 'halt', got 'explode'",
    ]
    assert str(caught.value).startswith("2 errors in the workflow project:\n")


def test_abi_files_are_read_relative_to_the_declaring_file(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "decl/contracts.yaml": "contracts:\n  T: { abi: abi/t.json }\n  U: { abi: abi/missing.json }\n  V: { abi: abi/bad.json }\n",
            "decl/abi/t.json": '[{"type": "event", "name": "Ping", "inputs": []}]',
            "decl/abi/bad.json": "{not json",
        },
    )
    report = validate_path(tmp_path, {})
    assert [str(d) for d in report.errors] == [
        f"{tmp_path}/decl/contracts.yaml:3:13: error: contracts.U.abi: ABI file not found: "
        f"'{tmp_path}/decl/abi/missing.json'",
        f"{tmp_path}/decl/contracts.yaml:4:13: error: contracts.V.abi: ABI file "
        f"'{tmp_path}/decl/abi/bad.json' is not a JSON ABI: Expecting property name enclosed in "
        "double quotes: line 1 column 2 (char 1)",
    ]
