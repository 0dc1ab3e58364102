"""Recall: the memories and earlier messages worth putting in front of an agent, and why the
others were left out.

A query is reduced to its content words (:func:`orchestrator.memory.session.fts.query_terms`) and
searched in the group's session memory, the agent's personal memory and global memory, and in
the group's messages older than those the history layer shows; never in another group's.
Candidates come from the full-text indexes, and also from embeddings when an embedder is
available; :mod:`orchestrator.memory.recall.ranking` scores them. Then come the layers, each
configurable and each recording what it drops: relevance floor, untrusted filter,
require-source, ranking (memories and messages together), repeats (a message whose words are
mostly those of one recalled already, such as a reply quoting it), max entries and char
budget; the last three, and a short answer shown with the question it answers, are
:mod:`orchestrator.memory.recall.fit`. The values recall takes and returns are
:mod:`orchestrator.memory.recall.values`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from orchestrator.memory.conversation.index import HistoryIndex, Said
from orchestrator.memory.knowledge.store import KnowledgeStore
from orchestrator.memory.knowledge.vectors import ChunkVectors
from orchestrator.memory.recall.fit import Ranked, fit
from orchestrator.memory.recall.passages import find_passages
from orchestrator.memory.recall.ranking import (
    AUTHOR_BONUS,
    Trust,
    adjusted_confidence,
    authors_of,
    fuse,
    message_score,
    message_similarities,
    score_of,
    text_relevance,
    text_similarities,
    untrusted_reason,
)
from orchestrator.memory.recall.values import (
    Dropped,
    Layer,
    Passage,
    RecallConfig,
    RecalledMessage,
    RecallResult,
    Snippet,
)
from orchestrator.memory.session import fts
from orchestrator.memory.session.embeddings import Embedder
from orchestrator.memory.session.records import MemoryRecord
from orchestrator.memory.session.resident import Found
from orchestrator.memory.session.store import SessionMemory

__all__ = [
    "PIN_BONUS",
    "Dropped",
    "RecallConfig",
    "RecallResult",
    "RecalledMessage",
    "Recaller",
    "Snippet",
    "Trust",
    "text_relevance",
]

# A memory's "last used" time is written at most this often by one process.
MARK_EVERY = timedelta(minutes=1)
_MARKED_KEPT = 65_536

PIN_BONUS = 1.0
"""Added to a pinned entry's score: it ranks above every other candidate (scores are at most
1), so it is the last recalled item any budget leaves out."""


class Recaller:
    """Finds the memories for one agent's turn in one group. Blocking: call from a thread.

    Args:
        memory: The session memory store.
        embedder: Embeds queries; defaults to the store's own embedder. Without one, recall
            uses the full-text index alone.
        history: The index of the groups' messages; without it, only memories are recalled.
        knowledge: The knowledge sources' chunks; without it, no passage is recalled.
        knowledge_vectors: Their embeddings, for knowledge by meaning (None: full text only).
    """

    def __init__(
        self,
        memory: SessionMemory,
        embedder: Embedder | None = None,
        *,
        history: HistoryIndex | None = None,
        knowledge: KnowledgeStore | None = None,
        knowledge_vectors: ChunkVectors | None = None,
    ) -> None:
        self.memory = memory
        self.embedder = embedder if embedder is not None else memory.embedder
        self.history = history
        self.knowledge = knowledge
        self.knowledge_vectors = knowledge_vectors
        # When this process last recorded each memory as used (see mark_used).
        self._marked: OrderedDict[int, datetime] = OrderedDict()
        self._marking = threading.Lock()

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
        ranked: list[Ranked] = self._memories(query, scopes, config, now, dropped)
        if messages:
            ranked += self._messages(query, group, before_seq, config, dropped)
        ranked.sort(key=lambda item: (-item.score, item.order))
        passages: tuple[Passage, ...] = ()
        if self.knowledge is not None:
            passages = find_passages(
                self.knowledge,
                query,
                group=group,
                agent=agent,
                config=config,
                dropped=dropped,
                vectors=self.knowledge_vectors,
            )
        result = self._fit(ranked, group, config, dropped)
        return replace(result, knowledge=passages) if passages else result

    def _memories(
        self,
        query: str,
        scopes: Sequence[tuple[str, str]],
        config: RecallConfig,
        now: datetime,
        dropped: list[Dropped],
    ) -> list[Ranked]:
        """The memories past the floor and the filters, with their final score, and the
        pinned ones of ``scopes`` whatever their relevance (they pass no filter: a person chose
        them)."""
        candidates, pins = self._candidates(query, scopes, config.candidates)
        pinned = {record.id: record for record in pins}
        kept: list[Ranked] = []
        for record, similarity in candidates:
            if pinned and record.id in pinned:
                continue
            verdict = self._filter(record, similarity, config)
            if verdict is not None:
                dropped.append(Dropped(id=record.id, layer=verdict[0], reason=verdict[1]))
            elif record.status == "active":
                confidence = adjusted_confidence(record, now)
                score = score_of(similarity, confidence, record.scope)
                kept.append(Ranked(score, similarity, -record.id, record, confidence=confidence))
        if pinned:
            relevance = {c.id: sim for c, sim in candidates}
            for record in pinned.values():
                similarity = relevance.get(record.id, 0.0)
                confidence = adjusted_confidence(record, now)
                score = PIN_BONUS + score_of(similarity, confidence, record.scope)
                kept.append(
                    Ranked(score, similarity, -record.id, record, True, confidence=confidence)
                )
        return kept

    def _messages(
        self,
        query: str,
        group: str,
        before_seq: int | None,
        config: RecallConfig,
        dropped: list[Dropped],
    ) -> list[Ranked]:
        """The group's earlier messages past the floor, with their final score."""
        if self.history is None:
            return []
        terms = fts.query_terms(query)
        hits = self.history.search(
            terms, group=group, before_seq=before_seq, limit=config.candidates
        )
        stemmed = [(term, fts.stem(term)) for term in terms]
        kept: list[Ranked] = []
        for (said, _), similarity in zip(hits, message_similarities(stemmed, hits), strict=True):
            if (verdict := _below_floor(similarity, config)) is not None:
                dropped.append(Dropped(id=said.id, layer=verdict[0], reason=verdict[1]))
                continue
            score = message_score(similarity, said.kind)
            kept.append(Ranked(score, similarity, -said.seq, said))
        return kept

    def _fit(
        self,
        ranked: Sequence[Ranked],
        group: str,
        config: RecallConfig,
        dropped: list[Dropped],
    ) -> RecallResult:
        """The best candidates within ``max_entries`` and ``char_budget``."""
        before = self._previous_of(ranked, group, config)
        return fit(ranked, before, config, dropped)

    def _previous_of(
        self, ranked: Sequence[Ranked], group: str, config: RecallConfig
    ) -> dict[int, Said]:
        """The message before each message that may be shown (read in one go)."""
        if self.history is None:
            return {}
        seqs = [c.item.seq for c in ranked[: config.max_entries + 5] if isinstance(c.item, Said)]
        return self.history.previous(group, seqs)

    def marks_due(self, result: RecallResult, now: datetime) -> bool:
        """Whether :meth:`mark_used` would write anything for ``result`` at ``now``."""
        with self._marking:
            return any(self._due(snippet.id, now) for snippet in result.snippets)

    def _due(self, entry_id: int, now: datetime) -> bool:
        last = self._marked.get(entry_id)
        return last is None or not timedelta(0) <= now - last < MARK_EVERY

    def mark_used(self, result: RecallResult, now: datetime) -> None:
        """Record that ``result``'s memories were shown to an agent at ``now``: to the minute
        (a memory this process recorded less than :data:`MARK_EVERY` ago is not written
        again; with many groups the same memories are recalled turn after turn)."""
        with self._marking:
            due = [s.id for s in result.snippets if self._due(s.id, now)]
        if due:
            self.memory.mark_used(due, now)
            self._noted(due, now)

    async def mark_used_soon(self, result: RecallResult, now: datetime) -> None:
        """:meth:`mark_used` from the event loop, with the marks other turns ask for meanwhile:
        on SQLite in one statement when the database is free at once, else in a thread."""
        with self._marking:
            due = [s.id for s in result.snippets if self._due(s.id, now)]
        if due:
            await self.memory.mark_used_soon(due, now)
            self._noted(due, now)

    def _noted(self, due: Sequence[int], now: datetime) -> None:
        with self._marking:
            for entry_id in due:
                self._marked[entry_id] = now
                self._marked.move_to_end(entry_id)
            while len(self._marked) > _MARKED_KEPT:
                self._marked.popitem(last=False)

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
    ) -> tuple[list[tuple[MemoryRecord, float]], list[MemoryRecord]]:
        """Every candidate with its fused similarity in 0..1, best first; and the scopes'
        pinned entries."""
        terms = fts.query_terms(query)
        stemmed = [(term, fts.stem(term)) for term in terms]
        found = self.memory.resident.find(terms, scopes, limit)
        if found is None:  # a scope too large to hold in memory: the full-text index
            found = Found(
                hits=self.memory.search(query, scopes=scopes, limit=limit),
                pinned=self.memory.pinned(scopes),
            )
        records: dict[int, MemoryRecord] = {}
        text_sim: dict[int, float] = {}
        for (record, _), similarity in zip(
            found.hits, text_similarities(stemmed, found.hits), strict=True
        ):
            records[record.id] = record
            text_sim[record.id] = similarity
        named = set(terms)
        fused: dict[int, float] = {}
        if self.embedder is None:
            for entry_id, candidate in records.items():
                value = text_sim[entry_id]
                fused[entry_id] = value + AUTHOR_BONUS if named & authors_of(candidate) else value
        else:
            vector_sim: dict[int, float] = {}
            vector = self.embedder.embed([query])[0]
            for record, cosine in self.memory.search_similar(vector, scopes=scopes, limit=limit):
                records[record.id] = record
                vector_sim[record.id] = max(0.0, min(1.0, cosine))
            for entry_id, candidate in records.items():
                value = fuse(text_sim.get(entry_id, 0.0), vector_sim.get(entry_id, 0.0))
                if named & authors_of(candidate):
                    value += AUTHOR_BONUS
                fused[entry_id] = value
        top = max(fused.values(), default=1.0)
        scale = 1.0 / top if top > 1.0 else 1.0
        order = sorted(fused, key=lambda i: (-fused[i], -i))
        return [(records[i], fused[i] * scale) for i in order], found.pinned


def _below_floor(similarity: float, config: RecallConfig) -> tuple[Layer, str] | None:
    if similarity < config.relevance_floor:
        floor = config.relevance_floor
        return "relevance_floor", f"similarity {similarity:.2f} is below {floor:.2f}"
    return None
