"""The ``arena worker`` process: an RQ worker on Agent Arena's queues, and forgetting the
workers of a crashed run. The jobs it runs are in :mod:`orchestrator.background.jobs`; the jobs
whose retry is due are moved onto the queue by its :mod:`~orchestrator.background.requeue`
thread."""

from __future__ import annotations

import importlib
import logging
import signal
import socket
from collections.abc import Collection

from rq import Queue, Worker
from rq.serializers import JSONSerializer

from orchestrator.adapters.redis_client import connect, connect_patient, translated
from orchestrator.adapters.spawn import end_with_parent
from orchestrator.background import jobs as _jobs  # noqa: F401  (loaded before RQ forks)
from orchestrator.background.queue import QUEUE_NAMES, RUN_JOB, RUNS_QUEUE
from orchestrator.background.requeue import Requeuer
from orchestrator.errors import BusError

__all__ = ["forget_workers", "run_worker"]

logger = logging.getLogger(__name__)


class _Worker(Worker):
    """RQ's worker, whose process for a job (the "work horse", in a process group of its own)
    ends with it: a worker killed mid-job leaves nothing running (a job waiting for a Redis
    that is gone would otherwise wait for ever)."""

    def setup_work_horse_signals(self) -> None:
        super().setup_work_horse_signals()  # type: ignore[no-untyped-call]  # rq untyped
        end_with_parent(signal.SIGTERM)


def forget_workers(redis_url: str, pids: Collection[int]) -> list[str]:
    """Unregister the RQ workers of this machine that ran as ``pids`` (a crashed run's
    workers, known to be gone), so that nothing counts them as alive.

    Returns:
        The names of the workers forgotten.
    """
    host = socket.gethostname()
    forgotten: list[str] = []
    with connect(redis_url) as connection:
        try:
            with translated():
                for worker in Worker.all(connection=connection, serializer=JSONSerializer):
                    if worker.hostname == host and worker.pid in pids:
                        worker.register_death()  # type: ignore[no-untyped-call]  # rq untyped
                        forgotten.append(worker.name)
        except BusError as exc:  # they expire by themselves within minutes
            logger.warning("cannot unregister the workers that are gone: %s", exc.problem)
    return forgotten


def run_worker(
    redis_url: str,
    *,
    burst: bool = False,
    name: str | None = None,
    model_sdk: bool = False,
    runs: bool = False,
) -> bool:
    """Run an RQ worker on Agent Arena's queues until it is told to stop (SIGTERM/SIGINT).

    Its commands wait for a Redis that is away (restarting) instead of failing. A thread of
    the worker moves the jobs whose retry is due onto the queue (the thread of one worker per
    Redis does, by lock: :class:`~orchestrator.background.requeue.Requeuer`). RQ forks a
    process per job: the job modules, and the model SDK when ``model_sdk`` (a key is set), are
    loaded here once, before the forks, so that no job pays for importing them (about a
    second, and two more for the SDK).

    Returns:
        True when it did any work (RQ's own answer).
    """
    if model_sdk:
        from orchestrator.adapters import llm  # noqa: F401  (the SDK, only with a key)
    names = (RUNS_QUEUE,) if runs else QUEUE_NAMES
    if runs:  # what every run imports, once, before the forks (by its path, as RQ does)
        importlib.import_module(RUN_JOB.rpartition(".")[0]).preload()
    connection = connect_patient(redis_url)
    queues = [Queue(q, connection=connection, serializer=JSONSerializer) for q in names]
    worker = _Worker(queues, connection=connection, name=name, serializer=JSONSerializer)
    logger.info("worker %s listening on %s", worker.name, ", ".join(names))
    # In burst mode RQ moves the due jobs once, in this process, as it starts.
    requeuer = None if burst else Requeuer(redis_url, names)
    try:
        if requeuer is not None:
            requeuer.start()
        return bool(worker.work(burst=burst, logging_level="WARNING", with_scheduler=burst))
    finally:
        if requeuer is not None:
            requeuer.stop()
        connection.close()
