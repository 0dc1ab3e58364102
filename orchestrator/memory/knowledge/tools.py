"""``knowledge_search`` and ``knowledge_get`` at work, for one agent's turn: only the sources
the turn may see (its group's, its agent's, everyone's), the text neutralised as references
are (no marker survives in it), each passage labelled with its locator and its source's trust.
Blocking: call from a thread."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from orchestrator.core.chunking import parse_locator
from orchestrator.core.markers import neutralise
from orchestrator.errors import ValidationError
from orchestrator.memory.knowledge.locate import resolve
from orchestrator.memory.knowledge.store import KnowledgeHit, KnowledgeStore, turn_scopes
from orchestrator.memory.session.fts import query_terms

__all__ = ["KnowledgeTools"]

_PASSAGE_CHARS = 1200
_GOT_CHARS = 12_000
_STATES = {
    "current": "as cited",
    "moved": "the cited text, at these lines now",
    "changed": "these lines changed since they were cited",
    "unversioned": "as they are now",
}


Finder = Callable[[str, Sequence[tuple[str, str]], int], Sequence[tuple[KnowledgeHit, str]]]
"""Finds the chunks for a query among scopes, best first, with why each (by default: the
full-text search alone; the wiring gives recall's search, by meaning too)."""


class KnowledgeTools:
    """Searches and reads knowledge for the tools.

    Args:
        store: The knowledge store.
        finder: How a search finds chunks (None: by their words alone).
    """

    def __init__(self, store: KnowledgeStore, finder: Finder | None = None) -> None:
        self.store = store
        self.finder = finder or self._by_words

    def _by_words(
        self, query: str, scopes: Sequence[tuple[str, str]], limit: int
    ) -> list[tuple[KnowledgeHit, str]]:
        return [(hit, "") for hit in self.store.search(query_terms(query), scopes, limit)]

    def search(self, query: str, limit: int, *, group: str, agent: str) -> tuple[str, int]:
        """The passages for ``query``, one block each, and how many."""
        hits = [hit for hit, _ in self.finder(query, turn_scopes(group, agent), limit)]
        if not hits:
            return "no passages found", 0
        blocks = []
        for hit in hits:
            text = neutralise(hit.text)
            if len(text) > _PASSAGE_CHARS:
                text = text[: _PASSAGE_CHARS - 1] + "…"
            section = f", section: {hit.heading}" if hit.heading else ""
            quoted = "\n".join(f"> {line}" for line in text.splitlines())
            blocks.append(f"[{hit.locator}] ({hit.trust}{section})\n{quoted}")
        return "\n\n".join(blocks), len(hits)

    def get(self, locator: str, *, group: str, agent: str) -> str:
        """The lines ``locator`` names now, numbered, if the turn may read its source.

        Raises:
            ValidationError: a malformed locator, or a source this turn may not read.
        """
        name = parse_locator(locator).path.split("/", 1)[0]
        source = self.store.get(name)
        if source is None or (source.scope, source.scope_id) not in turn_scopes(group, agent):
            raise ValidationError("locator", f"no knowledge source here holds {name[:64]!r}")
        found = resolve(self.store, locator)
        text = neutralise(found.text)
        lines = [f"{n:>5}  {line}" for n, line in enumerate(text.split("\n"), found.start)]
        body = "\n".join(lines)
        if len(body) > _GOT_CHARS:
            body = body[: _GOT_CHARS - 1] + "…"
        return f"[{found.locator}] ({found.trust}, {_STATES[found.state]})\n{body}"
