"""Moving due jobs onto their queue: RQ's scheduler, run in a thread of ``arena worker``.

A failed job waits in RQ's scheduled-job registry until its retry is due; RQ's scheduler then
moves it onto its queue. RQ runs that scheduler in a process it forks from the worker
(``Worker.work(with_scheduler=True)``), but only in the worker that takes the scheduler lock as
it starts: the other workers try again in their maintenance pass, every 10 minutes, and so
does the worker whose scheduler process has ended (which stays a zombie until then). When
the worker that holds the lock stops, or its scheduler dies, the retries due meanwhile wait
up to 10 minutes. So each worker runs the scheduler's steps itself, in a thread, through
:class:`rq.scheduler.RQScheduler`'s public methods (its lock, so that one scheduler per Redis
moves jobs; its record, which ``Queue.scheduler_pid`` reads; ``enqueue_scheduled_jobs``):

- every second, while it holds the lock: renew it and move the jobs that are due; without the
  lock, try to take it (another worker's thread takes over within a second of the holder
  letting go, or of the holder's lock expiring when it was killed);
- Redis not answering: one warning, one line when it answers again, and it goes on;
- on stop it lets go of the lock (if Redis answers; else the lock expires within a minute).

No RQ method is replaced: burst mode (``arena worker --burst``) still uses RQ's own scheduler
step, which moves the due jobs once as the worker starts.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence

from rq.scheduler import RQScheduler
from rq.serializers import JSONSerializer

from orchestrator.adapters.redis_client import connect, translated
from orchestrator.errors import BusError, BusUnavailable

__all__ = ["Requeuer"]

logger = logging.getLogger(__name__)

INTERVAL_S = 1  # RQ's own; the lock lives this plus 60 s


class Requeuer:
    """Moves due jobs (retries, jobs to run later) onto their queues, from a thread.

    Args:
        redis_url: the Redis of the queues. The thread has connections of its own, which give
            up after redis-py's usual attempts, so that an outage is told in the log.
        queue_names: the queues whose due jobs it moves.
    """

    def __init__(self, redis_url: str, queue_names: Sequence[str]) -> None:
        self._queue_names = frozenset(queue_names)
        self._scheduler = RQScheduler(
            list(queue_names),
            connection=connect(redis_url),  # RQ opens a pool like this one's
            interval=INTERVAL_S,
            logging_level=logging.WARNING,
            serializer=JSONSerializer,
        )
        self._registered = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="orchestrator.background.requeue", daemon=True
        )

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self, timeout_s: float = 5) -> None:
        """Stop the thread; it lets go of the lock first when Redis answers."""
        self._stopping.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        unreachable = False
        while not self._stopping.is_set():
            try:
                with translated():
                    self._step()
            except BusUnavailable as exc:
                self._registered = False
                if not unreachable:
                    logger.warning(
                        "cannot reach Redis to requeue due jobs (%s); trying again every %d s",
                        exc.problem,
                        INTERVAL_S,
                    )
                unreachable = True
            except Exception:  # the thread must not end: nothing else moves due jobs
                logger.exception("requeueing due jobs failed; trying again in %d s", INTERVAL_S)
            else:
                if unreachable:
                    logger.warning("Redis answers again: requeueing due jobs")
                unreachable = False
            self._stopping.wait(INTERVAL_S)
        self._let_go()

    def _step(self) -> None:
        scheduler = self._scheduler
        if scheduler.acquired_locks != self._queue_names:
            scheduler.acquire_locks()  # type: ignore[no-untyped-call]  # rq is untyped here
            if not scheduler.acquired_locks:
                return  # another worker's scheduler holds it
        if not self._registered:
            scheduler.register_birth()  # again after an outage: the record may have expired
            self._registered = True
        # Renews the lock (one taken over meanwhile is dropped from acquired_locks).
        scheduler.heartbeat()  # type: ignore[no-untyped-call]  # rq is untyped here
        scheduler.enqueue_scheduled_jobs()  # type: ignore[no-untyped-call]  # rq is untyped here

    def _let_go(self) -> None:
        scheduler = self._scheduler
        try:
            with translated():
                if scheduler.acquired_locks:
                    scheduler.release_locks()  # type: ignore[no-untyped-call]  # rq is untyped
                    scheduler.register_death()
        except BusError as exc:
            logger.warning(
                "cannot release the scheduler lock (%s); it expires within %d s",
                exc.problem,
                INTERVAL_S + 60,
            )
        with contextlib.suppress(BusError), translated():
            scheduler.connection.close()
