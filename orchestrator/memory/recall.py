"""Recall: the memories worth putting in front of an agent, and why the others were left out.

A query is reduced to its content words (:func:`orchestrator.memory.fts.query_terms`) and
searched in the group's session memory, the agent's personal memory and global memory, never
in another group's. Candidates come from the full-text index, and also from embeddings when
an embedder is available; each signal is scaled to 0..1 and the two are fused:

- text: 70% the BM25 score relative to the best candidate, 30% the share of the query's
  words the entry contains (so the best of a poor lot does not look perfect);
- meaning: cosine similarity of the embeddings; fused as 75% of the stronger signal plus
  25% of the weaker, so a match by meaning alone can still pass the relevance floor.

An entry whose author (the writing agent, or the speaker recorded in ``extra``) is named in the
query gets a bonus. Then come the layers, each configurable and each recording what it drops:
relevance floor, untrusted filter, require-source, ranking, max entries and char budget. The
ranking is ``similarity*0.5 + confidence'*0.3 + scope_priority*0.2`` where ``confidence'`` is
the stored confidence *1.2 with a source message, *1.3 when verified, * a recency factor
``1 - min(0.3, 0.01 * age_days)`` (age since the entry was last written or reinforced),
capped at 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Literal

from orchestrator.errors import ValidationError
from orchestrator.memory import fts
from orchestrator.memory.embeddings import Embedder
from orchestrator.memory.history_index import HistoryIndex, Said
from orchestrator.memory.records import Citation, MemoryRecord, meta_text
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

Trust = Literal["verified", "sourced", "unsourced"]
Layer = Literal["relevance_floor", "untrusted", "require_source", "max_entries", "char_budget"]

SCOPE_PRIORITY = {"session": 1.0, "project": 0.8, "personal": 0.6, "user": 0.6, "global": 0.8}
UNTRUSTED_PREFIXES = ("assistant_resp_", "ai_summary_", "generated_", "draft_", "untrusted_")
AUTHOR_BONUS = 0.3
# A message is raw: it ranks as an unsourced memory of this confidence and scope priority
# would, below a curated, cited memory of the same relevance; what people said above what
# agents said (an agent's reply often restates the message it answers).
MESSAGE_CONFIDENCE = {"human": 0.6, "agent": 0.4}
MESSAGE_PRIORITY = 0.8
MESSAGE_AUTHOR_BONUS = 0.2
# The message before a recalled one is shown with it when it asked a question of another
# sender and is at most this long: the question is what gives an answer its meaning.
PREVIOUS_MAX_CHARS = 300
_COVERAGE_WEIGHT = 0.3
_BEST_SIGNAL_WEIGHT = 0.75


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
    """An earlier message of the group, with the one before it when that helps (a question
    and its answer belong together)."""

    said: Said
    previous: Said | None
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


def untrusted_reason(record: MemoryRecord) -> str | None:
    """Why an entry must not be recalled as fact, or None when it may."""
    key = record.key or ""
    if key.startswith(UNTRUSTED_PREFIXES):
        return f"key {key!r} marks model-generated or unverified content"
    if key.startswith("external_") and "_verified_" not in key:
        return f"external key {key!r} is not verified"
    if record.written_by == "job":
        return "written by a scheduled job"
    return None


def trust_of(record: MemoryRecord) -> Trust:
    """The trust label shown with a snippet."""
    if record.verified:
        return "verified"
    return "sourced" if record.source_message_id else "unsourced"


def adjusted_confidence(record: MemoryRecord, now: datetime) -> float:
    """Stored confidence *1.2 with a source, *1.3 verified, * recency; at most 1."""
    value = record.confidence
    if record.source_message_id:
        value *= 1.2
    if record.verified:
        value *= 1.3
    age_days = max(0.0, (now - record.last_seen_at).total_seconds() / 86400)
    value *= 1.0 - min(0.3, 0.01 * age_days)
    return min(1.0, value)


def final_score(similarity: float, record: MemoryRecord, now: datetime) -> float:
    """``similarity*0.5 + confidence'*0.3 + scope_priority*0.2``."""
    priority = SCOPE_PRIORITY.get(record.scope, 0.6)
    return similarity * 0.5 + adjusted_confidence(record, now) * 0.3 + priority * 0.2


def message_score(similarity: float, kind: str) -> float:
    """A message's rank, on the scale of :func:`final_score`."""
    confidence = MESSAGE_CONFIDENCE.get(kind, 0.4)
    return similarity * 0.5 + confidence * 0.3 + MESSAGE_PRIORITY * 0.2


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
        """
        scopes = [("session", group), ("personal", agent), ("global", "")]
        dropped: list[Dropped] = []
        ranked: list[_Ranked] = self._memories(query, scopes, config, now, dropped)
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
        for (said, _), similarity in zip(hits, _message_similarities(stemmed, hits), strict=True):
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
        snippets: list[Snippet] = []
        messages: list[RecalledMessage] = []
        for candidate in ranked:
            item = candidate.item
            if isinstance(item, MemoryRecord):
                if fit.take(item.id, len(item.content)):
                    snippets.append(_snippet(item, candidate.score, candidate.similarity, now))
                continue
            if item.id in fit.shown:
                continue  # shown already, as the message before another hit
            previous = _previous(item, fit)
            if previous is not None and not fit.fits(len(item.text) + len(previous.text)):
                previous = None
            size = len(item.text) + (len(previous.text) if previous else 0)
            if fit.take(item.id, size):
                fit.shown.add(item.id)
                if previous is not None:
                    fit.shown.add(previous.id)
                messages.append(
                    RecalledMessage(
                        said=item,
                        previous=previous,
                        score=round(candidate.score, 4),
                        similarity=round(candidate.similarity, 4),
                    )
                )
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
        for hit, similarity in zip(text_hits, _text_similarities(stemmed, text_hits), strict=True):
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
                value = _fuse(value, vector_sim.get(entry_id, 0.0))
            if named & _authors(candidate):
                value += AUTHOR_BONUS
            fused[entry_id] = value
        top = max(fused.values(), default=1.0)
        scale = 1.0 / top if top > 1.0 else 1.0
        order = sorted(fused, key=lambda i: (-fused[i], -i))
        return [(records[i], fused[i] * scale) for i in order]


def _previous(said: Said, fit: _Fit) -> Said | None:
    """The message before ``said`` when it helps: another sender's question (a question and
    its answer belong together), short, and not shown already."""
    previous = fit.before.get(said.seq)
    if (
        previous is None
        or previous.sender == said.sender
        or not _asks(previous.text)
        or previous.id in fit.shown
        or len(previous.text) > PREVIOUS_MAX_CHARS
    ):
        return None
    return previous


def text_relevance(query: str, hits: Sequence[tuple[MemoryRecord, float]]) -> list[float]:
    """Recall's relevance (0..1) of full-text hits ``(record, score)`` for ``query``, in order:
    the measure the relevance floor compares against when no embedder is installed."""
    stemmed = [(term, fts.stem(term)) for term in fts.query_terms(query)]
    return _text_similarities(stemmed, [(record, score) for record, score in hits])


def _text_similarities(
    stemmed: Sequence[tuple[str, str]],
    hits: Sequence[TextHit] | Sequence[tuple[MemoryRecord, float]],
) -> list[float]:
    """Each hit's score relative to the best one, blended with the share of the query's words
    it holds: BM25 alone cannot tell a weak match from a word found in most entries."""
    pairs = [(hit, hit.score) if isinstance(hit, TextHit) else hit for hit in hits]
    best = max((score for _, score in pairs), default=0.0)
    return [
        (1 - _COVERAGE_WEIGHT) * (score / best if best > 0 else 0.0)
        + _COVERAGE_WEIGHT * _coverage(stemmed, entry)
        for entry, score in pairs
    ]


def _message_similarities(
    stemmed: Sequence[tuple[str, str]], hits: Sequence[tuple[Said, float]]
) -> list[float]:
    """Each message's relevance: as :func:`_text_similarities`, plus a small bonus when the
    query names its sender."""
    best = max((score for _, score in hits), default=0.0)
    named = {term for term, _ in stemmed}
    values = []
    for said, score in hits:
        words = _words(said.text)
        found = sum(1 for term, stem in stemmed if stem in words or term in words)
        coverage = found / len(stemmed) if stemmed else 0.0
        value = (1 - _COVERAGE_WEIGHT) * (score / best if best > 0 else 0.0)
        value += _COVERAGE_WEIGHT * coverage
        if named & _names(said.sender, ""):
            value += MESSAGE_AUTHOR_BONUS
        values.append(min(1.0, value))
    return values


def _asks(value: str) -> bool:
    """Whether a message asks something (a question mark, in any script)."""
    return "?" in value or "\uff1f" in value


def _below_floor(similarity: float, config: RecallConfig) -> tuple[Layer, str] | None:
    if similarity < config.relevance_floor:
        floor = config.relevance_floor
        return "relevance_floor", f"similarity {similarity:.2f} is below {floor:.2f}"
    return None


def _fuse(text: float, meaning: float) -> float:
    """Mostly the stronger signal, plus some of the other: a match by meaning alone can pass
    the relevance floor, and agreement of both signals ranks highest."""
    high, low = max(text, meaning), min(text, meaning)
    return _BEST_SIGNAL_WEIGHT * high + (1 - _BEST_SIGNAL_WEIGHT) * low


@lru_cache(maxsize=8192)
def _words(text: str) -> frozenset[str]:
    """:func:`fts.words`, remembered: the same entries come back as candidates turn after
    turn (and metadata texts such as a bare type repeat across entries)."""
    return frozenset(fts.words(text))


def _coverage(terms: Sequence[tuple[str, str]], record: MemoryRecord | TextHit) -> float:
    """The share of the query's words (each with its stem) found in the entry's content or
    metadata."""
    if not terms:
        return 0.0
    content = _words(record.content)
    meta = _words(meta_text(record.type, record.key, record.tags, record.extra))
    found = sum(
        1
        for term, stem in terms
        if stem in content or term in content or stem in meta or term in meta
    )
    return found / len(terms)


def _authors(record: MemoryRecord | TextHit) -> frozenset[str]:
    """Who wrote or said the entry: the names' words, lower-cased."""
    speaker = record.extra.get("speaker")
    return _names(record.agent, speaker if isinstance(speaker, str) else "")


@lru_cache(maxsize=1024)
def _names(agent: str, speaker: str) -> frozenset[str]:
    return frozenset(word for word in fts.query_terms(f"{agent} {speaker}") if len(word) > 2)


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
