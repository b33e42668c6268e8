"""``python -m rflow.cli``: the same as the ``rflow`` command."""

from rflow.cli import main

main()
