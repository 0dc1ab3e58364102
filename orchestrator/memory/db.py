"""The SQL engine: SQLite (WAL) by default, PostgreSQL through ``DATABASE_URL``."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlmodel import SQLModel, create_engine

from orchestrator.core.json_text import json_text
from orchestrator.errors import ServiceError

# The modules that define the tables, imported so that their metadata (and the installers of
# the full-text indexes) is registered before create_all. Only those: a command that opens the
# database to read one table does not import the stores' write paths.
from orchestrator.memory import approvals as _approvals  # noqa: F401
from orchestrator.memory import audit as _audit  # noqa: F401
from orchestrator.memory import runs as _runs  # noqa: F401
from orchestrator.memory import tool_calls as _tool_calls  # noqa: F401
from orchestrator.memory.conversation import indexing as _indexing  # noqa: F401
from orchestrator.memory.conversation import rows as _messages  # noqa: F401
from orchestrator.memory.knowledge import tables as _knowledge  # noqa: F401
from orchestrator.memory.quick import let_go
from orchestrator.memory.session import entries as _entries  # noqa: F401
from orchestrator.memory.session import scope_log as _scope_log  # noqa: F401
from orchestrator.memory.session import terms as _terms
from orchestrator.memory.transactions import AUTOCHECKPOINT_PAGES, BUSY_TIMEOUT_MS
from orchestrator.memory.versions import store as _versions  # noqa: F401
from orchestrator.memory.wal import settle

__all__ = ["make_engine", "open_engine"]

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
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def make_engine(url: str) -> Engine:
    """Create the engine and every table that does not exist yet.

    Raises:
        ServiceError: when the database cannot be opened.
    """
    url = _normalise_url(url)
    is_sqlite = url.startswith("sqlite")
    # JSON columns written as the per-message paths past SQLAlchemy write them.
    kwargs: dict[str, Any] = {"json_serializer": json_text}
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
        _create_tables(engine)
    except (SQLAlchemyError, ModuleNotFoundError) as exc:
        safe = url.split("@")[-1] if "@" in url else url
        reason = exc.__class__.__name__
        if isinstance(exc, DBAPIError) and str(exc.orig).strip():
            reason += f" ({str(exc.orig).strip().splitlines()[0][:200]})"
        raise ServiceError("database", f"cannot open {safe}: {reason}") from exc
    return engine


@contextmanager
def open_engine(url: str) -> Iterator[Engine]:
    """:func:`make_engine` for one ``with`` block: the engine is disposed of when it ends.

    Raises:
        ServiceError: when the database cannot be opened.
    """
    engine = make_engine(url)
    try:
        yield engine
    finally:
        settle(engine)  # a checkpoint under way is done before the files are looked at
        let_go(engine)  # and no connection outlives the engine's use, in the pool or not
        engine.dispose()


def _create_tables(engine: Engine, attempts: int = 10) -> None:
    # Daemons started together on a new database each create the tables; the check for
    # what exists and the CREATE are not one step, so the one that loses the race sees
    # "already exists", or SQLite refuses its upgrade from reading to writing at once
    # ("database is locked", without waiting): it looks again.
    for attempt in range(attempts):
        try:
            SQLModel.metadata.create_all(engine)
            _add_columns(engine)
            with engine.begin() as conn:  # needs the columns added
                _terms.install(conn)
            return
        except OperationalError as exc:
            reason = str(exc.orig)
            raced = "already exists" in reason or "database is locked" in reason
            if not raced or attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


# Columns added to a table after it first shipped: (table, column, SQL type). A database made
# before has them added on open; a missing one reads as NULL in the rows it already held.
_ADDED_COLUMNS = (
    ("memory_changes", "reason", "TEXT"),
    ("run_steps", "approval", "VARCHAR(32)"),
    ("knowledge_chunks", "page", "INTEGER"),
    ("memory_entries", "search_terms", "TEXT"),
)


def _add_columns(engine: Engine) -> None:
    for table, column, kind in _ADDED_COLUMNS:
        if _has_column(engine, table, column):
            continue
        try:
            with engine.begin() as conn:
                conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {kind}"))
        except DBAPIError:
            if not _has_column(engine, table, column):  # not another process adding it
                raise


def _has_column(engine: Engine, table: str, column: str) -> bool:
    return column in {c["name"] for c in inspect(engine).get_columns(table)}
