"""People's corrections to session memory, from the CLI (``arena memory``) and the web: forget,
restore, edit (supersede), pin and unpin, each recorded in the audit
(:mod:`orchestrator.memory.audit`) in the same transaction as the change.

An edit is a new entry through the gate agents' markers pass (length, secrets, characters, no
memory markers; a person's edit has confidence 1 and no daily limit), linked to the old entry,
which is kept as ``superseded``. The new entry keeps the old one's scope, type, key, tags and
citation (why it is remembered), is written by ``"person"`` and counts as verified; a pin moves
with it. Everything here blocks: call it through ``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from orchestrator.core.markers import parse_markers
from orchestrator.core.validation import character_problem
from orchestrator.errors import ValidationError
from orchestrator.memory.audit import Action, MemoryAudit, MemoryChange, pinned_ids, set_pin
from orchestrator.memory.gate.rules import GateConfig, check
from orchestrator.memory.session.embeddings import Embedder, pack
from orchestrator.memory.session.entries import ENTRIES, db_time, to_record
from orchestrator.memory.session.records import MemoryRecord, NewMemory
from orchestrator.memory.session.writes import Retry, VectorCache, write_in
from orchestrator.memory.transactions import writing

__all__ = [
    "MAX_ACTOR_CHARS",
    "Corrections",
    "EditRefused",
    "Edited",
    "MemoryStateError",
    "UnknownMemory",
    "check_actor",
    "edit_problem",
    "marker_problem",
]

MAX_ACTOR_CHARS = 64
_T = ENTRIES
_RETRIES = 5


class UnknownMemory(ValidationError):
    """No memory has this id."""

    def __init__(self, entry_id: int) -> None:
        super().__init__("id", f"no memory with id {entry_id}")


class MemoryStateError(ValidationError):
    """The memory's status does not allow the change (e.g. editing a superseded entry)."""

    def __init__(self, entry_id: int, problem: str) -> None:
        super().__init__("id", f"memory {entry_id} {problem}")


class EditRefused(ValidationError):
    """The gate refused an edit's text; ``reason`` is the gate's."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__("content", reason)


@dataclass(frozen=True, slots=True, kw_only=True)
class Edited:
    """An edit: the old entry (now superseded) and the entry that replaced it."""

    old: MemoryRecord
    new: MemoryRecord


def check_actor(by: str) -> str:
    """``by`` stripped, if it can name who made a change.

    Raises:
        ValidationError: it is blank, too long or holds a forbidden character.
    """
    name = by.strip()
    problem = character_problem(name)
    if not name or len(name) > MAX_ACTOR_CHARS or "\n" in name or problem:
        raise ValidationError("by", f"a name of 1 to {MAX_ACTOR_CHARS} characters on one line")
    return name


def edit_problem(text: str, gate: GateConfig) -> str | None:
    """Why ``text`` may not replace a memory (the gate's reason), or None when it may."""
    rejection = check(text, 1.0, config=gate, written_today=0)
    if rejection is not None:
        return str(rejection)
    return marker_problem(text)


def marker_problem(text: str) -> str | None:
    """Why ``text`` may not be a memory's content for the markers it carries (None: none)."""
    parsed = parse_markers(text)
    found = len(parsed.markers) + len(parsed.invalid)
    if found:
        return f"markers: the text carries {found} memory marker{'s' if found > 1 else ''}"
    return None


class Corrections:
    """Forget, restore, edit, pin and unpin memories, each with its audit record.

    Args:
        engine: the database.
        gate: the limits an edit's text must meet.
        embedder: the session memory's embedder, if any (an edit's vector is stored).
    """

    def __init__(
        self, engine: Engine, *, gate: GateConfig, embedder: Embedder | None = None
    ) -> None:
        self.engine = engine
        self.gate = gate
        self.embedder = embedder
        self.audit = MemoryAudit(engine)

    def forget(
        self, entry_id: int, *, by: str, now: datetime, reason: str | None = None
    ) -> MemoryRecord:
        """Archive an active entry (reversible with :meth:`restore`); ``reason`` is recorded."""
        return self._status(entry_id, "forget", by, now, reason)

    def restore(self, entry_id: int, *, by: str, now: datetime) -> MemoryRecord:
        """Make an archived entry active again.

        Raises:
            MemoryStateError: it is not archived, or an active entry holds its content or key.
        """
        try:
            return self._status(entry_id, "restore", by, now)
        except IntegrityError as exc:
            raise MemoryStateError(
                entry_id, "cannot come back: an active entry has the same content or key"
            ) from exc

    def _status(
        self, entry_id: int, action: Action, by: str, now: datetime, reason: str | None = None
    ) -> MemoryRecord:
        wanted, allowed = ("archived", "active") if action == "forget" else ("active", "archived")
        with writing(self.engine) as conn:
            record = _get(conn, entry_id)
            if record.status == wanted:
                return record  # nothing to do, nothing to record
            if record.status != allowed:
                raise MemoryStateError(entry_id, f"is {record.status}{_successor(record)}")
            conn.execute(
                update(_T).where(_T.c.id == entry_id).values(status=wanted, updated_at=db_time(now))
            )
            self._record(conn, record, action, by, now, reason=reason)
            return _get(conn, entry_id)

    def pin(self, entry_id: int, *, by: str, now: datetime) -> MemoryRecord:
        """Pin an active entry: recall offers it in its scope whatever the query."""
        with writing(self.engine) as conn:
            record = _get(conn, entry_id)
            if record.status != "active":
                raise MemoryStateError(
                    entry_id, f"is {record.status}{_successor(record)}: only an active one"
                )
            if set_pin(conn, entry_id, by=check_actor(by), at=now):
                self._record(conn, record, "pin", by, now)
            return record

    def unpin(self, entry_id: int, *, by: str, now: datetime) -> MemoryRecord:
        """Unpin an entry (whatever its status)."""
        with writing(self.engine) as conn:
            record = _get(conn, entry_id)
            if set_pin(conn, entry_id, by=None, at=now):
                self._record(conn, record, "unpin", by, now)
            return record

    def get(self, entry_id: int) -> MemoryRecord:
        """The entry, whatever its status.

        Raises:
            UnknownMemory: no such entry.
        """
        with self.engine.connect() as conn:
            return _get(conn, entry_id)

    def is_pinned(self, entry_id: int) -> bool:
        """Whether the entry is pinned."""
        with self.engine.connect() as conn:
            return bool(pinned_ids(conn, [entry_id]))

    def edit(self, entry_id: int, text: str, *, by: str, now: datetime) -> Edited:
        """Replace an active entry's content with ``text``: a new entry, the old superseded.

        Raises:
            UnknownMemory: no such entry.
            MemoryStateError: the entry is not active.
            EditRefused: the gate refused ``text``.
        """
        content = text.strip()
        actor = check_actor(by)
        self.get(entry_id)  # an unknown id is said first, whatever the text
        problem = edit_problem(content, self.gate)
        if problem is not None:
            raise EditRefused(problem)
        vector = pack(self.embedder.embed([content])[0]) if self.embedder else None
        for _ in range(_RETRIES):
            try:
                with writing(self.engine) as conn:
                    return self._edit_in(conn, entry_id, content, vector, actor, now)
            except (IntegrityError, Retry):
                continue
        raise MemoryStateError(entry_id, "kept changing while it was edited; try again")

    def _edit_in(
        self,
        conn: Connection,
        entry_id: int,
        content: str,
        vector: bytes | None,
        by: str,
        now: datetime,
    ) -> Edited:
        old = _get(conn, entry_id)
        if old.status != "active":
            raise MemoryStateError(entry_id, f"is {old.status}{_successor(old)}: edit that one")
        if " ".join(content.split()) == " ".join(old.content.split()):
            raise EditRefused("the new text is the same as the old")
        done = conn.execute(
            update(_T)
            .where(_T.c.id == entry_id, _T.c.status == "active")
            .values(status="superseded", updated_at=db_time(now))
        )
        if done.rowcount != 1:
            raise Retry
        outcome = write_in(conn, _replacement(old, content, by, now), vector, VectorCache(""))
        new_id = outcome.record.id
        conn.execute(update(_T).where(_T.c.id == entry_id).values(superseded_by=new_id))
        if outcome.action == "added":
            conn.execute(update(_T).where(_T.c.id == new_id).values(supersedes=entry_id))
        if set_pin(conn, entry_id, by=None, at=now):
            set_pin(conn, new_id, by=by, at=now)
        self._record(conn, old, "edit", by, now, new=(new_id, content))
        return Edited(old=_get(conn, entry_id), new=_get(conn, new_id))

    def _record(
        self,
        conn: Connection,
        record: MemoryRecord,
        action: Action,
        by: str,
        now: datetime,
        *,
        new: tuple[int, str] | None = None,
        reason: str | None = None,
    ) -> None:
        self.audit.record_in(
            conn,
            MemoryChange(
                entry_id=record.id,
                action=action,
                actor=check_actor(by),
                at=now,
                old_content=record.content,
                new_content=new[1] if new else None,
                new_entry_id=new[0] if new else None,
                reason=reason,
            ),
        )


def _replacement(old: MemoryRecord, content: str, by: str, now: datetime) -> NewMemory:
    """The entry that replaces ``old``: its scope, type, key, tags and citation."""
    return NewMemory(
        scope=old.scope,  # type: ignore[arg-type]
        scope_id=old.scope_id,
        namespace=old.namespace,  # type: ignore[arg-type]
        type=old.type,
        content=content,
        now=now,
        key=old.key,
        confidence=1.0,
        tags=old.tags,
        task_id=old.task_id,
        agent=old.agent,
        group_id=old.group_id,
        source_message_id=old.source_message_id,
        citation=old.citation,
        written_by="person",
        verified=True,
        extra={"edited_from": old.id, "edited_by": by},
    )


def _get(conn: Connection, entry_id: int) -> MemoryRecord:
    row = conn.execute(select(_T).where(_T.c.id == entry_id)).mappings().first()
    if row is None:
        raise UnknownMemory(entry_id)
    return to_record(row)


def _successor(record: MemoryRecord) -> str:
    return f" (superseded by {record.superseded_by})" if record.superseded_by else ""
