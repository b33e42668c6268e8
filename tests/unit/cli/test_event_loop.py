"""RFLOW_EVENT_LOOP: the event loop a worker runs on."""

from __future__ import annotations

import asyncio
import builtins

import pytest
import uvloop

from rflow.cli.ops import use_event_loop
from rflow.settings import Settings, SettingsError


@pytest.fixture
def policy():
    before = asyncio.get_event_loop_policy()
    yield
    asyncio.set_event_loop_policy(before)


def test_auto_and_uvloop_run_the_worker_on_uvloop(policy) -> None:
    for choice in ("auto", "uvloop"):
        asyncio.set_event_loop_policy(None)
        use_event_loop(choice)
        loop = asyncio.new_event_loop()  # as the worker makes its own
        try:
            assert isinstance(loop, uvloop.Loop), choice
        finally:
            loop.close()


def test_asyncio_keeps_the_standard_loop(policy) -> None:
    asyncio.set_event_loop_policy(None)
    use_event_loop("asyncio")
    loop = asyncio.new_event_loop()
    try:
        assert not isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_uvloop_asked_for_but_missing_is_an_error_auto_falls_back(
    policy, monkeypatch, capsys
) -> None:
    real_import = builtins.__import__

    def no_uvloop(name, *args, **kwargs):
        if name == "uvloop":
            raise ImportError("No module named 'uvloop'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_uvloop)
    asyncio.set_event_loop_policy(None)
    use_event_loop("auto")
    assert type(asyncio.get_event_loop_policy()) is asyncio.DefaultEventLoopPolicy
    with pytest.raises(SystemExit) as exited:
        use_event_loop("uvloop")
    assert exited.value.code == 1
    assert "RFLOW_EVENT_LOOP=uvloop, but uvloop is not installed" in capsys.readouterr().err


def test_the_setting_names_its_choices() -> None:
    assert Settings.from_env({"RFLOW_EVENT_LOOP": "asyncio"}).event_loop == "asyncio"
    assert Settings.from_env({}).event_loop == "auto"
    with pytest.raises(SettingsError, match="'auto', 'uvloop' or 'asyncio'"):
        Settings.from_env({"RFLOW_EVENT_LOOP": "trio"})
