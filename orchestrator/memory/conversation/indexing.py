"""The index of a group's conversation in the database: its tables, views and triggers, and
the backfill of messages stored before it existed.

The index is kept in step with the ``messages`` table by the database itself, so every way a
message is stored (the daemon's turns, an import) is indexed without the writer doing
anything. Notices are never indexed.

Each message is indexed with its context too: the first :data:`CONTEXT_CHARS` characters of the
group's message before it (not a notice), kept in ``messages.context`` when the message is
stored. An answer rarely repeats the words of what it answers ("This has been great for my
mental health" after "I've been running farther"): the words before it find it, at a lower
weight than its own.

- SQLite: an FTS5 table over the text (weight 1), the sender (weight 0.5), the group's key
  (one token, matched in its own column, weight 0) and the context, external content through a
  view, kept in sync by triggers; the tokenizer and Porter stemming of session memory's index.
- PostgreSQL: a ``tsvector`` (text weight A, sender weight B, context weight C) and a
  one-element group array, filled by a trigger, under one GIN index over both.

A database that held messages before the index existed is indexed by :func:`backfill`, in
batches, in the background: ``history_index_state`` records how far it got (rows with ``seq``
at most ``done_seq``, or above ``target_seq``, are indexed), so it resumes where it stopped
and never indexes a row twice. Searching is :mod:`orchestrator.memory.conversation.index`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection, Engine
from sqlmodel import SQLModel

from orchestrator.memory.session.fts import postgres_needs_install, sqlite_needs_install
from orchestrator.memory.transactions import writing

__all__ = [
    "CONTEXT_CHARS",
    "INDEXED_KINDS_SQL",
    "BackgroundIndexing",
    "backfill",
    "group_key",
    "install",
    "pending",
]

logger = logging.getLogger(__name__)

INDEXED_KINDS = ("human", "agent")
INDEXED_KINDS_SQL = "('human', 'agent')"
_SQLITE_KEY = "'g' || lower(hex({row}group_id)) || '0'"
# Whether a row is in the index: stored after the index was made, or backfilled already.
_SQLITE_INDEXED = (
    "({row}seq > coalesce((SELECT target_seq FROM history_index_state), 0) "
    "OR {row}seq <= coalesce((SELECT done_seq FROM history_index_state), 0))"
)
_SQLITE_COLUMNS = "body, meta, scope, context"
# How much of the message before a message is indexed as its context.
CONTEXT_CHARS = 500
# The context of the row ``{row}``: the start of the group's message before it (either dialect).
_CONTEXT = (
    f"(SELECT substr(p.text, 1, {CONTEXT_CHARS}) FROM messages AS p "
    f"WHERE p.group_id = {{row}}group_id AND p.seq < {{row}}seq "
    f"AND p.kind IN {INDEXED_KINDS_SQL} ORDER BY p.seq DESC LIMIT 1)"
)


def group_key(group: str) -> str:
    """The index token of a group's messages on SQLite (see ``_SQLITE_KEY``)."""
    return "g" + group.encode().hex() + "0"


def _values(row: str) -> str:
    key = _SQLITE_KEY.format(row=row + ".")
    return f"{row}.seq, {row}.text, {row}.sender, {key}, {row}.context"


def _when(row: str) -> str:
    return f"{row}.kind IN {INDEXED_KINDS_SQL} AND {_SQLITE_INDEXED.format(row=row + '.')}"


_SQLITE_OBJECTS = {
    "history_index_state": """
        CREATE TABLE history_index_state (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            done_seq INTEGER NOT NULL,
            target_seq INTEGER NOT NULL
        )
    """,
    "history_fts_source": f"""
        CREATE VIEW history_fts_source AS
        SELECT seq, text AS body, sender AS meta, {_SQLITE_KEY.format(row="")} AS scope, context
        FROM messages WHERE kind IN {INDEXED_KINDS_SQL}
    """,
    "history_fts": f"""
        CREATE VIRTUAL TABLE history_fts USING fts5(
            {_SQLITE_COLUMNS},
            content='history_fts_source', content_rowid='seq',
            tokenize='porter unicode61 remove_diacritics 2'
        )
    """,
    "history_fts_ai": f"""
        CREATE TRIGGER history_fts_ai AFTER INSERT ON messages WHEN {_when("new")} BEGIN
            UPDATE messages SET context = {_CONTEXT.format(row="new.")}
            WHERE seq = new.seq;
            INSERT INTO history_fts(rowid, {_SQLITE_COLUMNS})
            SELECT seq, {_SQLITE_COLUMNS} FROM history_fts_source WHERE seq = new.seq;
        END
    """,
    "history_fts_ad": f"""
        CREATE TRIGGER history_fts_ad AFTER DELETE ON messages WHEN {_when("old")} BEGIN
            INSERT INTO history_fts(history_fts, rowid, {_SQLITE_COLUMNS})
            VALUES ('delete', {_values("old")});
        END
    """,
    "history_fts_au": f"""
        CREATE TRIGGER history_fts_au AFTER UPDATE OF text, sender, kind, group_id ON messages
        WHEN {_SQLITE_INDEXED.format(row="old.")} BEGIN
            INSERT INTO history_fts(history_fts, rowid, {_SQLITE_COLUMNS})
            SELECT 'delete', {_values("old")} WHERE old.kind IN {INDEXED_KINDS_SQL};
            INSERT INTO history_fts(rowid, {_SQLITE_COLUMNS})
            SELECT {_values("new")} WHERE new.kind IN {INDEXED_KINDS_SQL};
        END
    """,
}

_POSTGRES_INDEX = "ix_messages_search_group_tsv"
# The message before one, found by this index (the context's lookup at every insert).
_POSTGRES_ORDER_INDEX = "ix_messages_group_id_seq"
_POSTGRES_VECTOR = (
    "setweight(to_tsvector('english'::regconfig, coalesce({row}text, '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce({row}sender, '')), 'B') || "
    "setweight(to_tsvector('english'::regconfig, coalesce({row}context, '')), 'C')"
)
_POSTGRES_DDL = (
    "ALTER TABLE messages ADD COLUMN IF NOT EXISTS search_tsv tsvector",
    "ALTER TABLE messages ADD COLUMN IF NOT EXISTS search_group text[]",
    "ALTER TABLE messages ADD COLUMN IF NOT EXISTS context text",
    f"CREATE INDEX IF NOT EXISTS {_POSTGRES_ORDER_INDEX} ON messages (group_id, seq)",
    """
    CREATE TABLE IF NOT EXISTS history_index_state (
        id integer PRIMARY KEY CHECK (id = 1),
        done_seq bigint NOT NULL,
        target_seq bigint NOT NULL
    )
    """,
    f"""
    CREATE OR REPLACE FUNCTION messages_search_fill() RETURNS trigger AS $$
    BEGIN
        IF NEW.kind IN {INDEXED_KINDS_SQL} THEN
            IF TG_OP = 'INSERT' THEN
                NEW.context := {_CONTEXT.format(row="NEW.")};
            END IF;
            NEW.search_tsv := {_POSTGRES_VECTOR.format(row="NEW.")};
            NEW.search_group := ARRAY[NEW.group_id];
        ELSE
            NEW.search_tsv := NULL;
            NEW.search_group := NULL;
        END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql
    """,
    "DROP TRIGGER IF EXISTS messages_search ON messages",
    """
    CREATE TRIGGER messages_search BEFORE INSERT OR UPDATE OF text, sender, kind, group_id
    ON messages FOR EACH ROW EXECUTE FUNCTION messages_search_fill()
    """,
    f"CREATE INDEX IF NOT EXISTS {_POSTGRES_INDEX} "
    "ON messages USING GIN (search_group, search_tsv)",
)


@event.listens_for(SQLModel.metadata, "after_create")
def _install_on_create(_target: Any, connection: Connection, **_kw: Any) -> None:
    """``create_all`` makes the tables; the index needs raw SQL after them."""
    install(connection)


def install(conn: Connection) -> None:
    """Create the index of the conversation, or bring an older one to the current shape.

    Cheap when nothing needs doing (one catalogue query), so it runs on every start. Creating
    the index indexes nothing itself: the messages already stored are left to
    :func:`backfill`, which records how far it got.
    """
    if conn.dialect.name == "sqlite":
        _install_sqlite(conn)
    else:
        _install_postgres(conn)


def _install_sqlite(conn: Connection) -> None:
    if not sqlite_needs_install(conn, _SQLITE_OBJECTS):
        return
    _add_context_column(conn)
    for name in ("history_fts_ai", "history_fts_ad", "history_fts_au"):
        conn.execute(text(f"DROP TRIGGER IF EXISTS {name}"))
    conn.execute(text("DROP TABLE IF EXISTS history_fts"))
    conn.execute(text("DROP VIEW IF EXISTS history_fts_source"))
    conn.execute(text("DROP TABLE IF EXISTS history_index_state"))
    for statement in _SQLITE_OBJECTS.values():
        conn.execute(text(statement))
    _start_state(conn)


def _add_context_column(conn: Connection) -> None:
    """``messages.context``, on a database made before the index kept it."""
    columns = {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(messages)")}
    if "context" not in columns:
        conn.execute(text("ALTER TABLE messages ADD COLUMN context TEXT"))


def _start_state(conn: Connection) -> None:
    """Every message stored so far is left to the backfill."""
    newest = conn.execute(text("SELECT coalesce(max(seq), 0) FROM messages")).scalar_one()
    conn.execute(
        text("INSERT INTO history_index_state (id, done_seq, target_seq) VALUES (1, 0, :n)"),
        {"n": int(newest)},
    )
    if newest:
        logger.info("history index created: messages stored before it will be indexed")


def _install_postgres(conn: Connection) -> None:
    current = text(
        f"SELECT to_regclass('{_POSTGRES_INDEX}') IS NOT NULL "
        f"AND to_regclass('{_POSTGRES_ORDER_INDEX}') IS NOT NULL "
        "AND to_regclass('history_index_state') IS NOT NULL"
    )
    if not postgres_needs_install(conn, current, lock=727275):
        return
    for statement in _POSTGRES_DDL:
        conn.execute(text(statement))
    conn.execute(text("DELETE FROM history_index_state"))
    _start_state(conn)


def pending(engine: Engine) -> int:
    """How many stored messages (of every kind) the backfill has still to go through."""
    with engine.connect() as conn:
        done, target = _state(conn)
        return _count(conn, done, target)


def _count(conn: Connection, done: int, target: int) -> int:
    count = conn.execute(
        text("SELECT count(*) FROM messages WHERE seq > :done AND seq <= :target"),
        {"done": done, "target": target},
    ).scalar_one()
    return int(count)


def _state(conn: Connection) -> tuple[int, int]:
    row = conn.execute(text("SELECT done_seq, target_seq FROM history_index_state")).first()
    return (int(row[0]), int(row[1])) if row is not None else (0, 0)


# The context of the messages stored before the index kept it, filled batch by batch with them.
_CONTEXT_FILL = (
    "UPDATE messages SET context = {context} WHERE seq > :done AND seq <= :upto "
    f"AND kind IN {INDEXED_KINDS_SQL}"
)
_CONTEXT_FILL_SQL = _CONTEXT_FILL.format(context=_CONTEXT.format(row="messages."))
_SQLITE_FILL = (
    f"INSERT INTO history_fts(rowid, {_SQLITE_COLUMNS}) "
    f"SELECT seq, {_SQLITE_COLUMNS} FROM history_fts_source WHERE seq > :done AND seq <= :upto"
)
_SQLITE_MERGE = "INSERT INTO history_fts(history_fts, rank) VALUES ('merge', 2000)"
_POSTGRES_FILL = (
    f"UPDATE messages SET search_tsv = {_POSTGRES_VECTOR.format(row='')}, "
    "search_group = ARRAY[group_id] WHERE seq > :done AND seq <= :upto "
    f"AND kind IN {INDEXED_KINDS_SQL}"
)


def _fill_batch(engine: Engine, batch: int) -> tuple[int, int] | None:
    """Index the next ``batch`` seqs; (done, target) after it, or None when all was done."""
    with writing(engine) as conn:
        done, target = _state(conn)
        if done >= target:
            return None
        upto = min(done + batch, target)
        if conn.dialect.name == "sqlite":
            conn.execute(text(_CONTEXT_FILL_SQL), {"done": done, "upto": upto})
            conn.execute(text(_SQLITE_FILL), {"done": done, "upto": upto})
            # Merge the batch's segments here, not in the next message's write.
            conn.execute(text(_SQLITE_MERGE))
        else:
            conn.execute(text(_CONTEXT_FILL_SQL), {"done": done, "upto": upto})
            conn.execute(text(_POSTGRES_FILL), {"done": done, "upto": upto})
        conn.execute(text("UPDATE history_index_state SET done_seq = :upto"), {"upto": upto})
    return upto, target


def backfill(
    engine: Engine,
    *,
    batch: int = 2000,
    stop: threading.Event | None = None,
    log_every: int = 50_000,
) -> int:
    """Index the messages stored before the index existed, ``batch`` seqs per transaction,
    logging progress ("indexing history: 120000/680000"). Blocking: run it in a thread.

    Safe to run in several processes at once and to stop at any time (``stop``): each batch
    and the record of its progress are one transaction, so the next run resumes there.

    Returns:
        How many messages it went through.
    """
    with engine.connect() as conn:
        first, target = _state(conn)
        total = _count(conn, first, target)
    if total == 0:
        return 0
    logger.info("indexing history: %d messages stored before the index", total)
    logged = seen = 0
    while stop is None or not stop.is_set():
        step = _fill_batch(engine, batch)
        if step is None:
            logger.info("indexing history: done, %d/%d", total, total)
            return total
        done, target = step
        # Progress in seqs, shown as messages: the same unless some were deleted.
        seen = round(total * (done - first) / max(1, target - first))
        if seen - logged >= log_every:
            logger.info("indexing history: %d/%d", seen, total)
            logged = seen
    logger.info("indexing history paused at %d/%d; it goes on at the next start", seen, total)
    return seen


class BackgroundIndexing:
    """:func:`backfill` in a worker thread, from construction until :meth:`stop`: the daemon
    answers meanwhile (a search finds only what is indexed so far)."""

    def __init__(self, engine: Engine) -> None:
        self._stop = threading.Event()
        self._task = asyncio.create_task(
            asyncio.to_thread(self._run, engine), name="orchestrator.history.index"
        )

    def _run(self, engine: Engine) -> None:
        try:
            backfill(engine, stop=self._stop)
        except Exception:
            logger.exception("indexing history failed; it starts again at the next start")

    async def stop(self) -> None:
        """Stop after the batch in hand (its progress is kept) and wait for it."""
        self._stop.set()
        await asyncio.gather(self._task, return_exceptions=True)
