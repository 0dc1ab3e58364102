"""How recall scores a candidate: its relevance to the query (0..1) and its final rank.

Relevance, from the full-text index and, when an embedder is available, from embeddings; each
signal is scaled to 0..1 and the two are fused:

- text: 70% the BM25 score relative to the best candidate, 30% the share of the query's
  words the entry contains (so the best of a poor lot does not look perfect);
- meaning: cosine similarity of the embeddings; fused as 75% of the stronger signal plus
  25% of the weaker, so a match by meaning alone can still pass the relevance floor.

An entry whose author (the writing agent, or the speaker recorded in ``extra``) is named in the
query gets a bonus; so does, a smaller one, a message whose sender is named.

The rank of a memory is ``similarity*0.5 + confidence'*0.3 + scope_priority*0.2`` where
``confidence'`` is the stored confidence *1.2 with a source message, *1.3 when verified, * a
recency factor ``1 - min(0.3, 0.01 * age_days)`` (age since the entry was last written or
reinforced), capped at 1. A message ranks as an unsourced entry of confidence 0.6 (a
person's) or 0.4 (an agent's) and priority 0.8 would: below a curated, cited memory of the same
relevance.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Literal

from orchestrator.core.kept import Kept
from orchestrator.memory.conversation.index import Said
from orchestrator.memory.session import fts
from orchestrator.memory.session.records import MemoryRecord, meta_text

__all__ = [
    "AUTHOR_BONUS",
    "Trust",
    "adjusted_confidence",
    "authors_of",
    "final_score",
    "fuse",
    "message_score",
    "message_similarities",
    "names_of",
    "repeats",
    "score_of",
    "text_relevance",
    "text_similarities",
    "trust_of",
    "untrusted_reason",
]

Trust = Literal["verified", "sourced", "unsourced"]

SCOPE_PRIORITY = {"session": 1.0, "project": 0.8, "personal": 0.6, "user": 0.6, "global": 0.8}
UNTRUSTED_PREFIXES = ("assistant_resp_", "ai_summary_", "generated_", "draft_", "untrusted_")
AUTHOR_BONUS = 0.3
# A message is raw: it ranks as an unsourced memory of this confidence and scope priority
# would, below a curated, cited memory of the same relevance; what people said above what
# agents said (an agent's reply often restates the message it answers).
MESSAGE_CONFIDENCE = {"human": 0.6, "agent": 0.4}
MESSAGE_PRIORITY = 0.8
MESSAGE_AUTHOR_BONUS = 0.2
REPEAT_SHARE = 0.8
_COVERAGE_WEIGHT = 0.3
_TEXT_WEIGHT = 1 - _COVERAGE_WEIGHT
_BEST_SIGNAL_WEIGHT = 0.75


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
    return score_of(similarity, adjusted_confidence(record, now), record.scope)


def score_of(similarity: float, confidence: float, scope: str) -> float:
    """:func:`final_score` of an entry of ``scope`` whose adjusted confidence is known."""
    return similarity * 0.5 + confidence * 0.3 + SCOPE_PRIORITY.get(scope, 0.6) * 0.2


def message_score(similarity: float, kind: str) -> float:
    """A message's rank, on the scale of :func:`final_score`."""
    confidence = MESSAGE_CONFIDENCE.get(kind, 0.4)
    return similarity * 0.5 + confidence * 0.3 + MESSAGE_PRIORITY * 0.2


def text_relevance(query: str, hits: Sequence[tuple[MemoryRecord, float]]) -> list[float]:
    """Recall's relevance (0..1) of full-text hits ``(record, score)`` for ``query``, in order:
    the measure the relevance floor compares against when no embedder is installed."""
    stemmed = [(term, fts.stem(term)) for term in fts.query_terms(query)]
    return text_similarities(stemmed, [(record, score) for record, score in hits])


def text_similarities(
    stemmed: Sequence[tuple[str, str]],
    hits: Sequence[tuple[MemoryRecord, float]],
) -> list[float]:
    """Each hit's score relative to the best one, blended with the share of the query's words
    it holds: BM25 alone cannot tell a weak match from a word found in most entries."""
    best = max((score for _, score in hits), default=0.0)
    values = []
    for entry, score in hits:
        relative = score / best if best > 0 else 0.0
        values.append(_TEXT_WEIGHT * relative + _COVERAGE_WEIGHT * _coverage(stemmed, entry))
    return values


def message_similarities(
    stemmed: Sequence[tuple[str, str]], hits: Sequence[tuple[Said, float]]
) -> list[float]:
    """Each message's relevance: as :func:`text_similarities` (a word of the query counts as
    found in the message when it is in the message or in the one before it, which the index
    searched too), plus a small bonus when the query names its sender."""
    best = max((score for _, score in hits), default=0.0)
    named = {term for term, _ in stemmed}
    values = []
    for said, score in hits:
        words = _words(said.text) | _words(said.context)
        found = sum(1 for term, stem in stemmed if stem in words or term in words)
        coverage = found / len(stemmed) if stemmed else 0.0
        value = (1 - _COVERAGE_WEIGHT) * (score / best if best > 0 else 0.0)
        value += _COVERAGE_WEIGHT * coverage
        if named & names_of(said.sender, ""):
            value += MESSAGE_AUTHOR_BONUS
        values.append(min(1.0, value))
    return values


def fuse(text: float, meaning: float) -> float:
    """Mostly the stronger signal, plus some of the other: a match by meaning alone can pass
    the relevance floor, and agreement of both signals ranks highest."""
    high, low = max(text, meaning), min(text, meaning)
    return _BEST_SIGNAL_WEIGHT * high + (1 - _BEST_SIGNAL_WEIGHT) * low


def repeats(text: str, earlier: str) -> bool:
    """Whether ``text`` says little that ``earlier`` does not: at least :data:`REPEAT_SHARE` of
    the words of the shorter one are in the other (an agent's reply quoting a message, a
    message said twice)."""
    words, other = _words(text), _words(earlier)
    shorter = min(len(words), len(other))
    return shorter > 0 and len(words & other) >= REPEAT_SHARE * shorter


@lru_cache(maxsize=8192)
def _words(text: str) -> frozenset[str]:
    """:func:`fts.words`, remembered: the same entries come back as candidates turn after
    turn (and metadata texts such as a bare type repeat across entries)."""
    return frozenset(fts.words(text))


def _coverage(terms: Sequence[tuple[str, str]], record: MemoryRecord) -> float:
    """The share of the query's words (each with its stem) found in the entry's content or
    metadata."""
    if not terms:
        return 0.0
    words = _record_words(record)
    found = 0
    for term, stem in terms:
        if stem in words or term in words:
            found += 1
    return found / len(terms)


def _record_words(record: MemoryRecord) -> frozenset[str]:
    """The words of an entry's content and of its metadata, kept with the record object (the
    entries held in memory come back as the same records turn after turn)."""
    words = _RECORD_WORDS.find(record, None)
    if words is None:
        meta = meta_text(record.type, record.key, record.tags, record.extra)
        words = _RECORD_WORDS.keep(record, None, _words(record.content) | _words(meta))
    return words


_RECORD_WORDS: Kept[MemoryRecord, frozenset[str]] = Kept(8192)


def authors_of(record: MemoryRecord) -> frozenset[str]:
    """Who wrote or said the entry: the names' words, lower-cased."""
    speaker = record.extra.get("speaker")
    return names_of(record.agent, speaker if isinstance(speaker, str) else "")


@lru_cache(maxsize=1024)
def names_of(agent: str, speaker: str) -> frozenset[str]:
    return frozenset(word for word in fts.query_terms(f"{agent} {speaker}") if len(word) > 2)
