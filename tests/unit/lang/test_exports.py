"""The packages that export their names lazily (the language's, the codecs): the tables
stay whole and true."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import rflow.codecs
import rflow.lang
import rflow.lang.model

REPO = Path(__file__).resolve().parents[3]
PACKAGES = (rflow.lang, rflow.lang.model, rflow.codecs)


def _type_checking_names(package) -> set[str]:
    """The names the package imports for type checkers (``if TYPE_CHECKING:``)."""
    tree = ast.parse(Path(package.__file__).read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    )
    return {
        alias.name
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_exported_name_has_a_home_and_is_found_there(package) -> None:
    homes = package._HOMES
    assert sorted(package.__all__) == sorted(homes)
    assert _type_checking_names(package) == set(homes)
    for name, home in homes.items():
        module = importlib.import_module(f"{package.__name__}.{home}")
        assert getattr(package, name) is getattr(module, name), name


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_an_unknown_name_is_an_attribute_error(package) -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Nowhere'"):
        package.Nowhere  # noqa: B018


def test_every_name_the_code_imports_from_the_packages_is_exported() -> None:
    tables = {package.__name__: package._HOMES for package in PACKAGES}
    folders = {package.__name__: Path(package.__file__).parent for package in PACKAGES}
    missing = []
    for folder in ("rflow", "agents", "streams", "storage", "codecs", "bench", "tests"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom) or node.module not in tables:
                    continue
                for alias in node.names:
                    home = folders[node.module]
                    submodule = (home / alias.name).exists() or (home / f"{alias.name}.py").exists()
                    if alias.name not in tables[node.module] and not submodule:
                        missing.append(f"{path.relative_to(REPO)}: {node.module}.{alias.name}")
    assert missing == []
