"""The expression package stays pure: no I/O, clock, randomness, services or eval."""

from __future__ import annotations

import ast
from pathlib import Path

import rflow.expr

PACKAGE = Path(rflow.expr.__file__).parent
BANNED_MODULES = {"faust", "psycopg", "web3", "time", "random", "uuid", "os", "datetime"}
BANNED_CALLS = {"eval", "exec", "compile", "__import__", "getattr", "setattr", "open"}


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text())) for path in sorted(PACKAGE.glob("*.py"))]


def test_no_banned_imports() -> None:
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in BANNED_MODULES, f"{path.name} imports {name}"


def test_no_dynamic_evaluation() -> None:
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in BANNED_CALLS, f"{path.name} calls {node.func.id}"
            if isinstance(node, ast.Attribute):
                assert node.attr != "literal_eval", path.name
