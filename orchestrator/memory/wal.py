"""SQLite's write-ahead log copied back into the database, in a thread, for the writes made on
the event loop.

SQLite copies the log back (a checkpoint) at the commit that takes it past
:data:`~orchestrator.memory.transactions.AUTOCHECKPOINT_PAGES` pages, on the committing
connection: a copy and a sync of the database file. The writes made on the event loop
(:class:`~orchestrator.memory.transactions.QuickWriter`) turn that off, so as not to stall every
group for it; when they are the only writes, nothing else would ever copy the log back, and it
would grow for as long as the process runs (every reader searching it). So after such a
commit, at most every :data:`CHECKPOINT_EVERY_S`, a thread runs a passive checkpoint: it copies
what no reader still needs and waits for nobody.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from orchestrator.memory.quick import driver_of

__all__ = ["CHECKPOINT_EVERY_S", "WalCheckpoints", "checkpoints_of", "settle"]

logger = logging.getLogger(__name__)

CHECKPOINT_EVERY_S = 1.0


class WalCheckpoints:
    """Passive checkpoints of one engine's database, one at a time, in a thread of their own."""

    def __init__(
        self,
        engine: Engine,
        *,
        every_s: float = CHECKPOINT_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = weakref.ref(engine)
        self.every_s = every_s
        self._clock = clock
        self._last = clock()
        self._running: threading.Thread | None = None
        self._lock = threading.Lock()
        self.done = 0  # checkpoints run

    def after_commit(self) -> None:
        """A write was committed without a checkpoint: start one when the last is old enough
        (never two at once). Returns at once."""
        now = self._clock()
        with self._lock:
            if self._running is not None or now - self._last < self.every_s:
                return
            self._last = now
            self._running = threading.Thread(
                target=self._checkpoint, name="orchestrator.memory.wal", daemon=True
            )
            self._running.start()

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for a checkpoint under way, if any (tests; a process that stops)."""
        running = self._running
        if running is not None:
            running.join(timeout_s)

    def _checkpoint(self) -> None:
        try:
            engine = self._engine()
            if engine is None:
                return
            with engine.connect() as conn:
                driver_of(conn).execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.done += 1
        except (sqlite3.Error, SQLAlchemyError) as exc:  # the next commit tries again
            logger.warning("could not copy the write-ahead log back: %s", exc)
        finally:
            with self._lock:
                self._running = None


_CHECKPOINTS: weakref.WeakKeyDictionary[Engine, WalCheckpoints] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


def checkpoints_of(engine: Engine) -> WalCheckpoints:
    """The checkpoints of ``engine``'s database (one per engine)."""
    with _GUARD:
        found = _CHECKPOINTS.get(engine)
        if found is None:
            found = _CHECKPOINTS[engine] = WalCheckpoints(engine)
        return found


def settle(engine: Engine, timeout_s: float = 10.0) -> None:
    """Wait for a checkpoint of ``engine``'s under way, if any: before the engine is disposed
    of, so that nothing writes the database's files once its owner is done with them (a
    checkpoint would reconnect a disposed engine)."""
    with _GUARD:
        found = _CHECKPOINTS.get(engine)
    if found is not None:
        found.wait(timeout_s)
