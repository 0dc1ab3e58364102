"""The memory gate: the last check before a memory is stored, and the key for duplicates.

:func:`check` refuses content that is too short or too long, anything that looks like a
credential, characters people's messages may not hold either (control characters, NUL and
ESC included, and bidirectional overrides: :func:`orchestrator.core.wire.character_problem`), a
confidence below the floor, and writes beyond the daily limit. It is pure: the
caller counts what was written today and passes the number in. :func:`normalise` gives the form
in which two memories count as the same.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from orchestrator.core.wire import character_problem
from orchestrator.memory.gate.secrets import find_secret

__all__ = ["GateConfig", "RejectReason", "Rejection", "check", "normalise"]

RejectReason = Literal[
    "too_short", "too_long", "secret", "control_character", "low_confidence", "rate_limited"
]

_SPACE_RE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True, kw_only=True)
class GateConfig:
    """Limits the gate applies; lengths count characters of the stripped content."""

    min_length: int = 5
    max_length: int = 2000
    min_confidence: float = 0.7
    daily_limit: int = 50

    def __post_init__(self) -> None:
        if self.min_length < 0:
            raise ValueError("min_length must be >= 0")
        if self.max_length < self.min_length:
            raise ValueError("max_length must be >= min_length")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ValueError("min_confidence must be between 0 and 1")
        if self.daily_limit < 0:
            raise ValueError("daily_limit must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejection:
    """Why the gate refused a memory: ``str()`` reads ``"secret: looks like an api key"``."""

    reason: RejectReason
    detail: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


def check(
    content: str, confidence: float, *, config: GateConfig, written_today: int
) -> Rejection | None:
    """Decide whether a memory may be stored.

    The checks run in this order and the first failure is returned: length (too short, too
    long), secrets, characters, confidence, then the daily limit, so the reason given is the most
    informative one and a secret is reported even when another rule would refuse it later.

    Args:
        content: the memory's text; surrounding whitespace does not count.
        confidence: how sure the agent is, from 0 to 1; NaN counts as below any floor.
        config: the limits.
        written_today: memories the same writer has already stored today.

    Returns:
        ``None`` if the memory may be stored, else the reason it may not.
    """
    text = content.strip()
    if len(text) < config.min_length:
        return Rejection(
            reason="too_short",
            detail=f"{len(text)} characters, at least {config.min_length} needed",
        )
    if len(text) > config.max_length:
        return Rejection(
            reason="too_long",
            detail=f"{len(text)} characters, at most {config.max_length} allowed",
        )
    kind = find_secret(text)
    if kind is not None:
        return Rejection(reason="secret", detail=f"looks like {_article(kind)} {kind}")
    problem = character_problem(text)
    if problem is not None:
        return Rejection(reason="control_character", detail=problem)
    if not confidence >= config.min_confidence:  # written so that NaN is refused too
        return Rejection(
            reason="low_confidence",
            detail=f"confidence {confidence:g} is below {config.min_confidence:g}",
        )
    if written_today >= config.daily_limit:
        return Rejection(
            reason="rate_limited",
            detail=f"{written_today} memories written today, the limit is {config.daily_limit}",
        )
    return None


def normalise(text: str) -> str:
    """The form in which two memories count as duplicates.

    NFKC (full-width letters and ligatures become plain ones), casefold, whitespace runs become
    one space, and punctuation at either end is dropped, trailing full stops included:
    ``"We use JWT."`` and ``"  we  use jwt"`` both give ``"we use jwt"``.

    Args:
        text: a memory's content.

    Returns:
        The normalised text; ``""`` if nothing but punctuation and whitespace was given.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    collapsed = _SPACE_RE.sub(" ", folded)
    start, end = 0, len(collapsed)
    while start < end and _is_edge_noise(collapsed[start]):
        start += 1
    while end > start and _is_edge_noise(collapsed[end - 1]):
        end -= 1
    return collapsed[start:end]


def _is_edge_noise(char: str) -> bool:
    return char.isspace() or unicodedata.category(char).startswith("P")


def _article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"
