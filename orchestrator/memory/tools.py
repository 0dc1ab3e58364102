"""The memory tools at work: :class:`MemoryTools` runs one checked call for one agent's turn.

``memory_search`` is the recall the context uses (the group's session memories and earlier
messages, the agent's personal memory; never another group's). ``memory_get`` reads one entry
(``m:<id>``) or message (``msg:<id>``) of the group. ``memory_store`` goes through the
writer, so through the same schema, gate, daily limit, dedupe and supersede-by-key as a
marker. ``memory_forget`` archives an entry the agent itself wrote, recorded in the audit.
``knowledge_search`` and ``knowledge_get`` read the knowledge sources the turn may see
(:mod:`orchestrator.memory.knowledge.tools`).

Text handed back is neutralised like references (no marker survives in it). A failure is a
one-line ``is_error`` result, never an exception. ``memory_store`` and ``memory_forget`` are
applied once per reply and input (:func:`write_key`: the reply's id, the tool and its input,
not the model's call id, which a replayed turn does not get again): the result is kept in
``memory_tool_calls``, and a turn replayed after a crash gets the kept result instead of
writing again. Blocking: call from a thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from orchestrator.core.markers import Marker, neutralise
from orchestrator.core.quick_init import quick_init
from orchestrator.core.tools import (
    BadCall,
    Forget,
    Get,
    KnowledgeGet,
    KnowledgeSearch,
    Search,
    Store,
    ToolCall,
    ToolResult,
    parse_call,
)
from orchestrator.errors import ValidationError
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.corrections import Corrections, marker_problem
from orchestrator.memory.knowledge.tools import KnowledgeTools
from orchestrator.memory.recall.ranking import trust_of
from orchestrator.memory.recall.recaller import Recaller
from orchestrator.memory.recall.values import RecallConfig
from orchestrator.memory.session.records import Citation, MemoryRecord
from orchestrator.memory.session.store import SessionMemory
from orchestrator.memory.tool_calls import APPLIED
from orchestrator.memory.writer import MemoryWriter, Origin

__all__ = ["MemoryTools", "ToolTurn"]

logger = logging.getLogger(__name__)

_SNIPPET_CHARS = 500


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolTurn:
    """The turn a call is made in: who, where, which reply, which tools and recall layers."""

    agent: str
    group: str
    reply_id: str
    trigger_id: str
    now: datetime
    allowed: tuple[str, ...]
    recall: RecallConfig


class _Refused(Exception):
    """A call that cannot be done, in one line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Parts:
    writer: MemoryWriter
    corrections: Corrections
    history: HistoryStore


class MemoryTools:
    """Runs the memory tools against the stores the context and the markers use."""

    def __init__(
        self,
        *,
        engine: Engine,
        session: SessionMemory,
        recaller: Recaller,
        writer: MemoryWriter,
        corrections: Corrections,
        history: HistoryStore,
        knowledge: KnowledgeTools | None = None,
    ) -> None:
        self.engine = engine
        self.session = session
        self.recaller = recaller
        self.knowledge = knowledge
        self._parts = _Parts(writer=writer, corrections=corrections, history=history)

    def run(self, call: ToolCall, turn: ToolTurn) -> ToolResult:
        """Run ``call``; whatever goes wrong comes back as an ``is_error`` result."""
        size = len(json.dumps(call.input, ensure_ascii=False, default=str))
        result = ToolResult(call_id=call.id, name=call.name, content="", input_chars=size)
        parsed = parse_call(call, turn.allowed)
        try:
            if isinstance(parsed, BadCall):
                raise _Refused(parsed.reason)
            if isinstance(parsed, Search):
                content, hits = self._search(parsed, turn)
                return replace(result, content=content, hits=hits)
            if isinstance(parsed, Get):
                return replace(result, content=self._get(parsed, turn))
            if isinstance(parsed, KnowledgeSearch | KnowledgeGet):
                return self._knowledge(parsed, turn, result)
            return self._once(call, parsed, turn, result)
        except (_Refused, ValidationError) as exc:
            return replace(result, content=_one_line(str(exc)), is_error=True)
        except Exception as exc:
            logger.exception("tool %s of %s failed", call.name, turn.agent)
            problem = f"internal error ({exc.__class__.__name__})"
            return replace(result, content=problem, is_error=True)

    def _search(self, search: Search, turn: ToolTurn) -> tuple[str, int]:
        config = replace(turn.recall, max_entries=search.limit)
        found = self.recaller.recall(
            search.query,
            group=turn.group,
            agent=turn.agent,
            config=config,
            now=turn.now,
            messages=search.scope != "personal",
        )
        lines: list[str] = []
        for s in found.snippets:
            personal = s.scope == "personal"
            if (search.scope == "personal" and not personal) or (
                search.scope == "group" and personal
            ):
                continue
            when = s.created_at.date().isoformat()
            cite = _cite(s.citation)
            lines.append(f"[m:{s.id}] ({s.type}, {s.trust}, {when}{cite}) {_clip(s.content)}")
        for m in found.messages:
            said = m.said
            if said.id in (turn.trigger_id, turn.reply_id):
                continue  # the question itself is no answer to it
            when = said.created_at.date().isoformat()
            lines.append(f"[msg:{said.id}] ({said.sender}, message, {when}) {_clip(said.text)}")
        lines = lines[: search.limit]
        if not lines:
            return "no results", 0
        return "\n".join(lines), len(lines)

    def _knowledge(
        self, call: KnowledgeSearch | KnowledgeGet, turn: ToolTurn, result: ToolResult
    ) -> ToolResult:
        if self.knowledge is None:
            raise _Refused("no knowledge sources here")
        if isinstance(call, KnowledgeGet):
            text = self.knowledge.get(call.locator, group=turn.group, agent=turn.agent)
            return replace(result, content=text)
        content, hits = self.knowledge.search(
            call.query, call.limit, group=turn.group, agent=turn.agent
        )
        return replace(result, content=content, hits=hits)

    def _get(self, get: Get, turn: ToolTurn) -> str:
        if get.id.startswith("msg:"):
            stored = self._parts.history.get(get.id[4:])
            if stored is None or stored.message.group != turn.group:
                raise _Refused(f"no message {get.id[:80]} in this group")
            m = stored.message
            when = m.created_at.isoformat()
            return f"[msg:{m.id}] {m.sender} ({m.kind.value}, {when}): {neutralise(m.text)}"
        record = self._visible(get.id, turn)
        return (
            f"[m:{record.id}] {record.type}, {trust_of(record)}, {record.status}, "
            f"{record.created_at.date().isoformat()}{_cite(record.citation)}: "
            f"{neutralise(record.content)}"
        )

    def _visible(self, entry: str, turn: ToolTurn) -> MemoryRecord:
        """The entry ``m:<id>`` if this turn's agent may see it (its group, its own, global)."""
        number = _entry_number(entry)
        record = self.session.get(number) if number is not None else None
        seen = record is not None and (
            (record.scope == "session" and record.scope_id == turn.group)
            or (record.scope == "personal" and record.scope_id == turn.agent)
            or record.scope == "global"
        )
        if record is None or not seen:
            raise _Refused(f"no entry {entry[:80]} in this group")
        return record

    def _once(
        self, call: ToolCall, parsed: Store | Forget, turn: ToolTurn, result: ToolResult
    ) -> ToolResult:
        """Apply a write once per reply and input: a replayed call gets the kept result."""
        key = write_key(turn.reply_id, call.name, call.input)
        with self.engine.connect() as conn:
            kept = conn.execute(select(APPLIED).where(APPLIED.c.call_id == key)).first()
        if kept is not None:
            return replace(result, content=kept.result, is_error=kept.is_error)
        try:
            content = self._store(parsed, turn) if isinstance(parsed, Store) else ""
            if isinstance(parsed, Forget):
                content = self._forget(parsed, turn)
            done = replace(result, content=content)
        except (_Refused, ValidationError) as exc:
            done = replace(result, content=_one_line(str(exc)), is_error=True)
        self._keep(call, turn, done)
        return done

    def _keep(self, call: ToolCall, turn: ToolTurn, done: ToolResult) -> None:
        row = {
            "call_id": write_key(turn.reply_id, call.name, call.input),
            "agent": turn.agent,
            "name": call.name,
            "input": json.dumps(call.input, ensure_ascii=False, default=str),
            "result": done.content,
            "is_error": done.is_error,
            "at": turn.now,
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(APPLIED).values(**row))
        except IntegrityError:
            logger.info("tool call %s (%s) was applied twice at once", call.id, call.name)

    def _store(self, store: Store, turn: ToolTurn) -> str:
        origin = Origin(
            agent=turn.agent,
            group=turn.group,
            reply_id=turn.reply_id,
            trigger_id=turn.trigger_id,
            now=turn.now,
        )
        if problem := marker_problem(store.content):
            raise _Refused(f"content: {problem}")  # as `arena memory edit` refuses it
        payload: dict[str, Any]
        if store.scope == "personal":  # parse_call let only personal types through
            payload = {"content": store.content, "type": store.type}
            marker = Marker(kind="personal", payload=payload)
        else:
            payload = {"type": store.type, "content": store.content}
            payload.update(confidence=store.confidence)
            if store.key:
                payload["key"] = store.key
            marker = Marker(kind="memory", payload=payload)
        report = self._parts.writer.apply([marker], origin)
        if report.rejected:
            rejected = report.rejected[0]
            detail = rejected.detail
            raise _Refused(f"rejected: {rejected.reason}" + (f" ({detail})" if detail else ""))
        saved = report.saved[0]
        if saved.id is None:
            return f"{saved.action} to your personal log"
        if saved.action == "superseded":  # the new entry, in place of the old one
            old = self.session.get(saved.id)
            replaced = f" (supersedes m:{old.supersedes})" if old and old.supersedes else ""
            return f"added m:{saved.id}{replaced}"
        return f"{saved.action} m:{saved.id}"

    def _forget(self, forget: Forget, turn: ToolTurn) -> str:
        record = self._visible(forget.id, turn)
        if record.agent != turn.agent or record.written_by != "agent":
            raise _Refused(f"{forget.id[:80]} was not written by you: only your entries")
        if record.status == "archived":
            return f"m:{record.id} is already archived"
        self._parts.corrections.forget(
            record.id, by=turn.agent, now=turn.now, reason=_one_line(forget.reason)
        )
        logger.info("%s forgot m:%d: %s", turn.agent, record.id, _one_line(forget.reason))
        return f"archived m:{record.id} (a person can restore it)"


def _entry_number(entry: str) -> int | None:
    """The number of an id ``m:<n>`` (None: not such an id, or too large to be stored)."""
    number = entry[2:] if entry.startswith("m:") else ""
    if not (number.isascii() and number.isdigit()) or len(number) > 18:
        return None  # 18 digits always fit SQLite's 64-bit integers
    return int(number)


def _cite(citation: Citation | None) -> str:
    return f", cites {citation.kind} {citation.ref}" if citation else ""


def _clip(text: str) -> str:
    flat = " ".join(neutralise(text).split())
    return flat if len(flat) <= _SNIPPET_CHARS else flat[: _SNIPPET_CHARS - 1] + "…"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def write_key(reply_id: str, name: str, arguments: Any) -> str:
    """What makes a store or forget the same call again: the reply it is made for (a replayed
    turn writes the same reply id), the tool and its input, whatever id the model gave it."""
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    digest = hashlib.sha256(f"{reply_id}\0{name}\0{canonical}".encode()).hexdigest()
    return f"w:{digest}"
