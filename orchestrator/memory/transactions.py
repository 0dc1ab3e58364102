"""Write transactions: one writer at a time per process on SQLite, and many small writes asked
for at about the same moment run in one transaction (:class:`BatchedWrites`).

A job can be :class:`Staged`: its rows are inserted with the other staged jobs' rows of the
batch in one statement, then the rest of it runs. On SQLite that is much cheaper than a
statement per row when the table has full-text triggers: FTS5 writes what it gathered to disk
at the end of every statement that changed it inside a transaction, so a batch of single-row
inserts wrote one small index segment per row (and merged them later).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sqlalchemy.engine import Connection, Engine

from orchestrator.core.batching import Coalescer
from orchestrator.core.quick_init import quick_init
from orchestrator.memory.quick import driver_of, hold
from orchestrator.memory.wal import checkpoints_of

__all__ = [
    "AUTOCHECKPOINT_PAGES",
    "BUSY_TIMEOUT_MS",
    "BatchedWrites",
    "InsertMany",
    "QuickWriter",
    "Staged",
    "WriteJob",
    "on_quick_transaction_end",
    "writing",
]

T = TypeVar("T")

BUSY_TIMEOUT_MS = 10_000  # how long a SQLite connection waits for another writer
AUTOCHECKPOINT_PAGES = 1000  # SQLite's own: the log is copied back past this many pages


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
    with _write_lock(engine), engine.begin() as conn:
        yield conn


def _write_lock(engine: Engine) -> threading.Lock:
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(engine, threading.Lock())


_ENDED: list[Callable[[Connection], None]] = []


def on_quick_transaction_end(hook: Callable[[Connection], None]) -> None:
    """Call ``hook`` with a :class:`QuickWriter`'s connection after each of its transactions,
    committed or not: what a pool's check-in would tell (that connection is never given back
    to one)."""
    _ENDED.append(hook)


class QuickWriter:
    """Write transactions that wait for nobody, for the few small writes the event loop makes
    itself: on SQLite, when no other writer of this process or of another holds the database
    at that moment.

    Handing a write to a worker thread costs more than the write: each of its statements
    gives up the interpreter's lock, and the thread and the event loop pass it back and forth
    dozens of times. Done here, a write that finds the database taken is not waited for: the
    caller gets None and writes the usual way (:func:`writing`, in a thread). Its connection
    (its own) waits for no lock and does not checkpoint the write-ahead log (that syncs the
    database file to disk: a thread does it, :mod:`orchestrator.memory.wal`).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
        self._conn: Connection | None = None  # its own, made on first use
        hold(engine, self)

    def let_go(self) -> None:
        """Close this writer's connection (the next transaction makes another)."""
        with _write_lock(self._engine) if self._sqlite else contextlib.nullcontext():
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection | None]:
        """A write transaction holding the database, or None (nothing waited for): not
        SQLite, or another writer holds it (committed at the end of the block, rolled back
        when it raises)."""
        lock = _write_lock(self._engine) if self._sqlite else None
        if lock is None or not lock.acquire(blocking=False):
            yield None
            return
        committed = False
        conn = self._connection()
        try:
            with _begun(conn) as begun:
                yield begun
                committed = begun is not None
        finally:
            for hook in _ENDED:  # it is not given back to a pool, whose check-in they watch
                hook(conn)
            lock.release()
        if committed:  # nobody else copies the log back: a thread does, now and then
            checkpoints_of(self._engine).after_commit()

    def _connection(self) -> Connection:
        """This writer's connection (used under the write lock: one transaction at a time).
        Made from the pool with the engine's settings, then taken out of it for good (the pool
        lends no connection for it; it is closed when this writer is gone): it waits for no
        lock and leaves checkpoints to a thread. Taking one from the pool and setting both,
        then setting them back, at each transaction cost as much as a small write."""
        conn = self._conn
        if conn is None or conn.closed or conn.invalidated:
            conn = self._engine.connect()
            conn.connection.detach()
            driver = driver_of(conn)
            driver.execute("PRAGMA busy_timeout=0")
            driver.execute("PRAGMA wal_autocheckpoint=0")
            self._conn = conn
        return conn


@contextlib.contextmanager
def _begun(conn: Connection) -> Iterator[Connection | None]:
    driver = driver_of(conn)
    try:
        # Holds the database before anything is read: nothing read can change meanwhile.
        driver.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:  # another writer holds it
        yield None
        return
    try:
        transaction = conn.begin()
    except BaseException:
        driver.rollback()
        raise
    with transaction:
        yield conn


WriteJob = Callable[[Connection], Any]

InsertMany = Callable[[Connection, Sequence[Any]], Sequence[Any]]
"""Inserts rows in a transaction; one result per row, in order."""


@quick_init
@dataclass(frozen=True)
class Staged:
    """A job in two steps: ``rows()`` (called where the batch is written: on the event loop,
    or in a worker thread) gives the rows to insert with the batch's other staged rows;
    ``then(conn, rows, results)`` does the rest, with what the insert gave for each of its
    rows."""

    rows: Callable[[], Sequence[Any]]
    then: Callable[[Connection, Sequence[Any], Sequence[Any]], Any]


class BatchedWrites:
    """Write transactions asked for by many coroutines at about the same moment, run in one
    transaction (see :mod:`orchestrator.core.batching`): on the event loop when the database
    is free at once (SQLite, :class:`QuickWriter`), else in one worker-thread hand-off.

    A job is a blocking function of the transaction's connection, quick and touching nothing
    but the database. When one job fails, the batch is rolled back and each job runs again in
    a transaction of its own, so only the failing one fails: jobs must be safe to run twice
    (the history's writes are idempotent).
    """

    def __init__(
        self, engine: Engine, *, max_batch: int = 256, insert: InsertMany | None = None
    ) -> None:
        self.engine = engine
        self._insert = insert  # for Staged jobs
        self._quick = QuickWriter(engine)
        self._coalescer: Coalescer[WriteJob | Staged, Any] = Coalescer(
            self._run, max_batch=max_batch, name="sql-writes"
        )

    async def run(self, job: Callable[[Connection], T] | Staged) -> T:
        """Run ``job`` in a write transaction shared with the jobs asked for meanwhile."""
        return cast(T, await self._coalescer(job))

    async def _run(self, jobs: list[WriteJob | Staged]) -> Sequence[Any]:
        done = self._run_now(jobs)
        if done is not None:
            return done
        return await asyncio.to_thread(self._run_blocking, jobs)

    def _run_now(self, jobs: list[WriteJob | Staged]) -> list[Any] | None:
        """The batch on the event loop when the database is free at once (SQLite: see
        :class:`QuickWriter`); None when it is not, or when a job failed (rolled back: the
        worker thread runs the batch again, then each job on its own)."""
        try:
            with self._quick.transaction() as conn:
                return None if conn is None else self._run_in(conn, jobs)
        except Exception:
            return None

    def _run_blocking(self, jobs: list[WriteJob | Staged]) -> list[Any]:
        try:
            with writing(self.engine) as conn:
                return self._run_in(conn, jobs)
        except Exception as exc:
            if len(jobs) == 1:
                return [exc]
        results: list[Any] = []
        for job in jobs:
            try:
                with writing(self.engine) as conn:
                    results.extend(self._run_in(conn, [job]))
            except Exception as exc:
                results.append(exc)
        return results

    def _run_in(self, conn: Connection, jobs: list[WriteJob | Staged]) -> list[Any]:
        """The staged jobs' rows inserted in one go, then each job in order."""
        rows = [job.rows() if isinstance(job, Staged) else () for job in jobs]
        flat = [row for some in rows for row in some]
        if flat and self._insert is None:
            raise TypeError("staged jobs need BatchedWrites(insert=...)")
        inserted = iter(self._insert(conn, flat) if flat and self._insert else ())
        results: list[Any] = []
        for job, some in zip(jobs, rows, strict=True):
            if isinstance(job, Staged):
                results.append(job.then(conn, some, [next(inserted) for _ in some]))
            else:
                results.append(job(conn))
        return results
