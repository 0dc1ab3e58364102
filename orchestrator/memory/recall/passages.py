"""Recall's passages of knowledge: the chunks of the sources a turn may see (its group's, its
agent's, everyone's) that answer the query, ranked, and held to their own limits (how many,
how many tokens) before they join the memories and messages in the references.

A passage's relevance is recall's text relevance (BM25 relative to the best hit, blended with
the share of the query's words the chunk holds, its heading and path included); the relevance
floor leaves out the weak ones. It ranks as a memory of confidence 0.9 (a trusted source) or
0.6 (an external one) and priority 0.9 would. Each passage says why it was found: the query's
words it holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.memory.knowledge.store import KnowledgeHit, KnowledgeStore, turn_scopes
from orchestrator.memory.recall.ranking import score_of
from orchestrator.memory.recall.values import Dropped, Passage, RecallConfig
from orchestrator.memory.session import fts

__all__ = ["find_passages", "passage_relevance"]

_TRUST_CONFIDENCE = {"trusted": 0.9, "external": 0.6}
_COVERAGE_WEIGHT = 0.3


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
) -> tuple[Passage, ...]:
    """The best passages for ``query`` within ``config.knowledge_entries`` and
    ``config.knowledge_tokens``; what the floor and the limits left out goes to ``dropped``."""
    if config.knowledge_entries == 0:
        return ()
    scopes = turn_scopes(group, agent)
    if not store.holds_any(scopes):
        return ()
    terms = fts.query_terms(query)
    hits = store.search(terms, scopes, config.candidates)
    kept: list[Passage] = []
    tokens = 0
    for hit, (similarity, found) in zip(hits, passage_relevance(terms, hits), strict=True):
        name = f"chunk {hit.id}"
        if similarity < config.relevance_floor:
            reason = f"similarity {similarity:.2f} is below {config.relevance_floor:.2f}"
            dropped.append(Dropped(id=name, layer="relevance_floor", reason=reason))
            continue
        if len(kept) >= config.knowledge_entries:
            reason = f"{config.knowledge_entries} passages recalled already"
            dropped.append(Dropped(id=name, layer="max_entries", reason=reason))
            continue
        if tokens + hit.tokens > config.knowledge_tokens:
            reason = f"{hit.tokens} tokens would pass the {config.knowledge_tokens} for knowledge"
            dropped.append(Dropped(id=name, layer="char_budget", reason=reason))
            continue
        tokens += hit.tokens
        confidence = _TRUST_CONFIDENCE.get(hit.trust, 0.6)
        words = ", ".join(found) if found else "its heading or path"
        kept.append(
            Passage(
                id=hit.id,
                source=hit.source,
                locator=hit.locator,
                heading=hit.heading,
                text=hit.text,
                trust=hit.trust,
                tokens=hit.tokens,
                score=score_of(similarity, confidence, "project"),
                similarity=similarity,
                why=f"matched {words} (relevance {similarity:.2f})",
            )
        )
    return tuple(kept)
