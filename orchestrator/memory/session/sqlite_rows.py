"""The memory entries every turn reads, straight from ``sqlite3`` on SQLite.

Recall reads, at every turn, the full-text hits of its scopes, the full entries of those past
the relevance floor and the scopes' pinned entries: tens of rows. SQLAlchemy processes each value
of each row it returns (a datetime parsed by a regular expression, then given its zone; JSON
decoded), which cost more than the queries. Here the same queries go to the driver, and only the
datetime columns (stored as SQLAlchemy stores them: ``YYYY-MM-DD HH:MM:SS.ffffff``, in UTC,
given their zone as its type does) and the JSON ones are converted: a row reads as SQLAlchemy
would give it. Other databases keep SQLAlchemy's path (the functions return None there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Column
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ClauseElement
from sqlmodel.sql.sqltypes import UTCDateTime

from orchestrator.core.json_text import json_value
from orchestrator.core.models import utc_from_text
from orchestrator.memory.quick import driver_of

__all__ = ["SqliteRows", "SqliteStatement"]

# More ids than this go the SQLAlchemy way (SQLite limits a statement's parameters).
_MOST_IDS = 500


class SqliteRows:
    """Reads ``columns`` of ``memory_entries`` rows as dictionaries of their values."""

    def __init__(self, columns: Sequence[Column[Any]]) -> None:
        self.names = tuple(column.name for column in columns)
        self._datetimes = tuple(
            i for i, column in enumerate(columns) if isinstance(column.type, UTCDateTime)
        )
        self._json = tuple(i for i, column in enumerate(columns) if isinstance(column.type, JSON))
        self._select = "SELECT " + ", ".join(f'memory_entries."{n}"' for n in self.names)
        self._select += " FROM memory_entries"

    def by_ids(self, conn: Connection, ids: Sequence[int]) -> list[dict[str, Any]] | None:
        """The rows with these ids, in no order (None: not SQLite, or too many ids)."""
        if conn.dialect.name != "sqlite" or len(ids) > _MOST_IDS:
            return None
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        return self._rows(conn, f"{self._select} WHERE memory_entries.id IN ({marks})", ids)

    def pinned(
        self, conn: Connection, scopes: Sequence[tuple[str, str]]
    ) -> list[dict[str, Any]] | None:
        """The pinned active rows of ``scopes``, newest first (None: not SQLite)."""
        if conn.dialect.name != "sqlite":
            return None
        if not scopes:
            return []
        which = " OR ".join(
            "(memory_entries.scope = ? AND memory_entries.scope_id = ?)" for _ in scopes
        )
        sql = (
            f"{self._select} JOIN memory_pins ON memory_pins.entry_id = memory_entries.id"
            f" WHERE memory_entries.status = 'active' AND ({which})"
            " ORDER BY memory_entries.id DESC"
        )
        return self._rows(conn, sql, [value for scope in scopes for value in scope])

    def raw(
        self, conn: Connection, condition: str, params: Sequence[Any], extra: Sequence[str] = ()
    ) -> list[tuple[Any, ...]] | None:
        """The rows that meet ``condition`` as the driver gives them: the columns, then the
        ``extra`` ones; :meth:`convert` reads one (None: not SQLite)."""
        if conn.dialect.name != "sqlite":
            return None
        more = "".join(f', memory_entries."{name}"' for name in extra)
        select = self._select.replace(" FROM memory_entries", f"{more} FROM memory_entries")
        return list(driver_of(conn).execute(f"{select} WHERE {condition}", tuple(params)))

    def convert(self, values: Sequence[Any]) -> dict[str, Any]:
        """A raw row (its first columns, those given) as SQLAlchemy would give it."""
        row = list(values[: len(self.names)])
        for i in self._datetimes:
            if isinstance(row[i], str):  # stored in UTC, without its zone
                row[i] = utc_from_text(row[i])
        for i in self._json:
            if isinstance(row[i], str):
                row[i] = json_value(row[i])
        return dict(zip(self.names, row, strict=True))

    def _rows(self, conn: Connection, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        return [self.convert(values) for values in driver_of(conn).execute(sql, tuple(params))]


class SqliteStatement:
    """A statement built once, run on SQLite straight through the driver: compiled by
    SQLAlchemy once, its values bound by the very functions SQLAlchemy binds them with (a time
    stored as SQLAlchemy stores it, JSON as it writes it), its rows given as the driver reads
    them. What a memory write runs at every turn that saves one: through SQLAlchemy, each of
    its statements cost several times the statement itself.

    A statement that writes must be marked as this process's memory write by the caller
    (:func:`orchestrator.memory.session.scope_log.note_write`): SQLAlchemy's events do not
    see it.
    """

    def __init__(self, statement: ClauseElement) -> None:
        self._statement = statement
        self._compiled: Any = None
        self._binds: tuple[tuple[str, Callable[[Any], Any] | None], ...] = ()

    def _compile(self, conn: Connection) -> Any:
        return self._statement.compile(dialect=conn.dialect)  # an SQLCompiler: Any to mypy

    def rows(self, conn: Connection, params: Mapping[str, Any]) -> list[tuple[Any, ...]] | None:
        """The statement's rows for ``params`` (by the names of its bound parameters), in the
        transaction of ``conn`` (None: not SQLite; run it through SQLAlchemy)."""
        if conn.dialect.name != "sqlite":
            return None
        compiled = self._compiled
        if compiled is None:
            compiled = self._compile(conn)
            self._binds = tuple(
                (
                    name,
                    compiled.binds[name]
                    .type.dialect_impl(conn.dialect)
                    .bind_processor(conn.dialect),
                )
                for name in compiled.positiontup or ()
            )
            self._compiled = compiled
        given = compiled.construct_params(dict(params))
        values = tuple(
            given[name] if process is None else process(given[name])
            for name, process in self._binds
        )
        return list(driver_of(conn).execute(compiled.string, values))
