"""Background work on RQ: it is enqueued once (``queue``), run by ``arena worker``
(``worker``) as the job functions in ``jobs``, and listed by ``arena jobs`` (``listing``).
The daemon's ``schedule`` (with the ``idle`` check) only enqueues. The jobs: heartbeat
distillation (``distill``), rolling summaries (``summary``), both on the versioned-job runner
(:mod:`orchestrator.memory.versions.run`) and made without a model by
:mod:`orchestrator.offline`, and ``retention``."""
