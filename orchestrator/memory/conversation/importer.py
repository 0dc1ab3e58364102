"""Bringing an existing conversation into a group (``arena import``).

The file is JSON Lines, one message per line::

    {"sender": "alice", "text": "Ship on Friday.", "created_at": "2024-03-01T09:15:00+01:00"}

``sender`` and ``text`` follow the wire's rules (:func:`orchestrator.core.wire.validate_sender`,
:func:`orchestrator.core.wire.validate_text`); ``created_at`` is ISO 8601, a time without an offset
being in ``ARENA_TZ``; ``id`` is optional (a safe id, see :data:`ID_RE`): without one, the id
is derived from the group, sender, text, date and how many identical messages came before in
the file, so importing the same file again adds nothing. ``kind`` is optional: ``human`` (the
default) or ``agent``, which only a known agent's id may use as its sender. Blank lines are
skipped.

Everything is checked before anything is written: each problem is named with its line and
field, and on any problem nothing is stored. The messages are stored in one transaction, in
file order, through :class:`HistoryStore` (so they are indexed as every stored message is),
after the group's existing messages: ``created_at`` must not go back in time, within the file
or before the group's newest message, so the history's order and its dates agree.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from orchestrator.core.models import ChatMessage, MessageKind, assume_utc
from orchestrator.core.wire import validate_group, validate_person, validate_sender, validate_text
from orchestrator.errors import OrchestratorError, ValidationError
from orchestrator.memory.conversation.store import HistoryStore, MessageRow, NewReply
from orchestrator.memory.transactions import writing

__all__ = [
    "FIELDS",
    "ID_RE",
    "ImportProblems",
    "ImportResult",
    "ImportSettings",
    "Progress",
    "import_messages",
    "parse_lines",
]

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,199}\Z")
FIELDS = ("sender", "text", "created_at", "id", "kind")
SHOWN_PROBLEMS = 20
STATUS = "imported"
_CHUNK = 500  # ids looked up per query
_MESSAGES = MessageRow.__table__  # type: ignore[attr-defined]

Progress = Callable[[int, int], None]


class ImportProblems(OrchestratorError):
    """The file cannot be imported; nothing was written."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        shown = self.problems[:SHOWN_PROBLEMS]
        more = len(self.problems) - len(shown)
        lines = [f"nothing imported: {len(self.problems)} problem(s)", *shown]
        if more:
            lines.append(f"and {more} more")
        super().__init__("\n".join(lines))


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportSettings:
    """What the checks depend on."""

    group: str
    zone: tzinfo
    max_bytes: int
    agents: frozenset[str] = frozenset()
    team: frozenset[str] = frozenset()  # every agent's id and name: no person's line's sender


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


def _created_at(value: Any, zone: tzinfo) -> datetime:
    if not isinstance(value, str):
        raise ValidationError("created_at", "not a string (an ISO 8601 date and time)")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError("created_at", f"not an ISO 8601 date: {value[:40]!r}") from None
    return (when if when.tzinfo else when.replace(tzinfo=zone)).astimezone(UTC)


def _kind(value: Any, sender: str, agents: frozenset[str]) -> MessageKind:
    if value is None or value == "human":
        return MessageKind.HUMAN
    if value != "agent":
        raise ValidationError("kind", f"{str(value)[:20]!r} is not 'human' or 'agent'")
    if sender not in agents:
        raise ValidationError("kind", f"'agent' needs an agent's id as sender, not {sender!r}")
    return MessageKind.AGENT


def _string(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if value is None:
        raise ValidationError(name, "missing field")
    if not isinstance(value, str):
        raise ValidationError(name, "not a string")
    return value


def _sender(data: dict[str, Any], team: frozenset[str]) -> str:
    """The line's sender: a person's line (kind ``human``) is refused under an agent's id or
    name or a reserved name, as a person's post is (:func:`validate_person`)."""
    sender = validate_sender(_string(data, "sender"))
    if data.get("kind") in (None, "human"):
        validate_person(sender, team)
    return sender


def _derived_id(group: str, sender: str, text: str, when: datetime, seen: int) -> str:
    """The same message at the same place of the same file gets the same id."""
    key = json.dumps([group, sender, text, when.isoformat(), seen], ensure_ascii=False)
    return "imp-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass(slots=True)
class _Parser:
    """Checks lines one by one, keeping what identifies repeated messages and ids."""

    config: ImportSettings
    identical: Counter[tuple[str, str, datetime]]
    ids: dict[str, int]

    def message(self, data: dict[str, Any]) -> ChatMessage:
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise ValidationError(unknown[0], f"unknown field (fields: {', '.join(FIELDS)})")
        sender = _sender(data, self.config.team)
        text = validate_text(_string(data, "text"), self.config.max_bytes)
        when = _created_at(data.get("created_at"), self.config.zone)
        kind = _kind(data.get("kind"), sender, self.config.agents)
        if data.get("id") is None:
            seen = self.identical[(sender, text, when)]
            self.identical[(sender, text, when)] += 1
            message_id = _derived_id(self.config.group, sender, text, when, seen)
        else:
            message_id = _string(data, "id")
            if not ID_RE.match(message_id):
                raise ValidationError(
                    "id", f"{message_id[:40]!r} is not a safe id (letters, digits, _ . : @ -)"
                )
        return ChatMessage(
            id=message_id,
            group=self.config.group,
            sender=sender,
            kind=kind,
            text=text,
            created_at=when,
        )


def _decode(number: int, raw: bytes) -> Any:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError("line", f"not valid UTF-8 ({exc.reason})") from None
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValidationError("line", f"not JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValidationError("line", f"not a JSON object but {type(data).__name__}")
    return data


def parse_lines(
    data: bytes, config: ImportSettings, progress: Progress | None = None
) -> list[tuple[int, ChatMessage]]:
    """Check every line of a JSON Lines file; the messages with their line numbers.

    Raises:
        ImportProblems: listing every problem as ``line N: field: problem``.
    """
    validate_group(config.group)
    data = data.removeprefix(codecs.BOM_UTF8)  # as some editors and exports start a file
    parser = _Parser(config=config, identical=Counter(), ids={})
    problems: list[str] = []
    messages: list[tuple[int, ChatMessage]] = []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if progress is not None and number % 1000 == 0:
            progress(number, len(lines))
        if not raw.strip():
            continue
        try:
            message = parser.message(_decode(number, raw))
        except ValidationError as exc:
            where = "" if exc.field == "line" else f"{exc.field}: "
            problems.append(f"line {number}: {where}{exc.problem}")
            continue
        problems.extend(_order_problems(number, message, parser.ids, messages))
        parser.ids.setdefault(message.id, number)
        messages.append((number, message))
    if progress is not None:
        progress(len(lines), len(lines))
    if not messages and not problems:
        problems.append("the file holds no messages")
    if problems:
        raise ImportProblems(problems)
    return messages


def _order_problems(
    number: int,
    message: ChatMessage,
    ids: dict[str, int],
    before: Sequence[tuple[int, ChatMessage]],
) -> list[str]:
    found = []
    if message.id in ids:
        found.append(
            f"line {number}: id: {message.id!r} is already the id of line {ids[message.id]}"
        )
    if before and message.created_at < before[-1][1].created_at:
        previous, earlier = before[-1]
        found.append(
            f"line {number}: created_at: earlier than line {previous}'s "
            f"({earlier.created_at.isoformat()}); sort the file by time"
        )
    return found


def _stored(conn: Connection, ids: Sequence[str]) -> dict[str, Any]:
    """The stored rows among ``ids``, by id."""
    rows: dict[str, Any] = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        query = select(
            _MESSAGES.c.id, _MESSAGES.c.group_id, _MESSAGES.c.sender, _MESSAGES.c.text
        ).where(_MESSAGES.c.id.in_(chunk))
        rows.update({row.id: row for row in conn.execute(query)})
    return rows


def _conflicts(messages: Sequence[tuple[int, ChatMessage]], stored: dict[str, Any]) -> list[str]:
    problems = []
    for number, message in messages:
        row = stored.get(message.id)
        if row is None:
            continue
        if row.group_id != message.group:
            problems.append(
                f"line {number}: id: {message.id!r} is already a message of group {row.group_id!r}"
            )
        elif (row.sender, row.text) != (message.sender, message.text):
            problems.append(
                f"line {number}: id: {message.id!r} is already stored with another sender or text"
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


def _too_old(new: Sequence[tuple[int, ChatMessage]], newest: datetime | None) -> list[str]:
    if newest is None or not new or new[0][1].created_at >= newest:
        return []
    number, first = new[0]
    return [
        f"line {number}: created_at: {first.created_at.isoformat()} is older than the group's "
        f"newest message ({newest.isoformat()}); its history is kept in time order: import "
        "into a new group, or only messages from after that"
    ]


def _batches(items: Sequence[NewReply], size: int) -> Iterable[Sequence[NewReply]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def import_messages(
    store: HistoryStore,
    messages: Sequence[tuple[int, ChatMessage]],
    *,
    progress: Progress | None = None,
) -> ImportResult:
    """Store ``messages`` (from :func:`parse_lines`) not stored yet, in one transaction.

    Raises:
        ImportProblems: when an id belongs to another message or the new messages are older
            than the group's newest; nothing is written then.
    """
    group = messages[0][1].group
    with writing(store.engine) as conn:
        stored = _stored(conn, [m.id for _, m in messages])
        new = [(n, m) for n, m in messages if m.id not in stored]
        problems = _conflicts(messages, stored) + _too_old(new, _newest_at(conn, group))
        if problems:
            raise ImportProblems(problems)
        earlier = _count(conn, group) - (len(messages) - len(new))
        replies = [
            NewReply(message=m, meta={"imported": True, "line": n}, status=STATUS) for n, m in new
        ]
        seqs: list[int] = []
        for batch in _batches(replies, 1000):
            seqs.extend(s.seq for s in store.record_in(conn, batch))
            if progress is not None:
                progress(len(seqs), len(replies))
    return ImportResult(
        group=group,
        imported=len(new),
        already=len(messages) - len(new),
        first_at=messages[0][1].created_at,
        last_at=messages[-1][1].created_at,
        seqs=tuple(seqs),
        earlier=earlier,
    )
