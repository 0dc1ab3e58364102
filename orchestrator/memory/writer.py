"""The write path: an agent's markers → schema → gate → session memory or personal log.

Only markers parsed from an agent's own reply in its own turn come here; everything that
cannot be stored is reported with its reason, never raised.

What a reply keeps of its markers (:func:`marker_meta`) never holds anything the gate refused:
a marker that could not be read or was refused is kept as its kind, reason, length and a short
hash of its text (:func:`orchestrator.core.markers.fingerprint`), and only the payloads of
stored markers are kept. Each list keeps at most :data:`MAX_ENTRIES` entries and all of them
together at most :data:`MAX_META_BYTES` bytes of JSON; ``truncated`` counts what was left out.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, time
from time import monotonic
from typing import Any, Protocol, TypeVar
from zoneinfo import ZoneInfo

from orchestrator.core.kept import Bounded
from orchestrator.core.markers import InvalidMarker, Marker
from orchestrator.memory.conversation.marker_entries import (
    Rejected,
    Saved,
    StoredMarker,
    UnreadableMarker,
)
from orchestrator.memory.conversation.meta import MarkerMeta
from orchestrator.memory.gate.rules import GateConfig, check
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import (
    MarkerSchemaError,
    PersonalDraft,
    validate_memory,
    validate_personal,
)
from orchestrator.memory.session.records import Citation, NewMemory, WriteOutcome
from orchestrator.memory.session.store import SessionMemory

__all__ = [
    "MAX_ENTRIES",
    "MAX_META_BYTES",
    "Applied",
    "Checkpoint",
    "MemoryWriter",
    "Origin",
    "WriteReport",
    "WriteResult",
    "marker_meta",
]

logger = logging.getLogger(__name__)

CHECKPOINT_TYPES = ("decision", "task")
MAX_ENTRIES = 20
"""At most this many entries of each list a reply keeps about its markers."""
MAX_META_BYTES = 16 * 1024
RECOUNT_S = 60.0  # how long a day's count of an agent's additions in a group is trusted
_DAYS_KEPT = 8192
"""At most this many bytes of JSON for all of those lists together."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    """Where markers came from: the reply that carried them and the message it answered."""

    agent: str
    group: str
    reply_id: str
    trigger_id: str
    now: datetime


WriteResult = Saved | Rejected
"""What became of one marker."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """A decision or task added, to be noted in the deciding agent's daily log."""

    agent: str
    draft: PersonalDraft
    source: str
    now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class _Ready:
    """A memory marker's entry, past the gate; its day's key and additions then."""

    new: NewMemory
    day: tuple[str, str, datetime]
    written: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteReport:
    """What became of each marker: ``saved`` and ``rejected`` entries, and the markers stored.

    Unbounded: what a reply keeps of it is :func:`marker_meta`.
    """

    saved: tuple[Saved, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    stored: tuple[Marker, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Applied:
    """What :meth:`MemoryWriter.apply_now` did: the report, and the checkpoints to note."""

    report: WriteReport
    checkpoints: tuple[Checkpoint, ...] = ()


def marker_meta(invalid: Sequence[InvalidMarker], report: WriteReport | None) -> MarkerMeta:
    """What a reply keeps of its markers, within :data:`MAX_ENTRIES` and :data:`MAX_META_BYTES`.

    Args:
        invalid: the markers that could not be read.
        report: what the writer did with the others; ``None`` if nothing was written (no
            markers, or no memory), in which case no payload is kept.

    Returns:
        ``markers`` (kind and payload of each stored marker), ``invalid_markers`` (kind, reason,
        length and ``sha256``, the hash's first 12 hex digits), with a report its ``saved`` and
        ``rejected`` entries, and ``truncated`` (entries left out, per list).
    """
    room = _Room()
    # The lists get the room in this order: what happened first, the payloads last.
    saved = room.fit("saved", report.saved if report is not None else ())
    rejected = room.fit("rejected", report.rejected if report is not None else ())
    unreadable = room.fit(
        "invalid_markers",
        [
            UnreadableMarker(kind=m.kind, reason=m.reason, length=m.length, sha256=m.digest)
            for m in invalid
        ],
    )
    stored = room.fit(
        "markers",
        [StoredMarker(kind=m.kind, payload=m.payload) for m in report.stored]
        if report is not None
        else [],
    )
    return MarkerMeta(
        markers=stored,
        invalid_markers=unreadable,
        saved=saved if report is not None else None,
        rejected=rejected,
        truncated=room.truncated,
    )


class _Stored(Protocol):
    def as_json(self) -> dict[str, Any]: ...


_E = TypeVar("_E", bound=_Stored)


@dataclass(slots=True)
class _Room:
    """The bytes of :data:`MAX_META_BYTES` not taken yet, and the entries each list left out
    (in the order the lists were fitted)."""

    left: int = MAX_META_BYTES
    truncated: dict[str, int] = field(default_factory=dict)

    def fit(self, name: str, entries: Sequence[_E]) -> tuple[_E, ...]:
        """Keep the list's first entries while they fit; count the rest."""
        kept: list[_E] = []
        for entry in entries:
            size = len(json.dumps(entry.as_json(), ensure_ascii=False).encode("utf-8")) + 2
            if len(kept) >= MAX_ENTRIES or size > self.left:
                break
            kept.append(entry)
            self.left -= size
        if len(kept) < len(entries):
            self.truncated[name] = len(entries) - len(kept)
        return tuple(kept)


class MemoryWriter:
    """Validates markers and stores what passes. Blocking: call from a thread (but
    :meth:`apply_now`, made for the event loop).

    The daily limit counts what an agent added in a group today: read from the database at
    most every :data:`RECOUNT_S` per agent and group, this writer's own additions counted as
    it makes them (another process's, at the next reading).
    """

    def __init__(
        self,
        session: SessionMemory,
        personal: PersonalLog,
        gate: GateConfig,
        tz: ZoneInfo,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self.session = session
        self.personal = personal
        self.gate = gate
        self.tz = tz
        self.clock = clock
        self._written: Bounded[tuple[str, str, datetime], tuple[int, float]] = Bounded(_DAYS_KEPT)
        self._counting = threading.Lock()

    def apply(self, markers: Sequence[Marker], origin: Origin) -> WriteReport:
        """Store every acceptable marker; report the rest with their reasons."""
        results: list[WriteResult] = []
        for marker in markers:
            result: WriteResult
            try:
                if marker.kind == "memory":
                    result = self._memory(marker.payload, origin)
                else:
                    result = self._personal(marker.payload, origin)
            except MarkerSchemaError as exc:
                result = Rejected(kind=marker.kind, reason="schema", detail=exc.problem)
            results.append(result)
        return self._report(markers, results, origin)

    def apply_now(self, markers: Sequence[Marker], origin: Origin) -> Applied | None:
        """:meth:`apply` on the calling thread, for the event loop, when that waits for
        nothing: a reply with one memory marker, whose entry the database takes at once
        (:meth:`SessionMemory.write_now`). Else None, with nothing stored: then :meth:`apply`,
        in a thread. A decision or task added is noted in the agent's log by
        :meth:`note_checkpoints` (a file written and synced: in a thread)."""
        if len(markers) != 1 or markers[0].kind != "memory":
            return None
        try:
            ready = self._ready(markers[0].payload, origin)
        except MarkerSchemaError:
            return None  # reported by apply()
        if isinstance(ready, Rejected):
            return Applied(report=self._report(markers, [ready], origin))
        outcome = self.session.write_now(ready.new)
        if outcome is None:
            return None
        saved, checkpoint = self._saved(ready, outcome, origin)
        checkpoints = () if checkpoint is None else (checkpoint,)
        return Applied(report=self._report(markers, [saved], origin), checkpoints=checkpoints)

    def note_checkpoints(self, checkpoints: Sequence[Checkpoint]) -> None:
        """Note each decision or task added in the deciding agent's log (see
        :meth:`apply_now`)."""
        for checkpoint in checkpoints:
            self.personal.append(
                checkpoint.agent, checkpoint.draft, source=checkpoint.source, now=checkpoint.now
            )

    def _report(
        self, markers: Sequence[Marker], results: Sequence[WriteResult], origin: Origin
    ) -> WriteReport:
        saved: list[Saved] = []
        rejected: list[Rejected] = []
        stored: list[Marker] = []
        for marker, result in zip(markers, results, strict=True):
            if isinstance(result, Rejected):
                # Never the content: what was refused may be a secret, or megabytes.
                rejected.append(replace(result, length=marker.length, sha256=marker.digest))
            else:
                saved.append(result)
                stored.append(marker)
        if rejected:
            logger.info(
                "reply %s: %d memory markers rejected (%s)",
                origin.reply_id,
                len(rejected),
                ", ".join(r.reason for r in rejected),
            )
        return WriteReport(saved=tuple(saved), rejected=tuple(rejected), stored=tuple(stored))

    def _start_of_day(self, now: datetime) -> datetime:
        local = now.astimezone(self.tz)
        return datetime.combine(local.date(), time(0), tzinfo=self.tz)

    def _memory(self, payload: dict[str, Any], origin: Origin) -> WriteResult:
        ready = self._ready(payload, origin)
        if isinstance(ready, Rejected):
            return ready
        saved, checkpoint = self._saved(ready, self.session.write(ready.new), origin)
        if checkpoint is not None:
            self.note_checkpoints([checkpoint])
        return saved

    def _ready(self, payload: dict[str, Any], origin: Origin) -> _Ready | Rejected:
        """The entry a memory marker asks for, or why the gate refuses it.

        Raises:
            MarkerSchemaError: the payload is not a memory marker's.
        """
        draft = validate_memory(payload)
        day = (origin.agent, origin.group, self._start_of_day(origin.now))
        written = self._written_on(day)
        rejection = check(draft.content, draft.confidence, config=self.gate, written_today=written)
        if rejection is not None:
            return Rejected(kind="memory", reason=rejection.reason, detail=rejection.detail)
        new = NewMemory(
            scope="session",
            scope_id=origin.group,
            type=draft.type,
            content=draft.content,
            key=draft.key,
            confidence=draft.confidence,
            tags=draft.tags,
            task_id=draft.task_id,
            agent=origin.agent,
            group_id=origin.group,
            source_message_id=origin.reply_id,
            citation=Citation(
                kind="message",
                ref=origin.reply_id,
                locator=f"groups/{origin.group}/messages/{origin.reply_id}",
                scope="session",
            ),
            written_by="agent",
            extra={"trigger": origin.trigger_id},
            now=origin.now,
        )
        return _Ready(new=new, day=day, written=written)

    def _saved(
        self, ready: _Ready, outcome: WriteOutcome, origin: Origin
    ) -> tuple[Saved, Checkpoint | None]:
        """What a stored entry reports, counted in the day's additions; the note a decision
        or task added leaves in the deciding agent's log."""
        new = ready.new
        checkpoint = None
        if outcome.action != "reinforced":  # a row added
            with self._counting:
                count, read_at = self._written.get(ready.day) or (ready.written, self.clock())
                self._written.put(ready.day, (count + 1, read_at))
            if new.type in CHECKPOINT_TYPES:
                # The deciding agent's evening heartbeat sees its decisions and tasks.
                checkpoint = Checkpoint(
                    agent=origin.agent,
                    draft=PersonalDraft(content=f"{new.type}: {new.content}", type="note"),
                    source=f"{origin.group}/{origin.reply_id}",
                    now=origin.now,
                )
        saved = Saved(kind="memory", action=outcome.action, id=outcome.record.id, type=new.type)
        return saved, checkpoint

    def _written_on(self, day: tuple[str, str, datetime]) -> int:
        """How many entries the agent added in the group from the start of the day on."""
        now = self.clock()
        with self._counting:
            known = self._written.get(day)
            if known is not None and now - known[1] < RECOUNT_S:
                return known[0]
        count = self.session.count_written_since(*day)
        with self._counting:
            self._written.put(day, (count, now))
        return count

    def _personal(self, payload: dict[str, Any], origin: Origin) -> WriteResult:
        draft = validate_personal(payload)
        rejection = check(draft.content, 1.0, config=self.gate, written_today=0)
        if rejection is not None:
            return Rejected(kind="personal", reason=rejection.reason, detail=rejection.detail)
        path = self.personal.append(
            origin.agent, draft, source=f"{origin.group}/{origin.reply_id}", now=origin.now
        )
        return Saved(kind="personal", action="appended", file=path.name, type=draft.type)
