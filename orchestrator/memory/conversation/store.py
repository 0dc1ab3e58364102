"""The conversation history: every person's message, reply and notice, in SQL.

Writes are idempotent on the message id, so a message handled twice (after a crash) is
stored once. The daemon writes through :meth:`HistoryStore.open` and
:meth:`HistoryStore.record`, which many groups' handlers call at about the same moment: their
writes share one transaction (:class:`~orchestrator.memory.transactions.BatchedWrites`). Rows
are deleted only by retention (:mod:`orchestrator.background.retention`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, bindparam, delete, func
from sqlalchemy import select as sql_select
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Session, col, select

from orchestrator.core.models import ChatMessage, MessageKind, assume_utc
from orchestrator.memory.conversation.rows import (
    COLUMNS,
    MESSAGES,
    Closing,
    GroupInfo,
    MessageRow,
    NewReply,
    Opened,
    StoredMessage,
    to_stored,
)
from orchestrator.memory.conversation.rows_sql import (
    SQLITE_RECENT,
    SQLITE_RECENT_BEFORE,
    row_writes,
    sqlite_stored,
)
from orchestrator.memory.quick import QuickReader
from orchestrator.memory.transactions import BatchedWrites, Staged, writing

__all__ = [
    "Closing",
    "GroupInfo",
    "HistoryStore",
    "MessageRow",
    "NewReply",
    "Opened",
    "StoredMessage",
]

TokenCount = Callable[[str], int]

_DELETE_BATCH = 1000  # rows per transaction, so a large prune never holds the lock for long

# Built once: the per-message statements are only bound to new values, never rebuilt.
_BY_ID = sql_select(*COLUMNS).where(MESSAGES.c.id == bindparam("message_id"))
_REPLIES = (
    sql_select(*COLUMNS)
    .where(MESSAGES.c.in_reply_to == bindparam("message_id"))
    .order_by(MESSAGES.c.seq)
)
_NEWEST = "SELECT max(seq) FROM messages WHERE group_id = ?"


def _before(before: datetime, group: str | None, upto_seq: int | None) -> list[ColumnElement[bool]]:
    where = [col(MessageRow.created_at) < before.astimezone(UTC)]
    if group is not None:
        where.append(col(MessageRow.group_id) == group)
    if upto_seq is not None:
        where.append(col(MessageRow.seq) <= upto_seq)
    return where


class HistoryStore:
    """Reads and writes the ``messages`` table.

    :meth:`open` and :meth:`record` are async and batched; every other method is blocking:
    call it from a thread (``asyncio.to_thread``) in async code. The per-message paths use
    SQL expressions rather than ORM objects: they run for every message the daemon handles.
    """

    def __init__(self, engine: Engine, *, max_batch: int = 256) -> None:
        self.engine = engine
        self._quick = QuickReader(engine)  # the newest seq, asked at most turns
        self._sqlite = engine.dialect.name == "sqlite"
        self._rows = row_writes(engine)
        # Many groups' messages are stored together: one thread hand-off, one transaction.
        self._writes = BatchedWrites(engine, max_batch=max_batch, insert=self._rows.insert_many)

    async def open(self, message: ChatMessage, *, count: TokenCount | None = None) -> Opened:
        """Store a person's message unless it is stored, and return it with its replies so
        far (what a handler needs to start, or to resume after a crash).

        Args:
            message: the person's message.
            count: counts the message's tokens (in the writing thread), if given.
        """

        def rows() -> list[NewReply]:
            tokens = count(message.text) if count is not None else None
            return [NewReply(message=message, tokens=tokens, status="received")]

        return await self._writes.run(Staged(rows, self._opened))

    async def record(
        self,
        replies: Sequence[NewReply],
        *,
        closing: Closing | None = None,
        count: TokenCount | None = None,
    ) -> list[StoredMessage]:
        """Store ``replies`` (those not stored yet) and, with ``closing``, close the person's
        message, in one transaction.

        Args:
            replies: the rows to store, in order.
            closing: the person's message's final record, if it is done.
            count: counts each reply's tokens (in the writing thread), if given.

        Returns:
            The replies as stored (as an earlier attempt stored them, where one did).
        """

        def rows() -> Sequence[NewReply]:
            if count is None:
                return replies
            return [dataclasses.replace(r, tokens=count(r.message.text)) for r in replies]

        return await self._writes.run(Staged(rows, functools.partial(self._recorded, closing)))

    def record_in(
        self, conn: Connection, replies: Sequence[NewReply], *, closing: Closing | None = None
    ) -> list[StoredMessage]:
        """:meth:`record` within a transaction of this store's engine (an import's)."""
        return self._recorded(closing, conn, replies, self._rows.insert_many(conn, replies))

    def _recorded(
        self,
        closing: Closing | None,
        conn: Connection,
        replies: Sequence[NewReply],
        seqs: Sequence[int | None],
    ) -> list[StoredMessage]:
        """The replies as stored (read back where their id was taken); ``closing`` written."""
        stored: list[StoredMessage] = []
        for reply, seq in zip(replies, seqs, strict=True):
            if seq is None:
                stored.append(
                    to_stored(conn.execute(_BY_ID, {"message_id": reply.message.id}).one())
                )
                continue
            stored.append(
                StoredMessage(
                    seq=seq,
                    message=reply.message,
                    status=reply.status,
                    meta=reply.meta or {},
                    tokens=reply.tokens,
                )
            )
        if closing is not None:
            self._rows.close(conn, closing)
        return stored

    def _opened(
        self, conn: Connection, rows: Sequence[NewReply], seqs: Sequence[int | None]
    ) -> Opened:
        (row,), (seq,) = rows, seqs
        if seq is not None:
            stored = StoredMessage(
                seq=seq, message=row.message, status="received", tokens=row.tokens
            )
            return Opened(stored=stored, replies=[], new=True)
        message_id = row.message.id
        found = conn.execute(_BY_ID, {"message_id": message_id}).one()
        replies = conn.execute(_REPLIES, {"message_id": message_id}).all()
        return Opened(stored=to_stored(found), replies=[to_stored(r) for r in replies], new=False)

    def get(self, message_id: str) -> StoredMessage | None:
        """The message with this id, if stored."""
        with self.engine.connect() as conn:
            row = conn.execute(_BY_ID, {"message_id": message_id}).first()
        return to_stored(row) if row else None

    def newest_seq(self, group: str) -> int | None:
        """The ``seq`` of the group's newest message (None: it has none)."""
        newest = self._quick.rows(_NEWEST, (group,))[0][0]
        return int(newest) if newest is not None else None

    def recent(
        self, group: str, limit: int, *, before_seq: int | None = None
    ) -> list[StoredMessage]:
        """The ``limit`` newest messages of a group (before ``before_seq``), oldest first."""
        if limit <= 0:
            return []
        if self._sqlite:
            if before_seq is None:
                found = self._quick.rows(SQLITE_RECENT, (group, limit))
            else:
                found = self._quick.rows(SQLITE_RECENT_BEFORE, (group, before_seq, limit))
            return [sqlite_stored(row) for row in reversed(found)]
        query = sql_select(*COLUMNS).where(MESSAGES.c.group_id == group)
        if before_seq is not None:
            query = query.where(MESSAGES.c.seq < before_seq)
        query = query.order_by(MESSAGES.c.seq.desc()).limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [to_stored(r) for r in reversed(rows)]

    def said_after(
        self, group: str, *, after: int, upto: int | None, limit: int
    ) -> list[StoredMessage]:
        """The group's first ``limit`` messages after ``after`` (up to ``upto``), notices left
        out, oldest first: what a summary reads."""
        query = sql_select(*COLUMNS).where(
            MESSAGES.c.group_id == group,
            MESSAGES.c.seq > after,
            MESSAGES.c.kind != MessageKind.NOTICE.value,
        )
        if upto is not None:
            query = query.where(MESSAGES.c.seq <= upto)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(MESSAGES.c.seq).limit(limit)).all()
        return [to_stored(r) for r in rows]

    def groups(self) -> list[GroupInfo]:
        """Every group with its message count and last activity."""
        with Session(self.engine) as session:
            rows = session.exec(
                select(MessageRow.group_id, func.count(), func.max(MessageRow.created_at)).group_by(
                    MessageRow.group_id
                )
            ).all()
        return [
            GroupInfo(group=g, messages=n, last_at=assume_utc(last) if last else None)
            for g, n, last in rows
        ]

    def count(self, group: str | None = None, kinds: Sequence[MessageKind] = ()) -> int:
        """How many messages are stored (in a group, of some kinds)."""
        query = select(func.count()).select_from(MessageRow)
        if group is not None:
            query = query.where(MessageRow.group_id == group)
        if kinds:
            query = query.where(col(MessageRow.kind).in_([k.value for k in kinds]))
        with Session(self.engine) as session:
            return int(session.exec(query).one())

    def count_before(
        self, before: datetime, *, group: str | None = None, upto_seq: int | None = None
    ) -> dict[str, int]:
        """Messages created before ``before`` (in a group, up to ``upto_seq``), by group."""
        query = (
            select(MessageRow.group_id, func.count())
            .where(*_before(before, group, upto_seq))
            .group_by(MessageRow.group_id)
        )
        with Session(self.engine) as session:
            return {g: int(n) for g, n in session.exec(query).all()}

    def delete_before(self, before: datetime, *, group: str, upto_seq: int) -> int:
        """Delete ``group``'s messages created before ``before`` whose ``seq`` is at most
        ``upto_seq``, in batches.

        Returns:
            How many were deleted.
        """
        where = _before(before, group, upto_seq)
        deleted = 0
        while True:
            batch = select(MessageRow.seq).where(*where).limit(_DELETE_BATCH)
            with writing(self.engine) as conn:
                done = conn.execute(delete(MessageRow).where(col(MessageRow.seq).in_(batch)))
            deleted += done.rowcount
            if done.rowcount < _DELETE_BATCH:
                return deleted
