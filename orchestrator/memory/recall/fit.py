"""The last layers of recall: the ranked candidates that fit in ``max_entries`` and
``char_budget``, repeats left out.

A short message that answers another sender's question comes with that question: the last one
the message before it asks, cut to :data:`QUESTION_MAX_CHARS`. A message whose words are mostly
those of one recalled already (such as a reply quoting it) is left out as a repeat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field

from orchestrator.memory.conversation.index import Said
from orchestrator.memory.recall.ranking import repeats, trust_of
from orchestrator.memory.recall.values import (
    Dropped,
    RecallConfig,
    RecalledMessage,
    RecallResult,
    Snippet,
)
from orchestrator.memory.session.records import MemoryRecord
from orchestrator.offline import cues

__all__ = ["QUESTION_MAX_CHARS", "SHORT_ANSWER_CHARS", "Ranked", "fit"]

# A short recalled message (at most SHORT_ANSWER_CHARS) that answers another sender's question
# is shown with that question (the last one the message before it asks), cut to
# QUESTION_MAX_CHARS: "yes, four years" means nothing without it, while a longer message
# usually says what it is about.
SHORT_ANSWER_CHARS = 160
QUESTION_MAX_CHARS = 120


@dataclass(slots=True)
class Ranked:
    """A candidate past the filters: a memory or a message, with its final score (and, for a
    memory, the adjusted confidence that went into it). Made for every candidate of every
    turn: a plain class is quicker to make than a frozen one, and nothing changes it."""

    score: float
    similarity: float
    order: int  # ties: the newer first
    item: MemoryRecord | Said
    pinned: bool = False
    _: KW_ONLY
    confidence: float = 0.0


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


def fit(
    ranked: Sequence[Ranked],
    before: Mapping[int, Said],
    config: RecallConfig,
    dropped: list[Dropped],
) -> RecallResult:
    """The best of ``ranked`` (best first) within ``max_entries`` and ``char_budget``.

    Args:
        ranked: The candidates past the filters, best first.
        before: The message before each message candidate, by its seq.
        config: The layers' settings.
        dropped: What the layers left out so far; the fit adds to it.
    """
    state = _Fit(config=config, dropped=dropped, before=dict(before))
    asked = {c.item.id: _asked(c.item, state.before) for c in ranked if isinstance(c.item, Said)}
    # A question quoted whole with its answer is not shown again on its own.
    state.shown.update(p.id for p, q in asked.values() if p and q == " ".join(p.text.split()))
    snippets: list[Snippet] = []
    messages: list[RecalledMessage] = []
    for candidate in ranked:
        item = candidate.item
        if isinstance(item, MemoryRecord):
            if state.take(item.id, len(item.content)):
                snippets.append(_snippet(item, candidate))
        elif item.id not in state.shown:
            found = _take_message(candidate, item, asked[item.id], state)
            messages += [found] if found else []
    return RecallResult(snippets=tuple(snippets), messages=tuple(messages), dropped=tuple(dropped))


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
    candidate: Ranked, said: Said, asked: tuple[Said | None, str], fit: _Fit
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


def _snippet(record: MemoryRecord, candidate: Ranked) -> Snippet:
    trust = trust_of(record)
    return Snippet(
        id=record.id,
        content=record.content,
        type=record.type,
        score=round(candidate.score, 4),
        similarity=round(candidate.similarity, 4),
        confidence=round(candidate.confidence, 4),
        trust=f"pinned, {trust}" if candidate.pinned else trust,
        pinned=candidate.pinned,
        citation=record.citation,
        created_at=record.created_at,
        scope=record.scope,
    )
