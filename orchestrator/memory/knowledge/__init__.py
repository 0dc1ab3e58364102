"""Knowledge: the team's documents, the project's own files and lorebooks, split into chunks
that recall finds and cites to the line."""
