"""The installed dependencies are the ones requirements.lock pins, hashes and all."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> dict[str, str]:
    pins = {}
    for number, line in enumerate(LOCK.read_text().splitlines(), 1):
        if not line or line[0] in " #":
            continue
        match = PIN.match(line)
        assert match, f"requirements.lock line {number} is not an exact pin: {line!r}"
        pins[canonical(match[1])] = match[2]
    return pins


def test_every_locked_package_is_installed_at_its_locked_version():
    wrong = {}
    for name, version in locked().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            wrong[name] = (version, installed)
    assert wrong == {}, (
        "installed versions differ from requirements.lock (locked, installed); "
        f"run scripts/bootstrap: {wrong}"
    )


def test_every_pin_carries_a_hash():
    text = LOCK.read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 1)[1])
    unhashed = [e.split()[0] for e in entries if PIN.match(e) and "--hash=sha256:" not in e]
    assert unhashed == []


@pytest.mark.parametrize("name", ["faust-streaming", "aiokafka", "mode-streaming"])
def test_the_streaming_stack_is_pinned_exactly_in_pyproject(name):
    pyproject = (ROOT / "pyproject.toml").read_text()
    pinned = re.search(rf'"{name}==([^"]+)"', pyproject)
    assert pinned, f"pyproject.toml must pin {name} exactly (==)"
    assert locked()[name] == pinned[1]
