"""``python -m orchestrator`` runs the ``arena`` command."""

from orchestrator.cli.main import main

main()
