"""The offline model: what answers, distils and summarises when no API key is set, the same
for the same input. The provider (``model``), the coding agent behind a Claude Code run
(``coder``), the word cues for decisions and requirements the provider and the summary share
(``cues``), the entry rules of ``MEMORY.md`` and the distillation made on them (``distiller``),
and the rolling summary (``summariser``). A layer of its own above the core, the only part of
the package it imports; no I/O."""
