"""Storing the checked lines of an import (:mod:`orchestrator.memory.conversation.importer`).

The messages are stored in one transaction, in file order, through :class:`HistoryStore` (so
they are indexed as every stored message is), after the group's existing messages: the first
new one must not be older than the group's newest, so the history's order and its dates agree.
A line already stored (the same file imported again into the same group: under its derived
id, or under the line's own id where an earlier version stored it so) is counted, not stored
twice; an id that belongs to another message is a problem, and on any problem nothing is
written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from orchestrator.core.models import assume_utc
from orchestrator.memory.conversation.importer import ImportLine, ImportProblems, Progress
from orchestrator.memory.conversation.store import HistoryStore, MessageRow, NewReply
from orchestrator.memory.transactions import writing

__all__ = ["STATUS", "ImportResult", "import_messages"]

STATUS = "imported"
_CHUNK = 500  # ids looked up per query
_MESSAGES = MessageRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportResult:
    """What an import did."""

    group: str
    imported: int
    already: int
    first_at: datetime | None
    last_at: datetime | None
    seqs: tuple[int, ...] = ()  # of the messages stored now, in order
    earlier: int = 0  # the group's messages from before, not in the file


def _rows(conn: Connection, ids: Sequence[str], group: str | None = None) -> dict[str, Any]:
    """The stored rows among ``ids`` (of ``group``), by id."""
    rows: dict[str, Any] = {}
    for start in range(0, len(ids), _CHUNK):
        query = select(
            _MESSAGES.c.id, _MESSAGES.c.group_id, _MESSAGES.c.sender, _MESSAGES.c.text
        ).where(_MESSAGES.c.id.in_(ids[start : start + _CHUNK]))
        if group is not None:
            query = query.where(_MESSAGES.c.group_id == group)
        rows.update({row.id: row for row in conn.execute(query)})
    return rows


def _stored(conn: Connection, lines: Sequence[ImportLine], group: str) -> dict[int, Any]:
    """The rows already stored for ``lines``, by line number: under the message's id, or
    under the line's own id in ``group``, as an earlier version stored a line with an id."""
    derived = _rows(conn, [line.message.id for line in lines])
    own = _rows(conn, [line.file_id for line in lines if line.file_id is not None], group)
    found = {}
    for line in lines:
        row = derived.get(line.message.id)
        if row is None and line.file_id is not None:
            row = own.get(line.file_id)
        if row is not None:
            found[line.number] = row
    return found


def _conflicts(lines: Sequence[ImportLine], stored: dict[int, Any]) -> list[str]:
    problems = []
    for line in lines:
        row = stored.get(line.number)
        if row is None:
            continue
        number, message, shown = line.number, line.message, line.shown_id
        if row.group_id != message.group:
            problems.append(
                f"line {number}: id: {shown!r} is already a message of group {row.group_id!r}"
            )
        elif (row.sender, row.text) != (message.sender, message.text):
            problems.append(
                f"line {number}: id: {shown!r} is already stored with another sender or text"
            )
    return problems


def _count(conn: Connection, group: str) -> int:
    query = select(func.count()).select_from(_MESSAGES).where(_MESSAGES.c.group_id == group)
    return int(conn.execute(query).scalar() or 0)


def _newest_at(conn: Connection, group: str) -> datetime | None:
    newest = conn.execute(
        select(func.max(_MESSAGES.c.created_at)).where(_MESSAGES.c.group_id == group)
    ).scalar()
    if not isinstance(newest, datetime):
        return None
    return assume_utc(newest)


def _too_old(new: Sequence[ImportLine], newest: datetime | None) -> list[str]:
    if newest is None or not new or new[0].message.created_at >= newest:
        return []
    number, first = new[0].number, new[0].message
    return [
        f"line {number}: created_at: {first.created_at.isoformat()} is older than the group's "
        f"newest message ({newest.isoformat()}); its history is kept in time order: import "
        "into a new group, or only messages from after that"
    ]


def _batches(items: Sequence[NewReply], size: int) -> Iterable[Sequence[NewReply]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _meta(line: ImportLine) -> dict[str, Any]:
    meta: dict[str, Any] = {"imported": True, "line": line.number}
    if line.file_id is not None:
        meta["file_id"] = line.file_id
    return meta


def import_messages(
    store: HistoryStore,
    lines: Sequence[ImportLine],
    *,
    progress: Progress | None = None,
) -> ImportResult:
    """Store the messages of ``lines`` (from :func:`parse_lines`) not stored yet, in one
    transaction.

    Raises:
        ImportProblems: when an id belongs to another message or the new messages are older
            than the group's newest; nothing is written then.
    """
    group = lines[0].message.group
    with writing(store.engine) as conn:
        stored = _stored(conn, lines, group)
        new = [line for line in lines if line.number not in stored]
        problems = _conflicts(lines, stored) + _too_old(new, _newest_at(conn, group))
        if problems:
            raise ImportProblems(problems)
        earlier = _count(conn, group) - len(stored)
        replies = [NewReply(message=n.message, meta=_meta(n), status=STATUS) for n in new]
        seqs: list[int] = []
        for batch in _batches(replies, 1000):
            seqs.extend(s.seq for s in store.record_in(conn, batch))
            if progress is not None:
                progress(len(seqs), len(replies))
    return ImportResult(
        group=group,
        imported=len(new),
        already=len(stored),
        first_at=lines[0].message.created_at,
        last_at=lines[-1].message.created_at,
        seqs=tuple(seqs),
        earlier=earlier,
    )
