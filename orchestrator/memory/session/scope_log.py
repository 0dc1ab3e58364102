"""The log of changed memory entries: what lets a process keep memories in memory and still see
every change, whoever made it.

The database writes it itself. Triggers add a row ``(seq, scope, scope_id, entry_id)`` to
``memory_scope_log`` for every entry inserted, deleted or changed (a change of ``last_used_at``
alone is not one: recall writes it and nothing reads it back) and for every pin added or
removed, so every writer is seen: a daemon's turns, the console, ``arena memory``, a worker, a
script with its own SQL. A reader remembers the last ``seq`` it has seen and asks for the rows
after it: one indexed read of no rows when nothing changed. A reader need not ask at every
turn: :func:`written` changes after each write to memory this process commits (through any
engine), and what another process wrote is seen when the reader next asks (at most
:data:`POLL_S` later). Only the newest
:data:`KEPT_ROWS` rows are kept; a reader that fell further behind (:meth:`ScopeLog.changes`
says so) reads everything again.

On PostgreSQL a ``seq`` is taken before its transaction commits, so a smaller one can become
visible after a larger one: readers there look :data:`POSTGRES_LOOKBACK` rows back and skip the
ones they applied.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Integer, event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import Pool
from sqlmodel import Field, SQLModel

from orchestrator.memory import audit as _audit  # noqa: F401  (memory_pins, for the triggers)
from orchestrator.memory.quick import QuickReader
from orchestrator.memory.session import entries as _entries
from orchestrator.memory.session.fts import postgres_needs_install, sqlite_needs_install
from orchestrator.memory.transactions import on_quick_transaction_end

__all__ = [
    "KEPT_ROWS",
    "NOT_A_CHANGE",
    "POSTGRES_LOOKBACK",
    "Change",
    "Changes",
    "ScopeLogRow",
    "changes",
    "newest",
    "written",
]

KEPT_ROWS = 10_000
POSTGRES_LOOKBACK = 256
# How stale a reader may be about another process's writes (this process's own are seen at once).
POLL_S = 0.1


class ScopeLogRow(SQLModel, table=True):
    """One changed entry (or pin) of a scope."""

    __tablename__ = "memory_scope_log"
    # Never a seq used before, even when every row was deleted: a reader's last one stays
    # behind every new change.
    __table_args__ = {"sqlite_autoincrement": True}

    seq: int | None = Field(
        default=None, sa_column=Column(Integer, primary_key=True, autoincrement=True)
    )
    scope: str = Field(max_length=16)
    scope_id: str = Field(default="", max_length=200)
    entry_id: int


@dataclass(frozen=True, slots=True)
class Change:
    """An entry of ``scope`` that was written, deleted, pinned or unpinned."""

    seq: int
    scope: tuple[str, str]
    entry_id: int


@dataclass(frozen=True, slots=True)
class Changes:
    """What changed after a reader's last ``seq``; ``lost``: the log no longer holds all of
    it (read everything again)."""

    rows: Sequence[Change]
    lost: bool
    last: int


# Every column whose change a reader of the entries must see: all but last_used_at.
_WATCHED = ", ".join(
    column.name for column in _entries.ENTRIES.c if column.name not in ("id", "last_used_at")
)
_LOG = "INSERT INTO memory_scope_log(scope, scope_id, entry_id)"

_SQLITE_OBJECTS = {
    "memory_scope_log_ai": f"""
        CREATE TRIGGER memory_scope_log_ai AFTER INSERT ON memory_entries BEGIN
            {_LOG} VALUES (new.scope, new.scope_id, new.id);
        END
    """,
    "memory_scope_log_ad": f"""
        CREATE TRIGGER memory_scope_log_ad AFTER DELETE ON memory_entries BEGIN
            {_LOG} VALUES (old.scope, old.scope_id, old.id);
        END
    """,
    "memory_scope_log_au": f"""
        CREATE TRIGGER memory_scope_log_au AFTER UPDATE OF {_WATCHED} ON memory_entries BEGIN
            {_LOG} VALUES (old.scope, old.scope_id, old.id);
            {_LOG} SELECT new.scope, new.scope_id, new.id
                WHERE new.scope IS NOT old.scope OR new.scope_id IS NOT old.scope_id;
        END
    """,
    "memory_scope_log_pi": f"""
        CREATE TRIGGER memory_scope_log_pi AFTER INSERT ON memory_pins BEGIN
            {_LOG} SELECT scope, scope_id, id FROM memory_entries WHERE id = new.entry_id;
        END
    """,
    "memory_scope_log_pd": f"""
        CREATE TRIGGER memory_scope_log_pd AFTER DELETE ON memory_pins BEGIN
            {_LOG} SELECT scope, scope_id, id FROM memory_entries WHERE id = old.entry_id;
        END
    """,
    "memory_scope_log_keep": f"""
        CREATE TRIGGER memory_scope_log_keep AFTER INSERT ON memory_scope_log BEGIN
            DELETE FROM memory_scope_log WHERE seq <= new.seq - {KEPT_ROWS};
        END
    """,
}

_POSTGRES_TRIGGERS = ("memory_scope_log_entries", "memory_scope_log_pins")
_POSTGRES_DDL = (
    f"""
    CREATE OR REPLACE FUNCTION memory_scope_log_entry() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            {_LOG} VALUES (OLD.scope, OLD.scope_id, OLD.id);
        END IF;
        IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE'
                AND (NEW.scope, NEW.scope_id) IS DISTINCT FROM (OLD.scope, OLD.scope_id)) THEN
            {_LOG} VALUES (NEW.scope, NEW.scope_id, NEW.id);
        END IF;
        DELETE FROM memory_scope_log
            WHERE seq <= currval(pg_get_serial_sequence('memory_scope_log', 'seq')) - {KEPT_ROWS};
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE OR REPLACE FUNCTION memory_scope_log_pin() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE pinned integer;
    BEGIN
        IF TG_OP = 'DELETE' THEN pinned := OLD.entry_id; ELSE pinned := NEW.entry_id; END IF;
        {_LOG} SELECT scope, scope_id, id FROM memory_entries WHERE id = pinned;
        RETURN NULL;
    END $$
    """,
    "DROP TRIGGER IF EXISTS memory_scope_log_entries ON memory_entries",
    f"""
    CREATE TRIGGER memory_scope_log_entries
    AFTER INSERT OR DELETE OR UPDATE OF {_WATCHED} ON memory_entries
    FOR EACH ROW EXECUTE FUNCTION memory_scope_log_entry()
    """,
    "DROP TRIGGER IF EXISTS memory_scope_log_pins ON memory_pins",
    """
    CREATE TRIGGER memory_scope_log_pins AFTER INSERT OR DELETE ON memory_pins
    FOR EACH ROW EXECUTE FUNCTION memory_scope_log_pin()
    """,
)


@event.listens_for(SQLModel.metadata, "after_create")
def _install(_target: Any, connection: Connection, **_kw: Any) -> None:
    """``create_all`` makes the table; its triggers need raw SQL after it."""
    install(connection)


def install(conn: Connection) -> None:
    """Create the triggers that fill the log (idempotent; one catalogue query when current)."""
    if conn.dialect.name == "sqlite":
        if sqlite_needs_install(conn, _SQLITE_OBJECTS):
            for name, statement in _SQLITE_OBJECTS.items():
                conn.execute(text(f"DROP TRIGGER IF EXISTS {name}"))
                conn.execute(text(statement))
        return
    names = ", ".join(f"'{name}'" for name in _POSTGRES_TRIGGERS)
    current = text(
        f"SELECT count(*) = {len(_POSTGRES_TRIGGERS)} FROM pg_trigger WHERE tgname IN ({names})"
    )
    if postgres_needs_install(conn, current, lock=727275):
        for statement in _POSTGRES_DDL:
            conn.execute(text(statement))


_SINCE = "SELECT seq, scope, scope_id, entry_id FROM memory_scope_log WHERE seq > ? ORDER BY seq"
_OLDEST = "SELECT min(seq) FROM memory_scope_log"
_NEWEST = "SELECT coalesce(max(seq), 0) FROM memory_scope_log"


def newest(reader: QuickReader) -> int:
    """The last ``seq`` written so far (0: none): where a new reader starts."""
    return int(reader.rows(_NEWEST)[0][0])


def changes(reader: QuickReader, last: int, applied: set[int], *, lookback: int = 0) -> Changes:
    """The changes after ``last``; with ``lookback`` (PostgreSQL: :data:`POSTGRES_LOOKBACK`)
    also those up to that many seqs before it that are not in ``applied``, the seqs read
    there already.

    Returns:
        The changes in ``seq`` order, whether some were lost, and the new ``last``.
    """
    rows = reader.rows(_SINCE, (max(0, last - lookback),))
    found = [
        Change(seq=int(seq), scope=(str(scope), str(scope_id)), entry_id=int(entry_id))
        for seq, scope, scope_id, entry_id in rows
        if int(seq) not in applied
    ]
    if not found:
        return Changes(rows=(), lost=False, last=last)
    if last == 0 or int(rows[0][0]) <= last + 1:
        lost = False  # the log holds the change right after ``last``: none was let go
    else:
        oldest = reader.rows(_OLDEST)[0][0]
        lost = oldest is not None and int(oldest) > last + 1
    return Changes(rows=found, lost=lost, last=max(last, found[-1].seq))


# This process's writes ----------------------------------------------------------------------

_TABLES = ("memory_entries", "memory_pins")
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")
_FLAG = "arena_memory_written"
# The execution options of a statement the log ignores (it writes only ``last_used_at``).
NOT_A_CHANGE = {"arena_not_a_change": True}
_counter = itertools.count(1)
_written = 0


def written() -> int:
    """A number that changes after this process commits a write to memory entries or pins,
    whichever engine and thread made it (compare it with the one seen at the last read)."""
    return _written


def _bump() -> None:
    global _written
    _written = next(_counter)


@event.listens_for(Engine, "after_cursor_execute")
def _note(
    conn: Connection,
    _cursor: Any,
    statement: str,
    _parameters: Any,
    context: Any,
    _executemany: bool,
) -> None:
    if context is not None and context.execution_options.get("arena_not_a_change"):
        return
    if statement.lstrip()[:7].upper().startswith(_WRITES) and any(
        table in statement for table in _TABLES
    ):
        conn.info[_FLAG] = True


def note_write(conn: Connection) -> None:
    """Count a write to memory entries or pins that ``conn`` ran past SQLAlchemy (straight
    through the driver) as this process's, as a statement through it is counted."""
    conn.info[_FLAG] = True


@event.listens_for(Engine, "commit")
def _committing(conn: Connection) -> None:
    if conn.info.get(_FLAG):
        _bump()  # and again when the connection is given back, once the commit is done


@event.listens_for(Pool, "checkin")
def _given_back(_dbapi_connection: Any, record: Any) -> None:
    if record is not None and record.info.pop(_FLAG, False):
        _bump()


def _ended(conn: Connection) -> None:
    """A transaction of a connection kept out of the pool (a
    :class:`~orchestrator.memory.transactions.QuickWriter`'s) ended: its write to memory, if
    it made one, is counted now that the commit is done, as at a check-in."""
    if conn.info.pop(_FLAG, False):
        _bump()


on_quick_transaction_end(_ended)
