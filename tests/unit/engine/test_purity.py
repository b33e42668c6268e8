"""The engine is pure: no faust, psycopg, web3, clock, randomness or uuid."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import REPO

ENGINE = [*sorted((REPO / "rflow" / "engine").glob("*.py")), REPO / "rflow" / "failures.py"]
BANNED_MODULES = {
    "faust",
    "mode",
    "psycopg",
    "psycopg_pool",
    "web3",
    "eth_account",
    "aiokafka",
    "time",
    "random",
    "uuid",
    "secrets",
    "os",
    "socket",
    "asyncio",
}
BANNED_CALLS = {"now", "utcnow", "today", "time", "monotonic"}


def test_engine_modules_import_nothing_impure():
    for path in ENGINE:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in BANNED_MODULES, f"{path.name} imports {name}"


def test_engine_modules_never_read_a_clock():
    for path in ENGINE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                assert node.func.attr not in BANNED_CALLS, (
                    f"{path.name}:{node.lineno} calls .{node.func.attr}()"
                )


def test_importing_the_engine_loads_no_io_library():
    code = (
        "import sys, rflow.engine, rflow.triggering\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'faust','mode','psycopg','web3','aiokafka','eth_account'})\n"
        "print(','.join(bad))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert result.stdout.strip() == ""
