"""The ``rflow`` command line.

Each command group lives in its own module and is attached to :data:`main` here.
"""

from __future__ import annotations

import click

from rflow import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rflow")
def main() -> None:
    """rflow: when this happens, do these things, in order."""


def _register() -> None:
    from rflow.cli import commands  # noqa: F401  (attaches the commands)


_register()
