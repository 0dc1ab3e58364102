"""The ``arena`` command: the root group (``main``), one module per family of subcommands,
their presentation (``output``), ``arena up``'s supervisor, ``arena check``'s checks and what
``arena status`` reports (``report``, gathered by ``survey``)."""

from orchestrator.cli.main import main

__all__ = ["main"]
