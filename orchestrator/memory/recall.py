"""Recall: the memories and earlier messages worth putting in front of an agent, and why the
others were left out.

A query is reduced to its content words (:func:`orchestrator.memory.fts.query_terms`) and
searched in the group's session memory, the agent's personal memory and global memory, and in
the group's messages older than those the history layer shows; never in another group's.
Candidates come from the full-text indexes, and also from embeddings when an embedder is
available; :mod:`orchestrator.memory.ranking` scores them. Then come the layers, each
configurable and each recording what it drops: relevance floor, untrusted filter,
require-source, ranking (memories and messages together), repeats (a message whose words are
mostly those of one recalled already, such as a reply quoting it), max entries and char
budget. A
short message that answers another sender's question comes with that question: the last one
the message before it asks, cut to :data:`QUESTION_MAX_CHARS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from orchestrator.core import cues
from orchestrator.errors import ValidationError
from orchestrator.memory import fts
from orchestrator.memory.conversation.index import HistoryIndex, Said
from orchestrator.memory.embeddings import Embedder
from orchestrator.memory.ranking import (
    AUTHOR_BONUS,
    Trust,
    adjusted_confidence,
    authors_of,
    final_score,
    fuse,
    message_score,
    message_similarities,
    repeats,
    text_relevance,
    text_similarities,
    trust_of,
    untrusted_reason,
)
from orchestrator.memory.records import Citation, MemoryRecord
from orchestrator.memory.session import SessionMemory, TextHit

__all__ = [
    "Dropped",
    "RecallConfig",
    "RecallResult",
    "RecalledMessage",
    "Recaller",
    "Snippet",
    "Trust",
    "text_relevance",
]

Layer = Literal[
    "relevance_floor", "untrusted", "require_source", "repeat", "max_entries", "char_budget"
]

# A short recalled message (at most SHORT_ANSWER_CHARS) that answers another sender's question
# is shown with that question (the last one the message before it asks), cut to
# QUESTION_MAX_CHARS: "yes, four years" means nothing without it, while a longer message
# usually says what it is about.
SHORT_ANSWER_CHARS = 160
QUESTION_MAX_CHARS = 120


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallConfig:
    """The layers of recall, per agent. ``candidates`` is how many entries each search
    returns before the layers."""

    relevance_floor: float = 0.4
    max_entries: int = 5
    char_budget: int = 2000
    require_source: bool = False
    exclude_untrusted: bool = True
    candidates: int = 50

    def __post_init__(self) -> None:
        if not 0.0 <= self.relevance_floor <= 1.0:
            raise ValidationError("relevance_floor", "must be within 0..1")
        if self.max_entries < 0 or self.char_budget < 0 or self.candidates < 1:
            raise ValidationError("recall", "max_entries, char_budget and candidates are >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class Snippet:
    """A recalled memory: ``score`` is the final rank, ``similarity`` the relevance (0..1)
    and ``confidence`` the adjusted confidence that went into the score."""

    id: int
    content: str
    type: str
    score: float
    similarity: float
    confidence: float
    trust: Trust
    citation: Citation | None
    created_at: datetime
    scope: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Dropped:
    """A candidate a layer left out, and why: a memory (its id) or a message (its id)."""

    id: int | str
    layer: Layer
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallResult:
    """What recall returned, best first, and what it dropped on the way."""

    snippets: tuple[Snippet, ...] = ()
    messages: tuple[RecalledMessage, ...] = ()
    dropped: tuple[Dropped, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RecalledMessage:
    """An earlier message of the group and, when it answers another sender's question, the
    message before it (``previous``) and that question (``question``: a question and its
    answer belong together)."""

    said: Said
    previous: Said | None
    question: str = ""
    score: float
    similarity: float


@dataclass(frozen=True, slots=True, kw_only=True)
class _Ranked:
    """A candidate past the filters: a memory or a message, with its final score."""

    score: float
    similarity: float
    order: int  # ties: the newer first
    item: MemoryRecord | Said


@dataclass(slots=True, kw_only=True)
class _Fit:
    """The entries and characters taken so far, against ``max_entries`` and ``char_budget``."""

    config: RecallConfig
    dropped: list[Dropped]
    entries: int = 0
    used: int = 0
    shown: set[str] = field(default_factory=set)
    before: dict[int, Said] = field(default_factory=dict)  # the message before a hit, by seq
    taken: list[Said] = field(default_factory=list)  # the messages recalled so far

    def fits(self, size: int) -> bool:
        return self.used + size <= self.config.char_budget

    def take(self, item_id: int | str, size: int) -> bool:
        """Count the candidate in, or record why it is left out."""
        config = self.config
        if self.entries >= config.max_entries:
            reason = f"rank {self.entries + 1} is past the limit of {config.max_entries} entries"
            self.dropped.append(Dropped(id=item_id, layer="max_entries", reason=reason))
            return False
        if not self.fits(size):
            reason = (
                f"{size} characters do not fit in the "
                f"{config.char_budget - self.used} left of {config.char_budget}"
            )
            self.dropped.append(Dropped(id=item_id, layer="char_budget", reason=reason))
            return False
        self.entries += 1
        self.used += size
        return True


class Recaller:
    """Finds the memories for one agent's turn in one group. Blocking: call from a thread.

    Args:
        memory: The session memory store.
        embedder: Embeds queries; defaults to the store's own embedder. Without one, recall
            uses the full-text index alone.
        history: The index of the groups' messages; without it, only memories are recalled.
    """

    def __init__(
        self,
        memory: SessionMemory,
        embedder: Embedder | None = None,
        *,
        history: HistoryIndex | None = None,
    ) -> None:
        self.memory = memory
        self.embedder = embedder if embedder is not None else memory.embedder
        self.history = history

    def recall(
        self,
        query: str,
        *,
        group: str,
        agent: str,
        config: RecallConfig,
        now: datetime,
        before_seq: int | None = None,
        messages: bool = True,
    ) -> RecallResult:
        """The best memories and earlier messages for ``query``, after every layer. Only
        reads: a turn that shows them to an agent records that with :meth:`mark_used` (a
        preview must not).

        Args:
            query: What the agent is asked (a message, or a question).
            group: The group of the turn; only its session memory and its messages are
                searched.
            agent: The agent whose personal memory is searched.
            config: The layers' settings.
            now: The current time, for recency.
            before_seq: Only messages stored before this one are searched: the history layer
                shows the newer ones (None: every message of the group).
            messages: False when the caller knows that no such message exists (the history
                layer holds the whole group): the messages are not searched.
        """
        scopes = [("session", group), ("personal", agent), ("global", "")]
        dropped: list[Dropped] = []
        ranked: list[_Ranked] = self._memories(query, scopes, config, now, dropped)
        if messages:
            ranked += self._messages(query, group, before_seq, config, dropped)
        ranked.sort(key=lambda item: (-item.score, item.order))
        return self._fit(ranked, group, config, now, dropped)

    def _memories(
        self,
        query: str,
        scopes: Sequence[tuple[str, str]],
        config: RecallConfig,
        now: datetime,
        dropped: list[Dropped],
    ) -> list[_Ranked]:
        """The memories past the floor and the filters, with their final score."""
        candidates = self._candidates(query, scopes, config.candidates)
        # Only what passes the relevance floor is read in full (text hits come light).
        full = self.memory.records(
            c.id
            for c, sim in candidates
            if isinstance(c, TextHit) and _below_floor(sim, config) is None
        )
        kept: list[_Ranked] = []
        for candidate, similarity in candidates:
            record = candidate if isinstance(candidate, MemoryRecord) else full.get(candidate.id)
            verdict = (
                _below_floor(similarity, config)
                if record is None
                else self._filter(record, similarity, config)
            )
            if verdict is not None:
                dropped.append(Dropped(id=candidate.id, layer=verdict[0], reason=verdict[1]))
            elif record is not None and record.status == "active":
                score = final_score(similarity, record, now)
                kept.append(
                    _Ranked(score=score, similarity=similarity, order=-record.id, item=record)
                )
        return kept

    def _messages(
        self,
        query: str,
        group: str,
        before_seq: int | None,
        config: RecallConfig,
        dropped: list[Dropped],
    ) -> list[_Ranked]:
        """The group's earlier messages past the floor, with their final score."""
        if self.history is None:
            return []
        terms = fts.query_terms(query)
        hits = self.history.search(
            terms, group=group, before_seq=before_seq, limit=config.candidates
        )
        stemmed = [(term, fts.stem(term)) for term in terms]
        kept: list[_Ranked] = []
        for (said, _), similarity in zip(hits, message_similarities(stemmed, hits), strict=True):
            if (verdict := _below_floor(similarity, config)) is not None:
                dropped.append(Dropped(id=said.id, layer=verdict[0], reason=verdict[1]))
                continue
            score = message_score(similarity, said.kind)
            kept.append(_Ranked(score=score, similarity=similarity, order=-said.seq, item=said))
        return kept

    def _fit(
        self,
        ranked: Sequence[_Ranked],
        group: str,
        config: RecallConfig,
        now: datetime,
        dropped: list[Dropped],
    ) -> RecallResult:
        """The best candidates within ``max_entries`` and ``char_budget``."""
        fit = _Fit(config=config, dropped=dropped)
        fit.before = self._previous_of(ranked, group, config)
        asked = {c.item.id: _asked(c.item, fit.before) for c in ranked if isinstance(c.item, Said)}
        # A question quoted whole with its answer is not shown again on its own.
        fit.shown.update(p.id for p, q in asked.values() if p and q == " ".join(p.text.split()))
        snippets: list[Snippet] = []
        messages: list[RecalledMessage] = []
        for candidate in ranked:
            item = candidate.item
            if isinstance(item, MemoryRecord):
                if fit.take(item.id, len(item.content)):
                    snippets.append(_snippet(item, candidate.score, candidate.similarity, now))
            elif item.id not in fit.shown:
                found = _take_message(candidate, item, asked[item.id], fit)
                messages += [found] if found else []
        return RecallResult(
            snippets=tuple(snippets), messages=tuple(messages), dropped=tuple(dropped)
        )

    def _previous_of(
        self, ranked: Sequence[_Ranked], group: str, config: RecallConfig
    ) -> dict[int, Said]:
        """The message before each message that may be shown (read in one go)."""
        if self.history is None:
            return {}
        seqs = [c.item.seq for c in ranked[: config.max_entries + 5] if isinstance(c.item, Said)]
        return self.history.previous(group, seqs)

    def mark_used(self, result: RecallResult, now: datetime) -> None:
        """Record that ``result``'s memories were shown to an agent at ``now``."""
        self.memory.mark_used([s.id for s in result.snippets], now)

    @staticmethod
    def _filter(
        record: MemoryRecord, similarity: float, config: RecallConfig
    ) -> tuple[Layer, str] | None:
        if (verdict := _below_floor(similarity, config)) is not None:
            return verdict
        if config.exclude_untrusted and (why := untrusted_reason(record)) is not None:
            return "untrusted", why
        if config.require_source and not record.source_message_id:
            return "require_source", "no source message"
        return None

    def _candidates(
        self, query: str, scopes: Sequence[tuple[str, str]], limit: int
    ) -> list[tuple[MemoryRecord | TextHit, float]]:
        """Every candidate with its fused similarity in 0..1, best first."""
        terms = fts.query_terms(query)
        stemmed = [(term, fts.stem(term)) for term in terms]
        records: dict[int, MemoryRecord | TextHit] = {}
        text_hits = self.memory.search_hits(query, scopes=scopes, limit=limit)
        text_sim: dict[int, float] = {}
        for hit, similarity in zip(text_hits, text_similarities(stemmed, text_hits), strict=True):
            records[hit.id] = hit
            text_sim[hit.id] = similarity
        vector_sim: dict[int, float] = {}
        if self.embedder is not None:
            vector = self.embedder.embed([query])[0]
            for record, cosine in self.memory.search_similar(vector, scopes=scopes, limit=limit):
                records[record.id] = record
                vector_sim[record.id] = max(0.0, min(1.0, cosine))
        named = set(terms)
        fused: dict[int, float] = {}
        for entry_id, candidate in records.items():
            value = text_sim.get(entry_id, 0.0)
            if self.embedder is not None:
                value = fuse(value, vector_sim.get(entry_id, 0.0))
            if named & authors_of(candidate):
                value += AUTHOR_BONUS
            fused[entry_id] = value
        top = max(fused.values(), default=1.0)
        scale = 1.0 / top if top > 1.0 else 1.0
        order = sorted(fused, key=lambda i: (-fused[i], -i))
        return [(records[i], fused[i] * scale) for i in order]


def _asked(said: Said, before: Mapping[int, Said]) -> tuple[Said | None, str]:
    """The message before ``said`` and the question it asks, when ``said`` is short and that
    message is another sender's and asks one; else ``(None, "")``."""
    previous = before.get(said.seq)
    if previous is None or previous.sender == said.sender or len(said.text) > SHORT_ANSWER_CHARS:
        return None, ""
    question = cues.question_of(previous.text, QUESTION_MAX_CHARS)
    return (previous, question) if question else (None, "")


def _repeat(said: Said, fit: _Fit) -> str | None:
    """Why ``said`` adds nothing: it repeats a message recalled already."""
    repeated = next((m for m in fit.taken if repeats(said.text, m.text)), None)
    return None if repeated is None else f"repeats message {repeated.id}, recalled already"


def _take_message(
    candidate: _Ranked, said: Said, asked: tuple[Said | None, str], fit: _Fit
) -> RecalledMessage | None:
    """``said`` as recalled, with the question it answers when that fits too, or None when
    it does not fit or repeats a message taken already."""
    if (why := _repeat(said, fit)) is not None:
        fit.dropped.append(Dropped(id=said.id, layer="repeat", reason=why))
        return None
    previous, question = asked
    if question and not fit.fits(len(said.text) + len(question)):
        previous, question = None, ""
    if not fit.take(said.id, len(said.text) + len(question)):
        return None
    fit.shown.add(said.id)
    fit.taken.append(said)
    return RecalledMessage(
        said=said,
        previous=previous,
        question=question,
        score=round(candidate.score, 4),
        similarity=round(candidate.similarity, 4),
    )


def _below_floor(similarity: float, config: RecallConfig) -> tuple[Layer, str] | None:
    if similarity < config.relevance_floor:
        floor = config.relevance_floor
        return "relevance_floor", f"similarity {similarity:.2f} is below {floor:.2f}"
    return None


def _snippet(record: MemoryRecord, score: float, similarity: float, now: datetime) -> Snippet:
    return Snippet(
        id=record.id,
        content=record.content,
        type=record.type,
        score=round(score, 4),
        similarity=round(similarity, 4),
        confidence=round(adjusted_confidence(record, now), 4),
        trust=trust_of(record),
        citation=record.citation,
        created_at=record.created_at,
        scope=record.scope,
    )
