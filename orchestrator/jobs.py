"""Background work on RQ: the queues and the worker process (``arena worker``).

Job functions are module-level, take ids, and are enqueued with a deterministic job id so
the same input is never run twice.
"""

from __future__ import annotations

import logging

import redis
from rq import Queue, Worker

__all__ = ["QUEUE_NAMES", "run_worker"]

logger = logging.getLogger(__name__)

QUEUE_NAMES = ("arena",)


def run_worker(redis_url: str, *, burst: bool = False, name: str | None = None) -> bool:
    """Run an RQ worker on Agent Arena's queues until it is told to stop (SIGTERM/SIGINT).

    Returns:
        True when it did any work (RQ's own answer).
    """
    connection = redis.Redis.from_url(redis_url)
    queues = [Queue(q, connection=connection) for q in QUEUE_NAMES]
    worker = Worker(queues, connection=connection, name=name)
    logger.info("worker %s listening on %s", worker.name, ", ".join(QUEUE_NAMES))
    try:
        return bool(worker.work(burst=burst, logging_level="WARNING", with_scheduler=False))
    finally:
        connection.close()
