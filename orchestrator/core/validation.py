"""Input validation: the one rule for text from outside (people's messages on the wire, agents'
memories at the gate), and the checks of a post's group, sender and text.

Part of the wire format (:mod:`orchestrator.core.wire`, which re-exports these names); it
changes when what we accept changes, not when a stream or topic does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.core.models import GROUP_ID_RE, SENDER_RE
from orchestrator.errors import ValidationError

__all__ = [
    "Post",
    "character_problem",
    "validate_group",
    "validate_post",
    "validate_sender",
    "validate_text",
]

# C0 and C1 controls but tab, line feed and carriage return; lone surrogates (not UTF-8); the
# bidirectional embeddings, overrides and isolates, which make text display in another order
# than it is read in. The marks (LRM, RLM, ALM) are allowed: right-to-left writing needs them.
_FORBIDDEN_RE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069]"
)


def validate_group(group: str) -> str:
    """Return ``group`` if it is a valid group id.

    Raises:
        ValidationError: naming what is wrong.
    """
    if not GROUP_ID_RE.match(group):
        raise ValidationError(
            "group",
            f"{group[:80]!r} is not a valid group id (lowercase letters, digits, '_' and '-', "
            "starting with a letter or digit, at most 64 characters)",
        )
    return group


def validate_sender(sender: str) -> str:
    """Return ``sender`` if it is an acceptable sender name."""
    if not SENDER_RE.match(sender):
        raise ValidationError(
            "sender",
            f"{sender[:80]!r} is not a valid sender name (letters, digits, spaces and . _ @ -, "
            "starting with a letter or digit, at most 64 characters)",
        )
    return sender


def character_problem(text: str) -> str | None:
    """What makes ``text`` unacceptable to store or show, character by character, if anything.

    The one rule for text from outside (people's messages on the wire, agents' memories at the
    gate): no control character but tab, line feed and carriage return (C0 and C1, NUL and
    ESC included), no lone surrogate, and no bidirectional embedding, override or isolate
    (U+202A-U+202E, U+2066-U+2069), which can show text in an order other than its own.

    Args:
        text: the text to check.

    Returns:
        ``None`` if every character is acceptable, else the first problem, e.g.
        ``"control character 0x00 is not allowed"``.
    """
    found = _FORBIDDEN_RE.search(text)
    if found is None:
        return None
    code = ord(found.group())
    if 0xD800 <= code <= 0xDFFF:
        return "not valid UTF-8 (a lone surrogate)"
    if code > 0xFF:
        return f"bidirectional control character U+{code:04X} is not allowed"
    return f"control character {code:#04x} is not allowed"


def validate_text(text: str, max_bytes: int) -> str:
    """Return ``text`` if it is a postable message (see :func:`character_problem`)."""
    if not text.strip():
        raise ValidationError("text", "the message is empty")
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        raise ValidationError("text", f"the message is {size} bytes; the limit is {max_bytes}")
    problem = character_problem(text)
    if problem is not None:
        raise ValidationError("text", problem)
    return text


@dataclass(frozen=True, slots=True, kw_only=True)
class Post:
    """A validated inbound message, before it has an id."""

    group: str
    text: str
    sender: str


def validate_post(group: str, text: str, sender: str, max_bytes: int) -> Post:
    """Validate the three parts of a post.

    Raises:
        ValidationError: for the first part that is not acceptable.
    """
    return Post(
        group=validate_group(group),
        text=validate_text(text, max_bytes),
        sender=validate_sender(sender),
    )
