"""The package layout the design fixes."""

from __future__ import annotations

import codecs
import importlib
import tomllib

from tests.conftest import REPO


def test_pipeline_packages_import_only_under_rflow():
    assert codecs.__file__.endswith("codecs.py"), (
        "the standard library's codecs must not be shadowed"
    )
    for name in ("streams", "agents", "codecs", "storage"):
        module = importlib.import_module(f"rflow.{name}")
        assert module.__file__ == str(REPO / name / "__init__.py")


def test_every_package_directory_is_packaged():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(config["packages"])
    mapping = config["package-dir"]
    found = set()
    for package, directory in mapping.items():
        root = REPO / directory
        for init in root.rglob("__init__.py"):
            relative = init.parent.relative_to(root).parts
            found.add(".".join((package, *relative)))
    found |= set(config["package-data"])  # data-only folders, such as the migrations
    assert found == declared
