"""Recall's passages of knowledge: the chunks of the sources a turn may see (its group's, its
agent's, everyone's) that answer the query, ranked, and held to their own limits (how many,
how many tokens) before they join the memories and messages in the references.

A passage's relevance is recall's text relevance (BM25 relative to the best hit, blended with
the share of the query's words the chunk holds, its heading and path included); the relevance
floor leaves out the weak ones. With embeddings on (:mod:`orchestrator.memory.knowledge.vectors`)
the chunks closest in meaning are candidates too, the two orders fused by reciprocal rank, and a
chunk close enough in meaning (cosine at least :data:`MEANING_FLOOR`) passes the floor, while a
chunk its words found but whose meaning is far (cosine below :data:`MEANING_VETO`, a word used
in another sense) is left out. A chunk larger than the tokens left is given in part
(:func:`fitted`: the lines that hold most of the query's words, with their own locator) rather
than left out; the limit counts a passage as the
agent reads it (:func:`shown_tokens`), so that the passages given fit the recall budget. A
passage ranks as a memory of confidence 0.9 (a trusted source) or 0.6 (an external one) would.
Each passage says why it was found: the query's words it holds, its closeness in meaning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from orchestrator.core.chunking import digest
from orchestrator.memory.knowledge.store import KnowledgeHit, KnowledgeStore, turn_scopes
from orchestrator.memory.knowledge.vectors import ChunkVectors
from orchestrator.memory.recall.ranking import score_of
from orchestrator.memory.recall.values import Dropped, Passage, RecallConfig
from orchestrator.memory.session import fts

__all__ = [
    "MEANING_FLOOR",
    "MEANING_VETO",
    "MIN_PART_TOKENS",
    "RRF_K",
    "Candidate",
    "find_passages",
    "fitted",
    "passage_relevance",
    "ranked_candidates",
    "search_knowledge",
    "shown_tokens",
    "why_found",
]

_TRUST_CONFIDENCE = {"trusted": 0.9, "external": 0.6}
_COVERAGE_WEIGHT = 0.3
RRF_K = 10
MEANING_FLOOR = 0.3  # a chunk found by meaning alone passes the floor from this cosine
MEANING_VETO = 0.15  # a chunk found by its words alone is left out below this cosine
MIN_PART_TOKENS = 80  # a chunk larger than the room left is given in part from this room


def passage_relevance(
    terms: Sequence[str], hits: Sequence[KnowledgeHit]
) -> list[tuple[float, list[str]]]:
    """Each hit's relevance (0..1) and the query's words it holds, in order."""
    stemmed = [(term, fts.stem(term)) for term in terms]
    best = max((hit.score for hit in hits), default=0.0)
    found_all = []
    for hit in hits:
        words = fts.words(f"{hit.text} {hit.heading} {hit.path}")
        found = [term for term, stem in stemmed if stem in words or term in words]
        coverage = len(found) / len(stemmed) if stemmed else 0.0
        relative = hit.score / best if best > 0 else 0.0
        value = (1 - _COVERAGE_WEIGHT) * relative + _COVERAGE_WEIGHT * coverage
        found_all.append((min(1.0, value), found))
    return found_all


def find_passages(
    store: KnowledgeStore,
    query: str,
    *,
    group: str,
    agent: str,
    config: RecallConfig,
    dropped: list[Dropped],
    vectors: ChunkVectors | None = None,
) -> tuple[Passage, ...]:
    """The best passages for ``query`` within ``config.knowledge_entries`` and
    ``config.knowledge_tokens``; what the floor and the limits left out goes to ``dropped``.
    With ``vectors`` (embeddings on), the chunks closest in meaning are candidates too."""
    if config.knowledge_entries == 0:
        return ()
    scopes = turn_scopes(group, agent)
    if not store.holds_any(scopes):
        return ()
    kept: list[Passage] = []
    tokens = 0
    stems = [fts.stem(term) for term in fts.query_terms(query)]
    for candidate in ranked_candidates(store, query, scopes, config.candidates, vectors):
        hit = candidate.hit
        name = f"chunk {hit.id}"
        if candidate.similarity < config.relevance_floor and candidate.cosine < MEANING_FLOOR:
            reason = f"similarity {candidate.similarity:.2f} is below {config.relevance_floor:.2f}"
            dropped.append(Dropped(id=name, layer="relevance_floor", reason=reason))
            continue
        if len(kept) >= config.knowledge_entries:
            reason = f"{config.knowledge_entries} passages recalled already"
            dropped.append(Dropped(id=name, layer="max_entries", reason=reason))
            continue
        room = config.knowledge_tokens - tokens
        if shown_tokens(hit) > room:
            lines_room = room - _header_tokens(hit)
            part = fitted(hit, lines_room, stems) if lines_room >= MIN_PART_TOKENS else None
            if part is None:
                limit = config.knowledge_tokens
                reason = f"{shown_tokens(hit)} tokens would pass the {limit} for knowledge"
                dropped.append(Dropped(id=name, layer="char_budget", reason=reason))
                continue
            candidate = replace(candidate, hit=part)
        tokens += shown_tokens(candidate.hit)
        kept.append(_passage(candidate))
    return tuple(kept)


def shown_tokens(hit: KnowledgeHit) -> int:
    """About the tokens a passage takes as the agent reads it: its header line (trust,
    locator, section), its text, and the ``> `` that quotes each line."""
    return _header_tokens(hit) + hit.tokens + hit.text.count("\n") + 1


def _header_tokens(hit: KnowledgeHit) -> int:
    return 12 + math.ceil((len(hit.path) + len(hit.heading)) / 3)  # paths split finely


def fitted(hit: KnowledgeHit, room: int, stems: Sequence[str]) -> KnowledgeHit | None:
    """The lines of ``hit`` that fit in ``room`` tokens as shown (each quoted) and hold most
    of the query's words (the first such, the chunk's start when none holds any), as a passage
    of its own: its locator names those lines (and their digest, so that it resolves like any
    other); None when not even one line fits. A line's tokens are its share of the chunk's by
    length."""
    lines = hit.text.split("\n")
    per_char = hit.tokens / max(1, len(hit.text))
    costs = [max(1, math.ceil((len(line) + 1) * per_char)) + 1 for line in lines]
    wanted = set(stems)
    scores = [len(wanted & fts.words(line)) for line in lines]
    best: tuple[int, int, int] | None = None  # (score, -first, last)
    last, cost, score = -1, 0, 0
    for first in range(len(lines)):
        while last + 1 < len(lines) and cost + costs[last + 1] <= room:
            last += 1
            cost += costs[last]
            score += scores[last]
        if last >= first and (best is None or (score, -first) > best[:2]):
            best = (score, -first, last)
        if last >= first:
            cost -= costs[first]
            score -= scores[first]
        else:
            last = first
    if best is None:
        return None
    first, last = -best[1], best[2]
    text = "\n".join(lines[first : last + 1])
    return replace(
        hit,
        start=hit.start + first,
        end=hit.start + last,
        text=text,
        digest=digest(text),
        tokens=sum(costs[first : last + 1]) - (last + 1 - first),
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A chunk found for a query: its text relevance (0 when only its meaning found it), the
    query's words it holds, its cosine similarity (0 without embeddings) and its rank."""

    hit: KnowledgeHit
    similarity: float
    found: list[str]
    cosine: float
    rank: float


def ranked_candidates(
    store: KnowledgeStore,
    query: str,
    scopes: Sequence[tuple[str, str]],
    limit: int,
    vectors: ChunkVectors | None = None,
) -> list[Candidate]:
    """The chunks of ``scopes`` for ``query``, best first: by the full-text search alone, or
    with embeddings, the search's order and the order by meaning fused by reciprocal rank
    (each list gives ``1 / (RRF_K + rank)``)."""
    terms = fts.query_terms(query)
    hits = store.search(terms, scopes, limit)
    relevance = passage_relevance(terms, hits)
    close: list[tuple[int, float]] = []
    known: dict[int, float] = {}
    if vectors is not None:
        close, known = vectors.compared(query, scopes, limit, [hit.id for hit in hits])
    if not close:
        return [
            Candidate(hit=hit, similarity=sim, found=found, cosine=0.0, rank=-n)
            for n, (hit, (sim, found)) in enumerate(zip(hits, relevance, strict=True))
        ]
    by_id = {hit.id: (hit, sim, found) for hit, (sim, found) in zip(hits, relevance, strict=True)}
    rank: dict[int, float] = {}
    for n, hit in enumerate(hits, 1):
        rank[hit.id] = 1 / (RRF_K + n)
    cosines = known | dict(close)
    for n, (chunk_id, _) in enumerate(close, 1):
        rank[chunk_id] = rank.get(chunk_id, 0.0) + 1 / (RRF_K + n)
    missing = [chunk_id for chunk_id in cosines if chunk_id not in by_id]
    for chunk_id, hit in store.by_ids(missing).items():
        by_id[chunk_id] = (hit, 0.0, [])
    found = [
        Candidate(hit=h, similarity=sim, found=words, cosine=cosines.get(i, 0.0), rank=rank[i])
        for i, (h, sim, words) in by_id.items()
        if cosines.get(i, 1.0) >= MEANING_VETO  # its words matched, but it means another thing
    ]
    found.sort(key=lambda c: (-c.rank, c.hit.id))
    return found


def _passage(candidate: Candidate) -> Passage:
    hit = candidate.hit
    confidence = _TRUST_CONFIDENCE.get(hit.trust, 0.6)
    similarity = max(candidate.similarity, candidate.cosine)
    why = why_found(candidate)
    return Passage(
        id=hit.id,
        source=hit.source,
        locator=hit.locator,
        heading=hit.heading,
        text=hit.text,
        trust=hit.trust,
        tokens=hit.tokens,
        score=score_of(similarity, confidence, "project"),
        similarity=similarity,
        why=why,
    )


def why_found(candidate: Candidate) -> str:
    """Why a chunk was found: the query's words it holds, its closeness in meaning."""
    if candidate.found:
        why = f"matched {', '.join(candidate.found)} (relevance {candidate.similarity:.2f})"
    elif candidate.cosine > 0:
        why = "close in meaning"
    else:
        why = "matched its heading or path"
    if candidate.cosine > 0:
        why += f"; meaning {candidate.cosine:.2f}"
    return why


def search_knowledge(
    store: KnowledgeStore,
    query: str,
    scopes: Sequence[tuple[str, str]],
    limit: int,
    vectors: ChunkVectors | None = None,
) -> list[tuple[KnowledgeHit, str]]:
    """A search of knowledge as people and tools ask it: the chunks a turn would rank, best
    first (those found by meaning alone only from :data:`MEANING_FLOOR`), with why each."""
    found: list[tuple[KnowledgeHit, str]] = []
    for candidate in ranked_candidates(store, query, scopes, max(limit, 10), vectors):
        if not candidate.found and candidate.similarity <= 0 and candidate.cosine < MEANING_FLOOR:
            continue
        found.append((candidate.hit, why_found(candidate)))
        if len(found) >= limit:
            break
    return found
