"""Background work on RQ: the queue and job bodies, the worker, the schedule, heartbeat
distillation, rolling summaries, retention and the versioned-job runner."""
