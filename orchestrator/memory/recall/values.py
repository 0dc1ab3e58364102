"""The values recall takes and returns: its settings per agent, what it recalled (memories and
earlier messages) and what each layer left out, and why."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from orchestrator.core.context.report import LeftOutCandidate
from orchestrator.core.quick_init import quick_init
from orchestrator.errors import ValidationError
from orchestrator.memory.conversation.index import Said
from orchestrator.memory.session.records import Citation

__all__ = [
    "Dropped",
    "Layer",
    "Passage",
    "RecallConfig",
    "RecallResult",
    "RecalledMessage",
    "Snippet",
]

Layer = Literal[
    "relevance_floor", "untrusted", "require_source", "repeat", "max_entries", "char_budget"
]

# A candidate a layer left out, and why: a memory (its id) or a message (its id), its
# ``layer`` one of :data:`Layer`. It is the cost report's own record of it, as it is kept.
Dropped = LeftOutCandidate


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RecallConfig:
    """The layers of recall, per agent. ``candidates`` is how many entries each search
    returns before the layers."""

    relevance_floor: float = 0.4
    max_entries: int = 20
    char_budget: int = 6000
    require_source: bool = False
    exclude_untrusted: bool = True
    candidates: int = 50
    knowledge_entries: int = 5  # passages of knowledge at most
    knowledge_tokens: int = 1300  # and their tokens at most
    lore_tokens: int = 400  # lorebook entries' tokens at most

    def __post_init__(self) -> None:
        if not 0.0 <= self.relevance_floor <= 1.0:
            raise ValidationError("relevance_floor", "must be within 0..1")
        if self.max_entries < 0 or self.char_budget < 0 or self.candidates < 1:
            raise ValidationError("recall", "max_entries, char_budget and candidates are >= 0")
        if self.knowledge_entries < 0 or min(self.knowledge_tokens, self.lore_tokens) < 0:
            raise ValidationError("recall", "knowledge_entries, _tokens and lore_tokens are >= 0")


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Snippet:
    """A recalled memory: ``score`` is the final rank, ``similarity`` the relevance (0..1)
    and ``confidence`` the adjusted confidence that went into the score. ``trust`` is the
    label the agent reads (verified, sourced or unsourced), after ``"pinned, "`` for an entry
    people pinned."""

    id: int
    content: str
    type: str
    score: float
    similarity: float
    confidence: float
    trust: str
    citation: Citation | None
    created_at: datetime
    scope: str
    pinned: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Passage:
    """A chunk of knowledge recalled for a turn: where it is, what it says, its source's
    trust, its rank and relevance, and ``why``: the query's words it holds."""

    id: int
    source: str
    locator: str
    heading: str
    text: str
    trust: str
    tokens: int
    score: float
    similarity: float
    why: str

    kind = "knowledge"

    @property
    def key(self) -> str:
        """Its id among the references: ``chunk <id>``."""
        return f"chunk {self.id}"


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class RecallResult:
    """What recall returned, best first, and what it dropped on the way."""

    snippets: tuple[Snippet, ...] = ()
    messages: tuple[RecalledMessage, ...] = ()
    dropped: tuple[Dropped, ...] = ()
    knowledge: tuple[Passage, ...] = ()  # passages of knowledge, best first


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
