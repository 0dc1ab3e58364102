"""The SQL engine: SQLite (WAL) by default, PostgreSQL through ``DATABASE_URL``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlmodel import SQLModel, create_engine

from orchestrator.batching import Coalescer
from orchestrator.errors import ServiceError

__all__ = ["BatchedWrites", "make_engine", "writing"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _normalise_url(url: str) -> str:
    """Use the psycopg 3 driver for plain ``postgresql://`` URLs."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def make_engine(url: str) -> Engine:
    """Create the engine and every table that does not exist yet.

    Raises:
        ServiceError: when the database cannot be opened.
    """
    url = _normalise_url(url)
    is_sqlite = url.startswith("sqlite")
    kwargs: dict[str, Any] = {}
    if is_sqlite:
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
        # Enough pooled connections for the worker threads: new ones pay for the pragmas.
        kwargs["pool_size"] = 16
    else:
        kwargs["pool_pre_ping"] = True
        kwargs["pool_size"] = 10
    try:
        engine = create_engine(url, **kwargs)
        if is_sqlite:
            event.listen(engine, "connect", _sqlite_pragmas)
        # Import the table modules so their metadata (and the history index's installer) is
        # registered before create_all.
        import orchestrator.memory.history  # noqa: F401
        from orchestrator.memory import history_index as _index  # noqa: F401
        from orchestrator.memory import session as _session  # noqa: F401
        from orchestrator.memory import versions as _versions  # noqa: F401

        _create_tables(engine)
    except (SQLAlchemyError, ModuleNotFoundError) as exc:
        safe = url.split("@")[-1] if "@" in url else url
        reason = exc.__class__.__name__
        if isinstance(exc, DBAPIError) and str(exc.orig).strip():
            reason += f" ({str(exc.orig).strip().splitlines()[0][:200]})"
        raise ServiceError("database", f"cannot open {safe}: {reason}") from exc
    return engine


def _create_tables(engine: Engine, attempts: int = 10) -> None:
    # Daemons started together on a new database each create the tables; the check for
    # what exists and the CREATE are not one step, so the one that loses the race sees
    # "already exists", or SQLite refuses its upgrade from reading to writing at once
    # ("database is locked", without waiting): it looks again.
    for attempt in range(attempts):
        try:
            SQLModel.metadata.create_all(engine)
            return
        except OperationalError as exc:
            reason = str(exc.orig)
            raced = "already exists" in reason or "database is locked" in reason
            if not raced or attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


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
    worker-thread hand-off and one transaction (see :mod:`orchestrator.batching`).

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
