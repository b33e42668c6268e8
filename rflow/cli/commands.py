"""Attaches every command module to the ``rflow`` group."""

from __future__ import annotations

from rflow.cli import (
    ops,  # noqa: F401
    trigger,  # noqa: F401
)
