"""Session memory: the entries a group's agents saved (``store``; adding, reinforcing and
superseding in ``writes``; light full-text hits in ``search``), their rows and values
(``entries``, ``records``), the full-text index helpers (``fts``) and optional embeddings."""
