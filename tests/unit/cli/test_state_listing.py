"""`rflow state WORKFLOW`: a value too long for the table is cut, and the table says how
to read it whole."""

from __future__ import annotations

from rflow.cli.state import listing


def entry(key: str, value: object) -> dict[str, object]:
    return {"key": key, "type": "text", "value": value, "updated_at": "2026-12-07T10:00:00+00:00"}


def test_a_value_cut_to_fit_is_named_with_the_command_that_shows_it_whole():
    keys = [entry("short", "ok"), entry("long", "x" * 80), entry("longer", ["y" * 80])]
    lines = listing("tally", keys, 30).splitlines()
    assert lines[0].split() == ["KEY", "TYPE", "UPDATED", "VALUE"]
    assert lines[2].endswith('"' + "x" * 26 + "...") and len(lines[2].split()[-1]) == 30
    assert lines[-1] == (
        "(long, longer cut to fit: `rflow state tally KEY` shows one whole, --json all of them)"
    )


def test_a_table_with_nothing_cut_has_no_last_word():
    lines = listing("tally", [entry("short", "ok"), entry("n", 12)], 30).splitlines()
    assert len(lines) == 3 and lines[-1].split()[0] == "n"
