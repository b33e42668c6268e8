"""One section read without the rest: the budgets `rflow budgets ls` lists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rflow.lang import ConfigError, load_project
from rflow.lang.sections import load_budgets

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
BUDGET = """
budgets:
  daily:
    window: 24h
    max_native_value: ${CAP:-1 ether}
"""


def test_the_budgets_are_the_ones_a_full_load_gives() -> None:
    assert load_budgets(EXAMPLES, {}) == dict(load_project(EXAMPLES, {}).budgets)


def test_they_are_read_without_building_the_other_models() -> None:
    probe = (
        "import sys\n"
        "from rflow.lang.sections import load_budgets\n"
        f"assert load_budgets({str(EXAMPLES)!r}, {{}})\n"
        "print(sorted(m for m in sys.modules if m.startswith('rflow.lang')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    loaded = eval(out.strip().splitlines()[-1])
    assert "rflow.lang.model.resources" in loaded
    for heavy in ("rflow.lang.model.steps", "rflow.lang.checks", "rflow.lang.loader"):
        assert heavy not in loaded


def test_a_problem_elsewhere_does_not_hide_the_budgets(tmp_path: Path) -> None:
    (tmp_path / "budgets.yaml").write_text(BUDGET)
    (tmp_path / "broken.yaml").write_text("workflows:\n  w:\n    trigger: { manul: {} }\n")
    budgets = load_budgets(tmp_path, {"CAP": "2 ether"})
    assert budgets["daily"].max_native_value == 2 * 10**18


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"b.yaml": "budgets:\n  daily: { window: soon }\n"},
            "b.yaml:2:20: error: budgets.daily.window: expected a duration",
        ),
        (
            {"a.yaml": BUDGET, "b.yaml": BUDGET},
            "b.yaml:3:3: error: budgets.daily: budget 'daily' is defined twice",
        ),
        ({"b.yaml": "budgets: [daily]\n"}, "b.yaml:1:10: error: budgets:"),
        ({"b.yaml": "budgets:\n  daily: {window: 1h\n"}, "b.yaml:"),
    ],
)
def test_a_problem_in_the_budgets_is_reported_as_validate_reports_it(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_budgets(tmp_path, {})
    found = [str(d) for d in raised.value.diagnostics]
    assert any(line.startswith(f"{tmp_path}/{message}") for line in found), found


def test_a_missing_path_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_budgets(tmp_path / "nowhere", {})
