"""``python -m orchestrator`` runs the ``arena`` command."""

from orchestrator.cli import main

main()
