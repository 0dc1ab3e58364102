"""Bringing an existing conversation into a group (``arena import``).

The file is JSON Lines, one message per line::

    {"sender": "alice", "text": "Ship on Friday.", "created_at": "2024-03-01T09:15:00+01:00"}

``sender`` and ``text`` follow the wire's rules (:func:`orchestrator.core.wire.validate_sender`,
:func:`orchestrator.core.wire.validate_text`); ``created_at`` is ISO 8601, a time without an offset
being in ``ARENA_TZ``, and not later than now plus :data:`FUTURE_SKEW` (a clock a little
ahead of ours is believed; a date beyond it would sort the group's history after everything
said from then on). ``kind`` is optional: ``human`` (the default) or ``agent``, which only a
known agent's id may use as its sender. ``id`` is optional (a safe id, see :data:`ID_RE`).
Blank lines are skipped.

A message is stored under an id of its own, ``imp-`` and 32 hex digits: derived from the group
and the line's ``id`` (:func:`imported_id`; the line's id is kept in the row's meta as
``file_id``), or for a line without one from the group, sender, text, date and how many
identical messages came before in the file. So the same file imported again into the same
group adds nothing, and into another group gives that group messages of its own. A line whose
``id`` is the id of a message of the same group (as an earlier version stored a line's id as
it was) is that message.

Everything is checked before anything is written: each problem is named with its line and
field, and on any problem nothing is stored. ``created_at`` must not go back in time within
the file; :func:`orchestrator.memory.conversation.importing.import_messages` stores the
checked lines after the group's newest message.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.core.wire import validate_group, validate_person, validate_sender, validate_text
from orchestrator.errors import OrchestratorError, ValidationError

__all__ = [
    "FIELDS",
    "FUTURE_SKEW",
    "ID_RE",
    "ImportLine",
    "ImportProblems",
    "ImportSettings",
    "Progress",
    "imported_id",
    "parse_lines",
]

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,199}\Z")
FIELDS = ("sender", "text", "created_at", "id", "kind")
SHOWN_PROBLEMS = 20
FUTURE_SKEW = timedelta(seconds=60)  # how far ahead of ours the clock that wrote a file may be

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
    now: datetime  # no line may be dated later than this plus FUTURE_SKEW
    agents: frozenset[str] = frozenset()
    team: frozenset[str] = frozenset()  # every agent's id and name: no person's line's sender

    def __post_init__(self) -> None:
        if self.now.tzinfo is None:
            raise ValueError("now must be timezone-aware")


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportLine:
    """A checked line: the message as it is to be stored, and the id the line gave it."""

    number: int
    message: ChatMessage
    file_id: str | None = None

    @property
    def shown_id(self) -> str:
        """The id to name the line by: its own, else the derived one."""
        return self.file_id or self.message.id


def _created_at(value: Any, zone: tzinfo, now: datetime) -> datetime:
    if not isinstance(value, str):
        raise ValidationError("created_at", "not a string (an ISO 8601 date and time)")
    try:
        when = datetime.fromisoformat(value)
        when = (when if when.tzinfo else when.replace(tzinfo=zone)).astimezone(UTC)
    except ValueError:
        raise ValidationError("created_at", f"not an ISO 8601 date: {value[:40]!r}") from None
    except OverflowError:  # years 1 and 9999 at an offset from UTC
        raise ValidationError("created_at", f"out of range: {value[:40]!r}") from None
    if when > now + FUTURE_SKEW:
        raise ValidationError(
            "created_at",
            f"{when.isoformat()} is in the future (now is "
            f"{now.astimezone(UTC).isoformat(timespec='seconds')}; a clock at most "
            f"{FUTURE_SKEW.total_seconds():g} s ahead is allowed)",
        )
    return when


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


def _digest(key: list[Any]) -> str:
    text = json.dumps(key, ensure_ascii=False)
    return "imp-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _sender(data: dict[str, Any], team: frozenset[str]) -> str:
    """The line's sender: a person's line (kind ``human``) is refused under an agent's id or
    name or a reserved name, as a person's post is (:func:`validate_person`)."""
    sender = validate_sender(_string(data, "sender"))
    if data.get("kind") in (None, "human"):
        validate_person(sender, team)
    return sender


def _derived_id(group: str, sender: str, text: str, when: datetime, seen: int) -> str:
    """The same message at the same place of the same file gets the same id."""
    return _digest([group, sender, text, when.isoformat(), seen])


def imported_id(group: str, file_id: str) -> str:
    """The id under which a line with ``id`` ``file_id`` is stored in ``group``: the same in
    every import into that group, another in any other group (message ids are unique across
    groups: replies, memories and the console find a message by its id alone)."""
    return _digest([group, file_id])


@dataclass(slots=True)
class _Parser:
    """Checks lines one by one, keeping what identifies repeated messages and ids."""

    config: ImportSettings
    identical: Counter[tuple[str, str, datetime]]
    ids: dict[str, int]

    def line(self, number: int, data: dict[str, Any]) -> ImportLine:
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise ValidationError(unknown[0], f"unknown field (fields: {', '.join(FIELDS)})")
        sender = _sender(data, self.config.team)
        text = validate_text(_string(data, "text"), self.config.max_bytes)
        when = _created_at(data.get("created_at"), self.config.zone, self.config.now)
        kind = _kind(data.get("kind"), sender, self.config.agents)
        file_id = None
        if data.get("id") is None:
            seen = self.identical[(sender, text, when)]
            self.identical[(sender, text, when)] += 1
            message_id = _derived_id(self.config.group, sender, text, when, seen)
        else:
            file_id = _string(data, "id")
            if not ID_RE.match(file_id):
                raise ValidationError(
                    "id", f"{file_id[:40]!r} is not a safe id (letters, digits, _ . : @ -)"
                )
            message_id = imported_id(self.config.group, file_id)
        message = ChatMessage(
            id=message_id,
            group=self.config.group,
            sender=sender,
            kind=kind,
            text=text,
            created_at=when,
        )
        return ImportLine(number=number, message=message, file_id=file_id)


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
) -> list[ImportLine]:
    """Check every line of a JSON Lines file; its messages, in file order.

    Raises:
        ImportProblems: listing every problem as ``line N: field: problem``.
    """
    validate_group(config.group)
    data = data.removeprefix(codecs.BOM_UTF8)  # as some editors and exports start a file
    parser = _Parser(config=config, identical=Counter(), ids={})
    problems: list[str] = []
    checked: list[ImportLine] = []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if progress is not None and number % 1000 == 0:
            progress(number, len(lines))
        if not raw.strip():
            continue
        try:
            line = parser.line(number, _decode(number, raw))
        except ValidationError as exc:
            where = "" if exc.field == "line" else f"{exc.field}: "
            problems.append(f"line {number}: {where}{exc.problem}")
            continue
        problems.extend(_order_problems(line, parser.ids, checked))
        parser.ids.setdefault(line.message.id, number)
        checked.append(line)
    if progress is not None:
        progress(len(lines), len(lines))
    if not checked and not problems:
        problems.append("the file holds no messages")
    if problems:
        raise ImportProblems(problems)
    return checked


def _order_problems(
    line: ImportLine, ids: dict[str, int], before: Sequence[ImportLine]
) -> list[str]:
    found = []
    number, message = line.number, line.message
    if message.id in ids:
        found.append(
            f"line {number}: id: {line.shown_id!r} is already the id of line {ids[message.id]}"
        )
    if before and message.created_at < before[-1].message.created_at:
        previous = before[-1]
        found.append(
            f"line {number}: created_at: earlier than line {previous.number}'s "
            f"({previous.message.created_at.isoformat()}); sort the file by time"
        )
    return found
