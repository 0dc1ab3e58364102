"""The ``arena`` command: its subcommands, their presentation, ``arena up``'s supervisor and
the health checks behind ``arena status``."""

from orchestrator.cli.main import main

__all__ = ["main"]
