"""Write transactions: one writer at a time per process on SQLite, and many small writes asked
for at about the same moment run in one transaction (:class:`BatchedWrites`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

from sqlalchemy.engine import Connection, Engine

from orchestrator.core.batching import Coalescer

__all__ = ["BatchedWrites", "WriteJob", "writing"]

T = TypeVar("T")


_WRITE_LOCKS: weakref.WeakKeyDictionary[Engine, threading.Lock] = weakref.WeakKeyDictionary()
_WRITE_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def writing(engine: Engine) -> Iterator[Connection]:
    """A write transaction. On SQLite this process's writers first take turns on a lock:
    SQLite lets one writer in at a time and its busy handler sleeps up to 100 ms between tries,
    while a lock hands over to the next writer at once (other processes still wait on SQLite's
    own lock, ``busy_timeout``)."""
    if engine.dialect.name != "sqlite":
        with engine.begin() as conn:
            yield conn
        return
    with _WRITE_LOCKS_GUARD:
        lock = _WRITE_LOCKS.setdefault(engine, threading.Lock())
    with lock, engine.begin() as conn:
        yield conn


WriteJob = Callable[[Connection], Any]


class BatchedWrites:
    """Write transactions asked for by many coroutines at about the same moment, run in one
    worker-thread hand-off and one transaction (see :mod:`orchestrator.core.batching`).

    A job is a blocking function of the transaction's connection. When one job fails, the
    batch is rolled back and each job runs again in a transaction of its own, so only the
    failing one fails: jobs must be safe to run twice (the history's writes are idempotent).
    """

    def __init__(self, engine: Engine, *, max_batch: int = 256) -> None:
        self.engine = engine
        self._coalescer: Coalescer[WriteJob, Any] = Coalescer(
            self._run, max_batch=max_batch, name="sql-writes"
        )

    async def run(self, job: Callable[[Connection], T]) -> T:
        """Run ``job`` in a write transaction shared with the jobs asked for meanwhile."""
        return cast(T, await self._coalescer(job))

    async def _run(self, jobs: list[WriteJob]) -> Sequence[Any]:
        return await asyncio.to_thread(self._run_blocking, jobs)

    def _run_blocking(self, jobs: list[WriteJob]) -> list[Any]:
        try:
            with writing(self.engine) as conn:
                return [job(conn) for job in jobs]
        except Exception as exc:
            if len(jobs) == 1:
                return [exc]
        results: list[Any] = []
        for job in jobs:
            try:
                with writing(self.engine) as conn:
                    results.append(job(conn))
            except Exception as exc:
                results.append(exc)
        return results
