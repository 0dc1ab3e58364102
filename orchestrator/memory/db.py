"""The SQL engine: SQLite (WAL) by default, PostgreSQL through ``DATABASE_URL``."""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import SQLModel, create_engine

from orchestrator.errors import ServiceError

__all__ = ["make_engine", "writing"]

logger = logging.getLogger(__name__)


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
        # Import the table modules so their metadata is registered before create_all.
        import orchestrator.memory.history  # noqa: F401
        from orchestrator.memory import session as _session  # noqa: F401
        from orchestrator.memory import versions as _versions  # noqa: F401

        SQLModel.metadata.create_all(engine)
    except (SQLAlchemyError, ModuleNotFoundError) as exc:
        safe = url.split("@")[-1] if "@" in url else url
        raise ServiceError("database", f"cannot open {safe}: {exc.__class__.__name__}") from exc
    return engine


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
