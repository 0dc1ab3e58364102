"""``python -m orchestrator`` runs the ``arena`` command."""

from orchestrator.cli.launch import main

main()
