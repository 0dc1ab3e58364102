"""Gathering an agent's layers for a turn: identity, the group's summary, MEMORY.md, the
personal logs, recalled memories and recent history, from files and stores.

Blocking I/O: call :meth:`Briefing.gather` from a thread. What is gathered is then fitted
into the agent's budget by :func:`orchestrator.core.context.build.build_context`.

A briefing is built by :class:`orchestrator.runtime.wiring.Wiring` (for the daemon and for
what previews a turn: ``arena context``, the console); the token factors learnt by earlier
runs are kept here (:func:`load_drift`, :func:`save_drift`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import operator
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Protocol, TypeVar

from orchestrator.core.context.build import Layers, PastMessage
from orchestrator.core.context.report import LeftOutCandidate
from orchestrator.core.context.tokens import DriftCorrector, TokenCounter
from orchestrator.core.kept import Bounded, Kept
from orchestrator.core.lore import LoreHit, match_lore
from orchestrator.core.lore import Said as LoreSaid
from orchestrator.core.models import AgentSpec, ChatMessage
from orchestrator.core.quick_init import quick_init
from orchestrator.files import TextFiles, write_atomic
from orchestrator.memory.conversation.store import StoredMessage
from orchestrator.memory.knowledge.lore import LoreShelf
from orchestrator.memory.knowledge.store import turn_scopes
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.recall.recaller import Recaller, RecallResult
from orchestrator.memory.summaries import summary_path
from orchestrator.runtime.team import Team
from orchestrator.runtime.tuning import Tuning
from orchestrator.settings import Settings

__all__ = ["Briefing", "Gathered", "RecentSource", "load_drift", "save_drift"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


INLINE_CPU_S = 0.002  # a reading that took less is done on the event loop next time
_GROUPS_TIMED = 8192
_PAST_KEPT = 32768

_SOURCE_RE = re.compile(r"\(source: ([a-z0-9][a-z0-9_-]{0,63})/[^()]*\)\s*$")


def _from_group(line: str) -> str | None:
    """The group a daily-log line came from, if it says.

    The log layer shows an agent only the lines written in the group it is answering: one
    group's decisions never reach another group's context through the raw logs. What an
    agent learns across groups reaches them through its distilled MEMORY.md.
    """
    match = _SOURCE_RE.search(line)
    return match.group(1) if match else None


class RecentSource(Protocol):
    """Where a group's recent messages come from (the history store, or its cache)."""

    def recent(self, group: str, limit: int) -> list[StoredMessage]:
        """The ``limit`` newest messages of ``group``, oldest first."""
        ...


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Gathered:
    """The layers of a turn, and what recall did."""

    layers: Layers
    recall: RecallResult | None


class Briefing:
    """Reads what an agent may see at its turn."""

    def __init__(
        self,
        *,
        tuning: Tuning,
        team: Team,
        data_dir: Path,
        store: RecentSource,
        personal: PersonalLog,
        recaller: Recaller | None,
        counter: TokenCounter,
        files: TextFiles | None = None,
        lore: LoreShelf | None = None,
        cpu_clock: Callable[[], float] = time.thread_time,
        on_loop: bool = False,
    ) -> None:
        self.files = files or TextFiles()  # MEMORY.md and the summary, read every turn
        self.tuning = tuning
        self.team = team
        self.data_dir = data_dir
        self.store = store
        self.personal = personal
        self.recaller = recaller
        self.counter = counter
        self.lore = lore
        self._past: Kept[StoredMessage, PastMessage] = Kept(_PAST_KEPT)
        self._histories: Bounded[str, tuple[list[StoredMessage], list[PastMessage]]] = Bounded(
            _GROUPS_TIMED
        )
        self._cpu: dict[str, float] = {}  # each group's last reading's CPU time, in s
        self._shown_logs: Bounded[tuple[str, tuple[str, ...]], str] = Bounded(_GROUPS_TIMED)
        self._summaries: Bounded[str, str] = Bounded(_GROUPS_TIMED)
        self._memory_mds: Bounded[str, tuple[Path, str]] = Bounded(_GROUPS_TIMED)
        self._days = [date.min, date.min]  # the days whose logs a turn shows: yesterday, today
        self.cpu_clock = cpu_clock  # the CPU time of the calling thread
        self.on_loop = on_loop  # every reading on the event loop (see for_turn)

    async def for_turn(self, agent: AgentSpec, trigger: ChatMessage, now: datetime) -> Gathered:
        """:meth:`gather` for a turn (the recalled memories recorded as used), on the event
        loop when the group's last reading took less than :data:`INLINE_CPU_S` of CPU
        (everything it reads was held in memory), else in a worker thread: a reading that
        waits for the database (a group's first turn, a full-text search of a long history)
        leaves the loop free for other groups meanwhile. With ``on_loop`` (SQLite, whose
        readers never wait for a writer: a reading is CPU and files in the page cache) every
        reading is done on the loop: handing one to a thread costs more than the reading, as
        the thread and the loop pass the interpreter's lock back and forth at each statement.
        """
        group = trigger.group
        if self.on_loop or self._cpu.get(group, INLINE_CPU_S) < INLINE_CPU_S:
            started = self.cpu_clock()
            gathered = self.gather(agent, trigger, now)
            self._took(group, self.cpu_clock() - started)
            recall, recaller = gathered.recall, self.recaller
            if recall is None or recaller is None or not recaller.marks_due(recall, now):
                return gathered
            if self.on_loop:
                await recaller.mark_used_soon(recall, now)
            else:
                await asyncio.to_thread(recaller.mark_used, recall, now)
            return gathered

        def timed() -> tuple[Gathered, float]:
            started = self.cpu_clock()
            gathered = self.gather(agent, trigger, now, mark_used=True)
            return gathered, self.cpu_clock() - started

        gathered, cpu = await asyncio.to_thread(timed)
        self._took(group, cpu)
        return gathered

    def _took(self, group: str, cpu: float) -> None:
        if len(self._cpu) >= _GROUPS_TIMED and group not in self._cpu:
            self._cpu.clear()
        self._cpu[group] = cpu

    def gather(
        self, agent: AgentSpec, trigger: ChatMessage, now: datetime, *, mark_used: bool = False
    ) -> Gathered:
        """Read every layer for ``agent``'s turn on ``trigger``.

        Only reads, unless ``mark_used``: then the recalled memories are recorded as used at
        ``now``, as they are when the turn is taken (a preview, such as ``arena context``,
        writes nothing).
        """
        folder = self.personal.workspace(agent.id)
        limit = self.tuning.history_limit
        recent = self.store.recent(trigger.group, limit)
        # Recall searches the messages older than those the history layer shows; when the
        # layer holds fewer than it may, it holds the whole group and there are none.
        older = len(recent) >= limit
        recall = self._recall(agent, trigger, now, recent[0].seq if older else None, older)
        if recall is not None and mark_used and self.recaller is not None:
            self.recaller.mark_used(recall, now)
        lore, lore_left = self._lore(agent, trigger, recent)
        layers = Layers(
            identity=self.team.identity(agent.id),
            summary=self.files.read(self._summary_of(trigger.group)),
            memory_md=self.files.read(self._memory_md(agent.id, folder)),
            logs=self._logs(agent.id, trigger.group, now),
            recalled=recall.snippets if recall else (),
            said=recall.messages if recall else (),
            history=self._history(trigger.group, recent),
            left_out=_joined(recall.dropped, lore_left) if recall else lore_left,
            knowledge=_joined(lore, recall.knowledge) if recall else lore,
        )
        return Gathered(layers=layers, recall=recall)

    def _lore(
        self, agent: AgentSpec, trigger: ChatMessage, recent: list[StoredMessage]
    ) -> tuple[tuple[LoreHit, ...], tuple[LeftOutCandidate, ...]]:
        """The lorebook entries the last messages bring in, and those that did not fit."""
        if self.lore is None:
            return (), ()
        entries = self.lore.for_scopes(turn_scopes(trigger.group, agent.id))
        if not entries:
            return (), ()
        said = [LoreSaid(sender=s.message.sender, text=s.message.text) for s in recent]
        if not recent or recent[-1].message.id != trigger.id:
            said.append(LoreSaid(sender=trigger.sender, text=trigger.text))
        budget = self.tuning.recall(agent).lore_tokens
        given, left = match_lore(entries, said, budget)
        return tuple(given), tuple(
            LeftOutCandidate(id=f"lore {entry.id}", layer="lore_budget", reason=reason)
            for entry, reason in left
        )

    def _summary_of(self, group: str) -> str:
        """Where ``group``'s summary is kept (made once per group: every turn reads it)."""
        path = self._summaries.get(group)
        if path is None:
            path = self._summaries.put(group, str(summary_path(self.data_dir, group)))
        return path

    def _memory_md(self, agent_id: str, workspace: Path) -> str:
        """The path of ``MEMORY.md`` in ``workspace``, ``agent_id``'s (made again only when
        the workspace is checked again)."""
        known = self._memory_mds.get(agent_id)
        if known is None or known[0] is not workspace:
            known = self._memory_mds.put(agent_id, (workspace, str(workspace / "MEMORY.md")))
        return known[1]

    def _logs(self, agent_id: str, group: str, now: datetime) -> str:
        today = now.astimezone(self.tuning.zone).date()
        days = self._days
        if days[-1] != today:
            days = self._days = [today - timedelta(days=1), today]
        parts = tuple(self.personal.read_days(agent_id, days))
        key = (group, parts)  # a file read again is the same text object while it is unchanged
        shown = self._shown_logs.get(key)
        if shown is None:
            lines = [
                line
                for part in parts
                for line in part.splitlines()
                if line.strip() and _from_group(line) in (None, group)
            ]
            shown = "\n".join(lines)
            self._shown_logs.put(key, shown)
        return shown

    def _history(self, group: str, stored: list[StoredMessage]) -> list[PastMessage]:
        # The same stored objects come back turn after turn from the cache of recent
        # messages: the group's last history is slid along (its messages that are still
        # there, then the new ones), and each one's PastMessage is kept by the object
        # (orchestrator.core.kept) for a group read again.
        last = self._histories.get(group)
        if last is not None and stored:
            before, made = last
            start = next((i for i, s in enumerate(before) if s is stored[0]), None)
            overlap = len(before) - (start or 0)
            if (
                start is not None
                and overlap <= len(stored)
                and all(map(operator.is_, before[start:], stored[:overlap]))
            ):
                history = made[start:] + [self._past_of(s) for s in stored[overlap:]]
                self._histories.put(group, (stored, history))
                return history
        history = [self._past_of(s) for s in stored]
        self._histories.put(group, (stored, history))
        return history

    def _past_of(self, stored: StoredMessage) -> PastMessage:
        past = self._past.find(stored, None)
        if past is None:
            tokens = stored.tokens
            if tokens is None:
                tokens = self.counter.count(stored.message.text)
            past = self._past.keep(stored, None, PastMessage(message=stored.message, tokens=tokens))
        return past

    def _recall(
        self,
        agent: AgentSpec,
        trigger: ChatMessage,
        now: datetime,
        before_seq: int | None,
        older: bool,
    ) -> RecallResult | None:
        config = self.tuning.recall(agent)
        if self.recaller is None or config.max_entries == 0:
            return None
        return self.recaller.recall(
            trigger.text,
            group=trigger.group,
            agent=agent.id,
            config=config,
            now=now,
            before_seq=before_seq,
            messages=older,
        )


def _joined(first: tuple[T, ...], then: tuple[T, ...]) -> tuple[T, ...]:
    """Both in order (most turns have one of them empty: no new tuple then)."""
    return first + then if first and then else first or then


def _drift_path(settings: Settings) -> Path:
    return settings.data_dir / "drift.json"


def load_drift(settings: Settings) -> DriftCorrector:
    """The per-model token correction factors learnt by earlier runs."""
    drift = DriftCorrector()
    try:
        drift.restore(json.loads(_drift_path(settings).read_text(encoding="utf-8")))
    except FileNotFoundError:
        pass
    except (ValueError, TypeError, AttributeError) as exc:
        logger.warning("ignoring unreadable %s: %s", _drift_path(settings), exc)
    return drift


def save_drift(settings: Settings, drift: DriftCorrector) -> None:
    """Keep the correction factors for the next run."""
    factors = drift.snapshot()
    if factors:
        write_atomic(_drift_path(settings), json.dumps(factors, indent=2) + "\n")
