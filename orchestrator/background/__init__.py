"""Background work on RQ: it is enqueued once (``queue``), run by ``arena worker``
(``worker``) as the job functions in ``jobs``, and listed by ``arena jobs`` (``listing``).
The daemon's ``schedule`` (with the ``idle`` check) only enqueues. The jobs: heartbeat
distillation (``distill``, with ``entries``), rolling summaries (``summary``, with
``summary_offline``), both on the versioned-job runner (``versioned_run``), and ``retention``."""
