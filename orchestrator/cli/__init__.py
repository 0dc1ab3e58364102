"""The ``arena`` command: :mod:`~orchestrator.cli.launch` first (a command that reads is handed
to the warm command server of a running ``arena up``, :mod:`~orchestrator.cli.warm`), then the
root group (``main``), one module per family of subcommands, their presentation (``output``),
``arena up``'s supervisor and ``arena check``'s checks (what ``arena status`` reports is
gathered in :mod:`orchestrator.status`)."""
