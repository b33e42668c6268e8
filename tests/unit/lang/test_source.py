"""A project's source as text: read once, validated again anywhere, secrets unresolved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rflow.lang import ProjectSource, load_project, read_source

EMITTER = [{"type": "event", "name": "Swap", "inputs": [{"name": "amount", "type": "uint256"}]}]
PROJECT = """\
networks:
  local: { chain_id: 31337 }
contracts:
  Emitter: { abi: abi/emitter.json }
channels:
  hook: { type: webhook, url: "${HOOK_URL}" }
workflows:
  on-swap:
    trigger:
      event: { contract: Emitter, name: Swap, network: local }
    steps:
      - id: tell
        notify: { channel: hook, message: "swap of ${{ trigger.args.amount }}" }
"""


def write(root: Path) -> Path:
    (root / "decl" / "abi").mkdir(parents=True)
    (root / "decl" / "project.yaml").write_text(PROJECT)
    (root / "decl" / "abi" / "emitter.json").write_text(json.dumps({"abi": EMITTER}))
    (root / "other.yaml").write_text("config: { max_concurrent_runs: 7 }\n")
    return root


def test_the_source_holds_the_yaml_and_abi_files_as_text_with_variables_unresolved(tmp_path):
    root = write(tmp_path / "project")
    source, report = read_source(root, {"HOOK_URL": "https://secret.example/token-123"})
    assert report.ok, report.diagnostics
    assert [name for name, _ in source.files] == [f"{root}/decl/project.yaml", f"{root}/other.yaml"]
    assert source.abis == ((f"{root}/decl/abi/emitter.json", json.dumps({"abi": EMITTER})),)
    document = json.dumps(source.document())
    assert "${HOOK_URL}" in document and "token-123" not in document
    # The loaded project carries the ABI of the file inline: nothing needs the file again.
    assert report.project.contracts["Emitter"].abi == EMITTER
    assert report.project.channels["hook"].url == "https://secret.example/token-123"


def test_a_source_validates_again_without_its_files_and_with_another_environment(tmp_path):
    root = write(tmp_path / "project")
    source, _ = read_source(root, {"HOOK_URL": "https://one.example/"})
    shutil.rmtree(root)  # another machine: none of the files is there
    again = ProjectSource.from_document(json.loads(json.dumps(source.document())))
    assert again == source and again.digest == source.digest
    report = again.validate({"HOOK_URL": "https://two.example/"})
    assert report.ok, report.diagnostics
    assert report.project.contracts["Emitter"].abi == EMITTER
    assert report.project.channels["hook"].url == "https://two.example/"
    assert report.project.config.max_concurrent_runs == 7
    missing = again.validate({})
    assert [d.message for d in missing.errors] == [
        "environment variable HOOK_URL is not set (write ${HOOK_URL:-default} to give a default)"
    ]


def test_an_abi_file_the_source_lacks_is_an_error_where_it_is_named(tmp_path):
    root = write(tmp_path / "project")
    source, _ = read_source(root, {"HOOK_URL": "x"})
    bare = ProjectSource(source.files)
    (error,) = bare.validate({"HOOK_URL": "x"}).errors
    assert error.file == f"{root}/decl/project.yaml"
    assert error.message == f"ABI file not found: '{root}/decl/abi/emitter.json'"


def test_the_digest_follows_the_text(tmp_path):
    root = write(tmp_path / "project")
    first, _ = read_source(root, {"HOOK_URL": "x"})
    assert read_source(root, {"HOOK_URL": "another value"})[0].digest == first.digest
    (root / "other.yaml").write_text("config: { max_concurrent_runs: 8 }\n")
    changed, _ = read_source(root, {"HOOK_URL": "x"})
    assert changed.digest != first.digest and changed.digest.startswith("sha256:")


def test_a_project_with_errors_has_a_source_and_a_report_that_says_so(tmp_path):
    (tmp_path / "broken.yaml").write_text("workflows:\n  w:\n    steps: []\n")
    source, report = read_source(tmp_path, {})
    assert not report.ok and report.project is None
    assert source.files == ((f"{tmp_path}/broken.yaml", "workflows:\n  w:\n    steps: []\n"),)


def test_load_project_inlines_abi_files_too(tmp_path):
    root = write(tmp_path / "project")
    assert load_project(root, {"HOOK_URL": "x"}).contracts["Emitter"].abi == EMITTER
