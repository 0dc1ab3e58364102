"""Versions of an agent's ``MEMORY.md`` and of a group's summary, and the growth log that keeps
them: the log (``store``), a file written only as a new version of it (``file``), a person's
edit of ``MEMORY.md`` (``hand_edit``), and the steps every job that writes a new version shares
(``run``)."""
