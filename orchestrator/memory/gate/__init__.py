"""The memory gate, the last check before anything is remembered: what may be stored and when
two memories are the same (``rules``), and the credential finder it uses, as do hand edits of
``MEMORY.md`` and the marker checks (``secrets``)."""
