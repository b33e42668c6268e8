"""The ``rflow`` group knows its commands without importing them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

HEAVY = ("faust", "aiokafka", "web3", "rflow.engine", "rflow.streams")


def imported_after(code: str, prefixes: tuple[str, ...]) -> str:
    """The modules named by ``prefixes`` that a fresh interpreter has loaded after running
    ``code``, as the sorted list it prints."""
    probe = (
        f"import sys\n{code}print(sorted(m for m in sys.modules if m.startswith({prefixes!r})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return out.strip().splitlines()[-1]


def test_every_command_is_in_the_table_under_its_module() -> None:
    from rflow.cli import COMMANDS, commands, main  # noqa: F401  (commands attaches all)

    assert set(main.commands) == set(COMMANDS)
    for name, command in main.commands.items():
        module = COMMANDS[name][0]
        assert command.callback.__module__ == f"rflow.cli.{module}", name


def test_version_and_help_import_none_of_the_heavy_modules() -> None:
    run = (
        "from rflow.cli import main\n"
        "for args in (['--version'], ['--help']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, exc.code\n"
    )
    assert imported_after(run, HEAVY) == "[]"


def test_help_lists_every_command() -> None:
    from rflow.cli import COMMANDS, main

    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in result.output


def test_an_unknown_command_suggests_the_nearest() -> None:
    from rflow.cli import main

    result = CliRunner().invoke(main, ["runz"])
    assert result.exit_code == 2
    assert "no such command 'runz'; did you mean 'run'?" in result.output


def test_the_read_commands_modules_import_neither_engine_nor_kafka_nor_web3() -> None:
    heavy = (*HEAVY[:3], "rflow.engine.advance", "rflow.lang", "rflow.streams")
    run = "import rflow.cli.runs, rflow.cli.budgets, rflow.cli.approvals\n"
    assert imported_after(run, heavy) == "[]"


def test_loading_the_language_builds_no_validator_and_reads_no_source() -> None:
    """The models build their validators on first use, once for a whole project, and
    read no class source as they are created (the docstrings are read for the schema)."""
    run = (
        "import ast\n"
        "read, parse = [], ast.parse\n"
        "ast.parse = lambda source, *a, **k: read.append(source[:40]) or parse(source, *a, **k)\n"
        "from rflow.cli import validate\n"
        "from rflow.lang.model import Project\n"
        "assert not Project.__pydantic_complete__, 'Project was built on import'\n"
        "assert read == [], read\n"
    )
    assert imported_after(run, ("croniter",)) == "[]"


def test_validating_a_project_without_schedules_does_not_import_croniter(tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_text(
        "workflows:\n  w:\n    trigger: { manual: {} }\n"
        "    steps: [{ id: a, command: { name: log, args: { message: hi } } }]\n"
    )
    run = (
        "from rflow.lang import validate_path\n"
        f"report = validate_path({str(tmp_path)!r}, {{}})\n"
        "assert report.ok, report\n"
    )
    assert imported_after(run, ("croniter",)) == "[]"


def test_reading_runs_and_their_charges_loads_neither_the_models_nor_run_state() -> None:
    run = "import rflow.cli.runs, rflow.storage.runs, rflow.storage.budgets\n"
    heavy = ("rflow.lang.model", "rflow.lang.loader", "rflow.engine.state", "rflow.engine.effects")
    assert imported_after(run, heavy) == "[]"
