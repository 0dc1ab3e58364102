"""Which sentences state a decision or a requirement: the word cues the offline provider (what it
saves) and the offline summary (what it keeps) share; recall reads a message's question here too.

A sentence states a decision when it says "we decided", "we've decided", "decided to",
"decision:" or "let's go with"; a requirement when it says "must ", "requirement:", "is
required", "needs to" or "we need"; the first that matches wins, case aside. Two kinds of
sentence state neither:

- a question (it ends with a question mark, ASCII or full-width): "do we need a cache?"
  asks, it does not decide;
- "must" as a guess about how something was or felt, not as an obligation: "that must have
  been hard", "you must've been proud", "it must be so exciting", "they must feel relieved",
  "you must really love it", "that must have taken a lot of work", "how tough it must be".

Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["Statement", "bare", "question_of", "sentences", "states"]

Statement = Literal["decision", "requirement"]

DECISION = ("we decided", "we've decided", "decided to", "decision:", "let's go with")
REQUIREMENT = ("must ", "requirement:", "is required", "needs to", "we need")
_FEELINGS = (
    "amazing|awesome|challenging|cool|difficult|exciting|exhausting|frustrating|fun|great|"
    "hard|inspiring|interesting|lovely|nice|overwhelming|rewarding|rough|scary|special|"
    "stressful|tough|wonderful"
)
_PARTICIPLES = r"been|felt|had|taken|made|gone|seen|done|got|gotten|meant|\w+ed"
# "must" followed by one of these guesses how something is, was or felt.
_GUESS_RE = re.compile(
    rf"\bmust(?:'ve\b| have (?:{_PARTICIPLES})\b| (?:really |so )?(?:feel|love|enjoy|miss)\b|"
    rf" be (?:so|really|such|very|quite|a lot|(?:{_FEELINGS}))\b| be\W*$)",
    re.IGNORECASE,
)
# A sentence ends at a line break, after a full-width end mark, or after ., ! or ? followed by
# white space (so "v1.2" and "e.g." stay whole).
_SPLIT_RE = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])|\n+")
_END_MARKS = ".!?\u3002\uff01\uff1f"


def sentences(text: str) -> list[tuple[str, bool]]:
    """The sentences of ``text``, stripped, each with whether it asks (a question mark among
    its end marks)."""
    found = []
    for part in _SPLIT_RE.split(text):
        raw = part.strip()
        marks = raw[len(bare(raw)) :]
        if bare(raw):
            found.append((raw, "?" in marks or "\uff1f" in marks))
    return found


def question_of(text: str, limit: int) -> str | None:
    """The last question ``text`` asks, on one line and cut to ``limit`` characters (the last
    one an ellipsis), or None when it asks nothing."""
    asked = [sentence for sentence, question in sentences(text) if question]
    if not asked:
        return None
    line = " ".join(asked[-1].split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "\u2026"


def bare(sentence: str) -> str:
    """``sentence`` without its end marks."""
    return sentence.rstrip(_END_MARKS)


def states(sentence: str, *, question: bool = False) -> Statement | None:
    """The decision or requirement ``sentence`` states, or None (see the module doc)."""
    if question:
        return None
    lowered = sentence.lower()
    if any(cue in lowered for cue in DECISION):
        return "decision"
    if any(cue in lowered for cue in REQUIREMENT if cue != "must ") or _obliges(lowered):
        return "requirement"
    return None


def _obliges(lowered: str) -> bool:
    """Whether the sentence says "must" as an obligation at least once."""
    return any(
        not _GUESS_RE.match(lowered, match.start()) for match in re.finditer(r"\bmust ", lowered)
    )
