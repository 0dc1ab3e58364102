"""The daemon and what it runs per message: consumer, partitions, per-group dispatch, the
pipeline, briefing and summary triggers. Imports the core, memory, adapters and background."""
