"""How ``rflow runs show`` lays out long outputs and durations."""

from __future__ import annotations

from datetime import timedelta

from rflow.cli.runs import _duration, _wrapped


def test_a_long_output_is_wrapped_not_cut_and_full_prints_it_whole() -> None:
    text = "word " * 200
    shown = _wrapped(text, 60, 4)
    assert len(shown) == 5 and all(len(line) <= 60 for line in shown[:4])
    assert shown[-1].endswith("more characters (--full prints them)")
    whole = _wrapped(text, 60, None)
    assert " ".join(whole).split() == text.split()


def test_a_short_output_stays_on_one_line() -> None:
    assert _wrapped('{"ok": true}', 60, 4) == ['{"ok": true}']
    assert _wrapped("", 60, 4) == [""]


def test_durations_read_in_the_unit_that_fits() -> None:
    assert _duration(timedelta(milliseconds=850)) == "850 ms"
    assert _duration(timedelta(seconds=12.44)) == "12.4 s"
    assert _duration(timedelta(seconds=185)) == "3 m 05 s"
    assert _duration(timedelta(hours=2, minutes=10)) == "2 h 10 m"
