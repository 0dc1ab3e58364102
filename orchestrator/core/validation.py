"""Input validation: the one rule for text from outside (people's messages on the wire, agents'
memories at the gate), and the checks of a post's group, sender and text, including the one rule
for who a person may not post as (an agent, or the arena itself).

Part of the wire format (:mod:`orchestrator.core.wire`, which re-exports these names); it
changes when what we accept changes, not when a stream or topic does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from orchestrator.core.models import GROUP_ID_RE, SENDER_RE, AgentSpec
from orchestrator.errors import ValidationError

__all__ = [
    "DEFAULT_SENDER",
    "NOTICE_SENDER",
    "RESERVED_SENDERS",
    "Post",
    "agent_handle",
    "agent_names",
    "character_problem",
    "sender_key",
    "validate_group",
    "validate_person",
    "validate_post",
    "validate_sender",
    "validate_text",
]

# Who the arena's own notices are from (a failed answer, the hop limit, a cap).
NOTICE_SENDER = "arena"
# Names no person may post under, besides the agents' own: they speak for the arena.
RESERVED_SENDERS = (NOTICE_SENDER, "system")
# Who a person's message is from when no sender is given: no agent may be called so either.
DEFAULT_SENDER = "user"

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


@lru_cache(maxsize=4096)
def sender_key(name: str) -> str:
    """What a name comes to when letter case, spaces and punctuation are ignored: names with the
    same key look alike to a reader (``Architect``, ``architect ``, ``ARCH-itect``)."""
    return "".join(char for char in name.casefold() if char.isalnum())


def agent_names(agents: Iterable[AgentSpec]) -> frozenset[str]:
    """Every agent's id and name: the names only that agent may speak under."""
    return frozenset(name for agent in agents for name in (agent.id, agent.name))


def agent_handle(name: str) -> str:
    """Return ``name`` if an agent may be called so: it must not read as a name the arena or a
    person speaks under (:data:`RESERVED_SENDERS`, :data:`DEFAULT_SENDER`; :func:`sender_key`).

    Raises:
        ValueError: naming the name it reads as.
    """
    for taken in (*RESERVED_SENDERS, DEFAULT_SENDER):
        if sender_key(name) == sender_key(taken):
            raise ValueError(f"{name!r} reads as {taken!r}, which is not an agent's: pick another")
    return name


def validate_person(sender: str, agents: Iterable[str] = ()) -> str:
    """Return ``sender`` if a person may post under it: neither a reserved name
    (:data:`RESERVED_SENDERS`) nor one of ``agents``, nor a look-alike of one
    (:func:`sender_key`), so that no person's message reads as an agent's or the arena's.

    Args:
        sender: the sender name of a person's message.
        agents: the team's agents' ids and names (:func:`agent_names`).

    Raises:
        ValidationError: naming the reserved name or the agent it looks like.
    """
    key = sender_key(sender)
    for reserved in RESERVED_SENDERS:
        if key == sender_key(reserved):
            raise _taken(sender, reserved, "reserved for the arena's own messages")
    for name in sorted(agents, key=lambda name: (name != sender, name)):  # itself first
        if key == sender_key(name):
            raise _taken(sender, name, "an agent's name: a person cannot post as an agent")
    return sender


def _taken(sender: str, name: str, what: str) -> ValidationError:
    said = repr(sender) if sender == name else f"{sender!r} reads as {name!r}, which"
    return ValidationError("sender", f"{said} is {what}")


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


def validate_post(
    group: str, text: str, sender: str, max_bytes: int, *, agents: Iterable[str] = ()
) -> Post:
    """Validate the three parts of a post; the sender must be a person's
    (:func:`validate_person`, against ``agents``: the team's agents' ids and names).

    Raises:
        ValidationError: for the first part that is not acceptable.
    """
    return Post(
        group=validate_group(group),
        text=validate_text(text, max_bytes),
        sender=validate_person(validate_sender(sender), agents),
    )
