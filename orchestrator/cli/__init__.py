"""The ``arena`` command: the root group (``main``), one module per family of subcommands,
their presentation (``output``), ``arena up``'s supervisor and ``arena check``'s checks (what
``arena status`` reports is gathered in :mod:`orchestrator.status`)."""

from orchestrator.cli.main import main

__all__ = ["main"]
